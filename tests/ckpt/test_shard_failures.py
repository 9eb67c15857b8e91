"""Sharded saves that fail: a re-save of a step whose earlier save was abandoned commits as usual,
and a full disk makes every rank give up at once with the same one-line error.

The ranks are real processes (one interpreter each), coordinating through the store alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangrun import Checkpoint
from gangrun._ckpt import shards
from gangrun._ckpt.rendezvous import open_save

SRC = Path(__file__).resolve().parents[2] / "src"

RANK = """
import json, os, sys, time, gangrun
from gangrun._errors import CommitFailed
root, rank, world, step, size, delay, protocol = sys.argv[1:8]
rank, world, step, size = int(rank), int(world), int(step), int(size)
ckpt = gangrun.Checkpoint.for_path(root, rank=rank, world_size=world, shard_timeout=300,
                                   protocol=protocol or None, cache_dir=root + f"-cache-{rank}")
time.sleep(float(delay))
started = time.monotonic()
try:
    info = ckpt.save(bytes([65 + rank]) * size, step=step, shard=True)
    out = {"seq": info.seq}
except CommitFailed as e:
    out = {"error": str(e), "type": type(e).__name__}
out["seconds"] = time.monotonic() - started
print(json.dumps(out), flush=True)
"""


def _gang(root: str, *, world: int, step: int, sizes: list[int], delays: list[float], protocol: str = "") -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(RANK), root, str(r), str(world), str(step),
                          str(sizes[r]), str(delays[r]), protocol],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for r in range(world)
    ]  # fmt: skip
    out = []
    try:
        for r, p in enumerate(procs):
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, f"rank {r} exited {p.returncode}: {stderr[-3000:]}"
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


@pytest.mark.parametrize("protocol", ["rename", "marker"])
def test_a_resave_of_an_abandoned_sharded_step_commits(tmp_path: Path, protocol: str) -> None:
    """A gang abandoned its save of step 2 (rank 0 gave it up and marked the rendezvous so), then was
    preempted before its next save removed the mark. Readmitted with the same restart attempt, it
    saves step 2 again, and rank 1 gets there before rank 0 replaces the rendezvous."""
    root = str(tmp_path / "ck" / "train")
    earlier = Checkpoint.for_path(root, rank=0, world_size=2, protocol=protocol)
    left = open_save(earlier._storage, earlier._attempt_path, rank=0, restart=0, step=2, seq_floor=1,
                     timeout=5, protocol=protocol)  # fmt: skip
    shards.abandon(left, "rank(s) 1 did not finish within 300s")
    rendezvous = Path(earlier._attempt_path) / "shards-r0-s2.json"
    assert "abandoned" in json.loads(rendezvous.read_text())
    time.sleep(1)  # a readmission takes far longer; a process's start time is known to 10 ms

    started = time.monotonic()
    results = _gang(root, world=2, step=2, sizes=[10, 10], delays=[2.0, 0.0], protocol=protocol)
    assert all("seq" in r for r in results), f"the re-save commits on every rank: {results}"
    assert time.monotonic() - started < 60, "no rank waited for the 300 s shard timeout"
    assert results[0]["seq"] == results[1]["seq"]
    loaded = [Checkpoint.for_path(root, rank=r, world_size=2, cache_dir=tmp_path / f"l{r}").load() for r in range(2)]
    assert [p.read_bytes() for p in loaded] == [b"A" * 10, b"B" * 10]
    assert not rendezvous.exists(), "the commit removed the rendezvous"


def test_a_failure_reported_after_rank_0_abandoned_the_save_leaves_nothing(tmp_path: Path) -> None:
    """Both ranks' input was bad: rank 0 abandoned the save and removed its folder before rank 1
    reported its own failure, whose marker would bring the folder back (seen once in CI)."""
    root = str(tmp_path / "ck" / "train")
    ck = Checkpoint.for_path(root, rank=0, world_size=2)
    save = open_save(ck._storage, ck._attempt_path, rank=0, restart=0, step=1, seq_floor=1, timeout=5)
    shards.give_up(save, 0, "nothing to save at 'x'")
    shards.give_up(save, 1, "nothing to save at 'y'")
    assert not [n for n in os.listdir(ck._attempt_path) if n.startswith("ckpt-")], os.listdir(ck._attempt_path)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB filesystem (tmpfs), mounted for the test: needs root (or CAP_SYS_ADMIN)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs to fill needs root; the injected-ENOSPC tests in test_shards.py still run")
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_disk_full_gives_up_on_every_rank_at_once(small_disk: Path) -> None:
    """Rank 1's part is larger than the whole disk: its write fails with ENOSPC, leaving the disk full.
    It removes its partial part, then marks the failure, so every rank (rank 0 collecting, rank 2
    waiting for the commit) gives up at once, all with the same line, and the disk is free again."""
    root = str(small_disk / "train")
    results = _gang(root, world=3, step=5, sizes=[100_000, 3 << 20, 100_000], delays=[0.0, 0.0, 0.0])
    assert all("error" in r for r in results), results
    lines = {r["error"] for r in results}
    assert len(lines) == 1, f"every rank gives up with the same line: {results}"
    line = lines.pop()
    assert "\n" not in line
    assert line.startswith("sharded save of step 5 abandoned: rank(s) 1 failed to write their part: [Errno 28]"), line
    assert all(r["seconds"] < 30 for r in results), f"no rank waited for the 300 s shard timeout: {results}"
    attempt = Path(root) / "attempt-1"
    assert not [n for n in os.listdir(attempt) if n.startswith("ckpt-")], "nothing of the save is left"
    assert shutil.disk_usage(small_disk).free > 1 << 20, "the partial part no longer fills the disk"
