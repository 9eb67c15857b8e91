"""B2: a background save snapshots at once, commits later, and reports a failure exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from gangrun import Checkpoint
from gangrun._ckpt import writer
from gangrun._core.worker_reports import first_step_message
from gangrun._errors import CommitFailed


def test_b2_async_save_snapshots_before_returning(tmp_path) -> None:
    src = tmp_path / "state"
    src.mkdir()
    (src / "w.bin").write_bytes(b"A" * 100_000)
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    info = ckpt.save(src, step=1, blocking=False)
    (src / "w.bin").write_bytes(b"B" * 100_000)  # training moves on while the writer uploads
    (src / "new.bin").write_bytes(b"C")
    assert ckpt.wait() is True
    path = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1).load()
    assert (path / "w.bin").read_bytes() == b"A" * 100_000 and not (path / "new.bin").exists()
    assert info.seq == 1 and info.uri.endswith("attempt-1/ckpt-000001")
    assert not [n for n in os.listdir(tmp_path / "ck" / "attempt-1") if ".stage-" in n], "snapshot left behind"


def test_b2_async_bytes_save_of_a_mutable_buffer_is_snapshotted(store) -> None:
    buf = bytearray(b"first")
    ckpt = store(1)
    ckpt.save(buf, blocking=False)
    buf[:] = b"later"
    ckpt.wait()
    assert store(1).load().read_bytes() == b"first"


def _failing_storage(ckpt: Checkpoint, gate: threading.Event | None = None) -> None:
    real = ckpt._storage.write_bytes

    def write_bytes(path, data, **kw):
        if gate is not None:
            gate.wait(5)
        if path.endswith("manifest.json"):
            raise OSError("disk full")
        return real(path, data, **kw)

    ckpt._storage.write_bytes = write_bytes


def test_b2_background_failure_is_raised_once_as_commit_failed(tmp_path) -> None:
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    _failing_storage(ckpt)
    ckpt.save(b"x", blocking=False)
    with pytest.raises(CommitFailed, match="disk full"):
        ckpt.wait()
    assert ckpt.wait() is True  # once only
    assert Checkpoint.for_path(str(tmp_path / "ck"), attempt=1).load() is None
    assert os.listdir(tmp_path / "ck" / "attempt-1") == [], "a failed save must clean up after itself"


def test_b2_next_save_waits_for_previous_and_raises_its_failure(tmp_path) -> None:
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    gate = threading.Event()
    _failing_storage(ckpt, gate)
    ckpt.save(b"x", blocking=False)
    assert writer.ACTIVE.count == 1 and ckpt.wait(timeout=0.01) is False
    gate.set()
    with pytest.raises(CommitFailed):
        ckpt.save(b"y", blocking=False)
    assert ckpt.wait() is True


def test_b2_writer_thread_that_cannot_start_fails_that_save_only(tmp_path, monkeypatch) -> None:
    # e.g. "can't start new thread" (thread limit, interpreter shutdown): that save fails, the
    # checkpoint stays usable.
    class Unstartable(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    monkeypatch.setattr(writer.threading, "Thread", Unstartable)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        ckpt.save(b"x", blocking=False)
    monkeypatch.undo()
    assert writer.ACTIVE.count == 0 and ckpt.wait() is True
    ckpt.save(b"y", step=2, blocking=False)
    assert ckpt.wait() is True
    assert Checkpoint.for_path(str(tmp_path / "ck"), attempt=1).load().read_bytes() == b"y"


def test_b2_blocking_save_failure_raises_commit_failed(tmp_path) -> None:
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    _failing_storage(ckpt)
    with pytest.raises(CommitFailed, match="disk full"):
        ckpt.save(b"x")


def test_b2_snapshot_false_reads_the_source_in_the_background(tmp_path) -> None:
    src = tmp_path / "step-10"
    src.mkdir()
    (src / "m.bin").write_bytes(b"m" * 1000)
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    ckpt.save(src, blocking=False, snapshot=False)
    ckpt.wait()
    assert (src / "m.bin").exists(), "the caller's data is never moved or deleted"
    assert (Checkpoint.for_path(str(tmp_path / "ck"), attempt=1).load() / "m.bin").read_bytes() == b"m" * 1000


def test_b2_save_started_by_a_thread_that_outlives_main_is_flushed_at_exit(tmp_path) -> None:
    # The main thread returns first; the training thread it left running saves in the background
    # and ends. Interpreter exit joins that thread, then must still wait for its save.
    src = tmp_path / "state"
    src.mkdir()
    for i in range(8):
        (src / f"shard-{i}.bin").write_bytes(os.urandom(1 << 20))
    script = f"""
import threading, time, gangrun
def train():
    time.sleep(0.2)
    gangrun.Checkpoint.for_path({str(tmp_path / "ck")!r}, attempt=1).save({str(src)!r}, step=4, blocking=False)
threading.Thread(target=train).start()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, cache_dir=tmp_path / "cache")
    ckpt.load()
    assert ckpt.loaded_step == 4, done.stderr


def test_b5_commit_appends_one_event_line(tmp_path) -> None:
    events = tmp_path / "events.jsonl"
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=2, task="train", rank=0, events_file=str(events))
    ckpt.save(b"a", step=6)
    ckpt.save(b"b", blocking=False)
    ckpt.wait()
    lines = [e for x in events.read_text().splitlines() if (e := json.loads(x))["type"] == "checkpoint_committed"]
    assert [(e["type"], e["task"], e["attempt"], e["rank"], e["seq"], e["step"]) for e in lines] == [
        ("checkpoint_committed", "train", 2, 0, 1, 6),
        ("checkpoint_committed", "train", 2, 0, 2, None),
    ]
    assert lines[0]["uri"] == f"{tmp_path}/ck/attempt-2/ckpt-000001" and isinstance(lines[0]["time"], float)


def test_work_lost_counts_from_when_the_state_was_taken_so_a_commit_says_when_that_was(tmp_path) -> None:
    """A background save's commit line carries when save() was called (its state), not only when it committed."""
    events = tmp_path / "events.jsonl"
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, task="train", rank=0, events_file=str(events))
    before = time.time()
    ckpt.save(b"a" * 1000, step=3, blocking=False)
    ckpt.wait()
    (line,) = [e for x in events.read_text().splitlines() if (e := json.loads(x))["type"] == "checkpoint_committed"]
    assert before <= line["takenAt"] <= line["time"]
    assert line["saveSeconds"] == round(line["time"] - line["takenAt"], 3) and line["final"] is False


def test_the_first_step_after_a_load_is_reported_once(tmp_path) -> None:
    events = tmp_path / "events.jsonl"
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, task="train", rank=0, events_file=str(events))
    ckpt.load()  # nothing yet: the first step after it still ends the restoring time
    ckpt.save(b"a", step=1)
    ckpt.save(b"b", step=2)
    steps = [e for x in events.read_text().splitlines() if (e := json.loads(x))["type"] == "first_step"]
    assert [(e["task"], e["attempt"], e["rank"], e["step"]) for e in steps] == [("train", 1, 0, 1)]


def test_the_first_step_report_names_the_step_loaded_not_the_step_saved_or_a_fresh_start(tmp_path) -> None:
    events = tmp_path / "events.jsonl"
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, task="train", rank=0, events_file=str(events))
    ckpt.load()
    ckpt.save(b"a", step=15)
    again = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, task="train", rank=0, events_file=str(events))
    again.load()  # a restarted process loads step 15
    again.save(b"b", step=16)
    steps = [e for x in events.read_text().splitlines() if (e := json.loads(x))["type"] == "first_step"]
    assert [(e["step"], e["loaded"], e["loadedStep"]) for e in steps] == [(15, False, None), (16, True, 15)]
    assert [first_step_message(e) for e in steps] == ["rank 0 took its first step (nothing to load: a fresh start)",
                                                      "rank 0 took its first step after loading step 15"]


def test_a_save_asking_whether_it_is_the_final_one_does_not_make_the_program_a_listener(tmp_path) -> None:
    """A program that never read the stop flag still exits at SIGTERM after its saves are flushed."""
    from gangrun._ckpt import notice

    notice.STATE.listening = False
    Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, rank=0).save(b"a", step=1)
    assert notice.STATE.listening is False
