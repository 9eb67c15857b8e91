"""Issue 13.2: restored copies never leak, whatever way the process ends.

Real processes and real signals: a worker restores a checkpoint into its process cache folder
(``$TMPDIR/gangrun-cache-<pid>-<start>-<id>``) and then exits normally, raises, is stopped by
SIGTERM (the stop notice ends with ``os._exit``, which skips atexit) or is SIGKILLed. The folder must
be gone afterwards, or, after SIGKILL, once the next process restores a checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gangrun import Checkpoint
from gangrun._ckpt import cache

WORKER = """
import sys, time, gangrun
ckpt = gangrun.context().checkpoint
path = ckpt.load()
assert path is not None and path.read_bytes() == b"state"
print(path, flush=True)
how = sys.argv[1]
if how == "raise":
    raise RuntimeError("training crashed")
if how == "wait":
    ctx = gangrun.context()
    while True:
        time.sleep(0.05)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TMPDIR": str(tmp_path / "tmp"),
        "GANGRUN_TASK": "train",
        "GANGRUN_ATTEMPT": "1",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "GANGRUN_CHECKPOINT_PATH": f"{tmp_path}/ck/train/attempt-1",
        "GANGRUN_GRACE_PERIOD": "5",
    }


def _saved(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    Checkpoint.for_path(str(tmp_path / "ck" / "train"), attempt=1, cache_dir=tmp_path / "c").save(b"state", step=1)


def _caches(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith(cache.PREFIX))


def _worker(tmp_path: Path, how: str) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WORKER), how],
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline().strip()
    assert line, proc.stderr.read()
    restored = Path(line)
    assert restored.is_relative_to(tmp_path / "tmp")
    if how == "wait":
        assert restored.is_file()
    return proc, restored


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_restored_copy_is_removed_when_the_process_ends(tmp_path: Path, how: str) -> None:
    _saved(tmp_path)
    proc, restored = _worker(tmp_path, how)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (0 if how == "exit" else 1), err
    assert not restored.exists() and _caches(tmp_path) == []


def test_restored_copy_is_removed_on_the_sigterm_stop_path(tmp_path: Path) -> None:
    _saved(tmp_path)
    proc, restored = _worker(tmp_path, "wait")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err  # ended by the stop notice's os._exit, atexit skipped
    assert not restored.exists() and _caches(tmp_path) == []


def test_copy_left_by_a_sigkilled_process_is_reclaimed_by_the_next_start(tmp_path: Path) -> None:
    _saved(tmp_path)
    proc, restored = _worker(tmp_path, "wait")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert restored.exists(), "SIGKILL leaves it; the next start must reclaim it"
    again, second = _worker(tmp_path, "exit")
    again.communicate(timeout=60)
    assert again.returncode == 0
    assert not restored.exists() and not second.exists() and _caches(tmp_path) == []


def test_reclaim_keeps_live_owners_and_removes_recycled_pids(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    parent = os.getppid()
    live = tmp / f"{cache.PREFIX}{parent}-{cache.start_ticks(parent)}-ab12"
    recycled = tmp / f"{cache.PREFIX}{parent}-{(cache.start_ticks(parent) or 0) + 1}-cd34"  # same pid, other start
    dead = tmp / f"{cache.PREFIX}{2**22 + 12345}-1-ef56"
    other = tmp / "gangrun-cache-not-ours"
    for d in (live, recycled, dead, other):
        (d / "x").mkdir(parents=True)
    removed = cache.reclaim(str(tmp))
    assert sorted(removed) == sorted([str(recycled), str(dead)])
    assert live.exists() and other.exists()
