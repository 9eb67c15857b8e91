"""The parallel transfers: many files on several threads come back byte for byte, a bad file among
many still rejects the save, the snapshot is a real copy, and manifests written so far stay readable."""

from __future__ import annotations

import json
import os
import threading
import time
import zlib
from pathlib import Path

import crc32c
import pytest

from gangrun import Checkpoint
from gangrun._ckpt import pool, storage, transfer

CHUNK = storage.CHUNK
SIZES = [0, 1, 7, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 4096, 65536]


def _content(i: int, size: int, tag: bytes = b"") -> bytes:
    seed = tag + f"file-{i}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


def _make(root: Path, tag: bytes = b"", n: int = 40) -> dict[str, bytes]:
    want = {}
    for i in range(n):
        rel = f"g{i % 5}/{'deep/' if i % 3 == 0 else ''}f{i:03d}.bin"
        want[rel] = _content(i, SIZES[i % len(SIZES)], tag)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(want[rel])
    (root / "empty" / "nested").mkdir(parents=True)
    return want


def _read(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("blocking", [True, False])
def test_many_files_round_trip_on_several_threads(store, tmp_path, blocking) -> None:
    src = tmp_path / "state"
    want = _make(src)
    ckpt = store(1)
    ckpt.save(src, step=1, blocking=blocking)
    ckpt.wait()
    path = store(1).load()
    assert _read(path) == want
    assert (path / "empty" / "nested").is_dir()


def test_manifest_lists_files_in_walk_order_with_their_crc(tmp_path) -> None:
    src = tmp_path / "state"
    want = _make(src)
    Checkpoint.for_path(str(tmp_path / "ck"), attempt=1).save(src)
    doc = json.loads((tmp_path / "ck" / "attempt-1" / "ckpt-000001" / "manifest.json").read_bytes())
    walked = [rel for rel, _ in transfer.source_of(str(src)).files]
    assert [f["path"] for f in doc["files"]] == walked
    assert doc["checksum"] == "crc32c"
    assert all(f["crc32"] == crc32c.crc32c(want[f["path"]]) and f["size"] == len(want[f["path"]]) for f in doc["files"])


def test_one_bad_file_among_many_falls_back_and_leaves_no_partial_copy(tmp_path) -> None:
    src = tmp_path / "state"
    _make(src, b"old")
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, keep_last=None)
    ckpt.save(src, step=1)
    want = _make(tmp_path / "state2", b"new")
    ckpt.save(tmp_path / "state2", step=2)
    victim = tmp_path / "ck" / "attempt-1" / "ckpt-000002" / "data" / "g3" / "f008.bin"
    victim.write_bytes(b"X" + victim.read_bytes()[1:])
    cache = tmp_path / "cache"
    loader = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, cache_dir=cache)
    path = loader.load()
    assert loader.loaded_step == 1 and _read(path) != want
    assert [p.name for p in cache.iterdir()] == ["attempt-1-seq-1"], "the rejected copy must be removed"


def test_async_snapshot_is_a_copy_not_a_link(tmp_path) -> None:
    # Training that rewrites files in place (open "wb" truncates the same inode) must not reach
    # the checkpoint: the snapshot owns its own inodes.
    src = tmp_path / "state"
    want = _make(src, b"before")
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    ckpt.save(src, blocking=False)
    for rel in want:
        with open(src / rel, "wb") as f:
            f.write(b"after")
    ckpt.wait()
    assert _read(Checkpoint.for_path(str(tmp_path / "ck"), attempt=1).load()) == want


def test_snapshot_copies_without_copy_file_range(tmp_path, monkeypatch) -> None:
    def unsupported(*_a, **_k):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(transfer.os, "copy_file_range", unsupported)
    src = tmp_path / "state"
    want = _make(src)
    staged = transfer.snapshot(transfer.source_of(str(src)), str(tmp_path / "stage"))
    assert {rel: Path(p).read_bytes() for rel, p in staged.files} == want
    staged.discard()
    assert not (tmp_path / "stage").exists()


def test_manifest_written_by_the_first_release_still_loads(tmp_path) -> None:
    # Byte for byte what format 1 wrote (keys sorted, indent 1); later releases must keep reading it.
    ck = tmp_path / "ck" / "attempt-1" / "ckpt-000001"
    (ck / "data").mkdir(parents=True)
    (ck / "data" / "payload").write_bytes(b"state-7")
    doc = {
        "attempt": 1, "checksum": "crc32", "created": 1700000000.0, "dirs": [],
        "files": [{"crc32": zlib.crc32(b"state-7"), "path": "payload", "size": 7}],
        "format": 1, "kind": "bytes", "name": "payload", "rank": 0, "seq": 1, "step": 7, "task": None,
    }  # fmt: skip
    (ck / "manifest.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    loader = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    assert loader.load().read_bytes() == b"state-7" and loader.loaded_step == 7


def test_manifest_with_an_unknown_checksum_is_refused(tmp_path, capsys) -> None:
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1, keep_last=None)
    ckpt.save(b"one", step=1)
    ckpt.save(b"two", step=2)
    m = tmp_path / "ck" / "attempt-1" / "ckpt-000002" / "manifest.json"
    m.write_text(m.read_text().replace('"checksum": "crc32c"', '"checksum": "xxh3"'))
    loader = Checkpoint.for_path(str(tmp_path / "ck"), attempt=1)
    assert loader.load().read_bytes() == b"one"
    assert "unknown checksum" in capsys.readouterr().err


def test_run_all_keeps_order_and_uses_several_threads() -> None:
    seen: set[str] = set()

    def work(x: int) -> int:
        seen.add(threading.current_thread().name)
        time.sleep(0.005)
        return x * x

    assert pool.run_all(work, list(range(20)), 4) == [x * x for x in range(20)]
    assert len(seen) > 1
    assert pool.run_all(work, [3], 4) == [9] and pool.run_all(work, [], 4) == []


def test_run_all_stops_at_the_first_error_and_joins_every_thread() -> None:
    started: list[int] = []
    running = threading.Event()

    def work(x: int) -> int:
        started.append(x)
        if x == 2:
            raise ValueError("bad file")
        running.set()
        time.sleep(0.02)
        return x

    with pytest.raises(ValueError, match="bad file"):
        pool.run_all(work, list(range(100)), 4)
    assert len(started) < 100, "no new item starts once one failed"
    assert not [t for t in threading.enumerate() if t.name == "gangrun-ckpt-io"], "every thread joined"


def test_raw_writes_are_completed_when_short(tmp_path) -> None:
    class Short:
        def __init__(self) -> None:
            self.out = bytearray()

        def write(self, view) -> int:
            n = min(len(view), 1000)
            self.out += view[:n]
            return n

    f, data = Short(), os.urandom(5000)
    storage._write_all(f)(memoryview(data))
    assert bytes(f.out) == data
