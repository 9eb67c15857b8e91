"""Sharded saves (issue 10.1): every rank saves its part, one commit once all parts are in.

The gangs are real processes (one interpreter per rank) on a local filesystem and on the S3-protocol
server; edge cases run ranks as threads of one process, which coordinate through the store exactly
as processes do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from gangrun import Checkpoint
from gangrun._ckpt import transfer
from gangrun._errors import CheckpointError, CommitFailed, GangrunError, UsageError
from gangrun.checkpoint import SaveInfo

RANK_SCRIPT = """
import json, sys, pathlib, gangrun
root, rank, world, opts, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), pathlib.Path(sys.argv[5])
ckpt = gangrun.Checkpoint.for_path(root, attempt=1, rank=rank, world_size=world, keep_last=2,
                                   storage_options=opts or None, cache_dir=work / f"cache-{rank}")
for step in (1, 2):
    ckpt.save(f"rank-{rank}-step-{step}".encode(), step=step, shard=True)
part = work / f"part-{rank}"
(part / "sub" / "empty").mkdir(parents=True)
(part / "sub" / "w.bin").write_bytes(bytes([rank]) * (100_000 + rank))
(part / "step").write_text("3")
info = ckpt.save(part, step=3, shard=True, blocking=False)   # async: snapshot now, commit in the background
ckpt.wait()
print(json.dumps({"seq": info.seq, "uri": info.uri}))
"""


def _run_gang(root: str, world: int, work: Path, opts: dict | None) -> list[dict]:
    def start(r: int) -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", textwrap.dedent(RANK_SCRIPT), root, str(r), str(world), json.dumps(opts or {}), str(work)]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = [start(r) for r in range(world)]
    out = []
    for r, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=180)
        assert p.returncode == 0, f"rank {r}: {stderr}"
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("where", ["local", "s3"])
def test_sharded_save_commits_once_every_rank_wrote_its_part(tmp_path: Path, request, world: int, where: str) -> None:
    if where == "s3":
        root, opts = request.getfixturevalue("s3_root")
    else:
        root, opts = str(tmp_path / "ck" / "train"), None
    infos = _run_gang(root, world, tmp_path, opts)
    assert len({(i["seq"], i["uri"]) for i in infos}) == 1, f"every rank names the same checkpoint: {infos}"
    for r in range(world):  # the next attempt, every rank: its own part of the newest, the same one
        ckpt = Checkpoint.for_path(root, attempt=2, rank=r, world_size=world, storage_options=opts, cache_dir=tmp_path / f"load-{r}")
        path = ckpt.load()
        assert (ckpt.loaded_from, ckpt.loaded_step, ckpt.loaded_world_size, ckpt.loaded_seq) == ("previous", 3, world, infos[0]["seq"])
        assert (path / "sub" / "w.bin").read_bytes() == bytes([r]) * (100_000 + r)
        assert (path / "sub" / "empty").is_dir() and (path / "step").read_text() == "3"
        other = (r + 1) % world
        assert (ckpt.shard_path(other) / "sub" / "w.bin").read_bytes() == bytes([other]) * (100_000 + other)
    names = Checkpoint.for_path(root, attempt=1, storage_options=opts)._storage.list_names(
        Checkpoint.for_path(root, attempt=1, storage_options=opts)._attempt_path
    )
    assert sorted(names) == ["ckpt-000002", "ckpt-000003"], f"keep_last=2 counts a sharded checkpoint once; no leftovers: {names}"


def _gang_in_threads(world: int, fn) -> list[object]:
    results: list[object] = [None] * world

    def run(r: int) -> None:
        try:
            results[r] = fn(r)
        except GangrunError as e:  # handed to the test
            results[r] = e

    threads = [threading.Thread(target=run, args=(r,), name=f"rank-{r}") for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def _ck(root: Path, rank: int, world: int, **kw) -> Checkpoint:
    kw.setdefault("cache_dir", root.parent / f"cache-{rank}")
    return Checkpoint.for_path(str(root), rank=rank, world_size=world, **kw)


@pytest.mark.parametrize("protocol", ["rename", "marker"])
def test_save_that_a_rank_never_joins_is_abandoned_cleaned_up_and_logged(tmp_path: Path, protocol: str, capsys) -> None:
    root = tmp_path / "ck" / "train"
    _gang_in_threads(2, lambda r: _ck(root, r, 2, protocol=protocol).save(f"p{r}".encode(), step=1, shard=True))
    late = _ck(root, 1, 2, shard_timeout=30, protocol=protocol)  # rank 1 of this gang, which is late
    ckpt = _ck(root, 0, 2, shard_timeout=0.5, protocol=protocol)
    with pytest.raises(CommitFailed, match="rank\\(s\\) 1 did not finish"):
        ckpt.save(b"lonely", step=2, shard=True)  # rank 1 died before saving step 2
    assert "sharded save of step 2 abandoned: rank(s) 1 did not finish" in capsys.readouterr().err
    left = sorted(os.listdir(root / "attempt-1"))
    assert left == ["ckpt-000001", "shards-r0-s2.json"], "nothing of the abandoned save is left but its mark"
    assert "abandoned" in json.loads((root / "attempt-1" / "shards-r0-s2.json").read_text())
    started = time.monotonic()
    with pytest.raises(CommitFailed, match="step 2 abandoned: rank\\(s\\) 1 did not finish"):  # told at once
        late.save(b"late", step=2, shard=True)
    assert time.monotonic() - started < 10
    loaded = [_ck(root, r, 2).load().read_bytes() for r in range(2)]
    assert loaded == [b"p0", b"p1"]
    _gang_in_threads(2, lambda r: _ck(root, r, 2, protocol=protocol).save(f"q{r}".encode(), step=3, shard=True))
    assert "shards-r0-s2.json" not in os.listdir(root / "attempt-1"), "the next save removes the mark"


@pytest.mark.parametrize(
    "bad",
    [pytest.param({1}, id="rank-1"), pytest.param({0}, id="rank-0"), pytest.param({0, 1}, id="every-rank")],
)
def test_rank_with_nothing_to_save_ends_the_save_at_once_on_every_rank(tmp_path: Path, bad: set[int]) -> None:
    root = tmp_path / "ck" / "train"
    missing = tmp_path / "no-such-dir"

    def save(r: int) -> object:
        data = missing if r in bad else b"ok"
        return _ck(root, r, 2, shard_timeout=30).save(data, step=1, shard=True)

    started = time.monotonic()
    results = _gang_in_threads(2, save)
    assert time.monotonic() - started < 10, f"no rank waited for the 30 s timeout: {results}"
    for r in range(2):  # the rank with bad input gets its own error; the others learn the save is off
        assert isinstance(results[r], UsageError if r in bad else CommitFailed), results
    assert "nothing to save" in str(results[min(bad)])
    left = os.listdir(root / "attempt-1") if (root / "attempt-1").exists() else []
    assert not [n for n in left if n.startswith("ckpt-")], f"nothing of it is left: {left}"


def test_rank_0_failing_mid_write_ends_the_save_on_every_rank(tmp_path: Path) -> None:
    root = tmp_path / "ck" / "train"

    def save(r: int) -> object:
        ck = _ck(root, r, 2, shard_timeout=30)
        if r == 0:
            ck._storage.put_bytes = _fail
        return ck.save(f"p{r}".encode(), step=1, shard=True)

    started = time.monotonic()
    results = _gang_in_threads(2, save)
    assert time.monotonic() - started < 10, f"rank 1 did not wait for the 30 s timeout: {results}"
    assert all(isinstance(x, CommitFailed) for x in results), results
    assert str(results[0]) == str(results[1]), "every rank raises the same line"
    assert "step 1 abandoned: rank(s) 0 failed to write their part: [Errno 28] No space left" in str(results[0])


def test_rank_failing_mid_write_makes_rank_0_give_up_without_waiting(tmp_path: Path) -> None:
    root = tmp_path / "ck" / "train"
    src = tmp_path / "part"
    src.mkdir()
    (src / "a").write_bytes(b"a")

    def save(r: int) -> object:
        ck = _ck(root, r, 2, shard_timeout=30)
        if r == 1:
            ck._storage.put_file = _fail
        return ck.save(src, step=1, shard=True)

    results = _gang_in_threads(2, save)
    assert all(isinstance(x, CommitFailed) for x in results), results
    assert str(results[0]) == str(results[1]), "every rank raises the same line"
    assert "rank(s) 1 failed to write their part: [Errno 28] No space left" in str(results[0])
    assert os.listdir(root / "attempt-1") == ["shards-r0-s1.json"], "no part is left, only the abandoned mark"


def _fail(*_a: object, **_k: object) -> object:
    raise OSError(28, "No space left on device")


def test_loading_with_another_world_size_gives_every_part(tmp_path: Path) -> None:
    root = tmp_path / "ck" / "train"
    _gang_in_threads(2, lambda r: _ck(root, r, 2).save(f"p{r}".encode(), step=4, shard=True))
    grown = _ck(root, 2, 3, attempt=2)
    assert grown.load() is None and grown.loaded_world_size == 2 and grown.loaded_step == 4
    assert [grown.shard_path(r).read_bytes() for r in range(2)] == [b"p0", b"p1"]
    with pytest.raises(UsageError, match="rank must be in 0..1"):
        grown.shard_path(2)


def test_a_missing_part_makes_every_rank_skip_the_checkpoint(tmp_path: Path, capsys) -> None:
    root = tmp_path / "ck" / "train"
    _gang_in_threads(2, lambda r: _ck(root, r, 2).save(f"a{r}".encode(), step=1, shard=True))
    _gang_in_threads(2, lambda r: _ck(root, r, 2).save(f"b{r}".encode(), step=2, shard=True))
    (root / "attempt-1" / "ckpt-000002" / "data" / "rank-00001" / "payload").unlink()
    loaded = [_ck(root, r, 2, cache_dir=tmp_path / f"l{r}").load().read_bytes() for r in range(2)]
    assert loaded == [b"a0", b"a1"], "both ranks fall back to the same checkpoint"
    assert capsys.readouterr().err.count("rank 1's payload is missing") == 2


def test_a_corrupt_own_part_withdraws_the_checkpoint_instead_of_diverging(tmp_path: Path) -> None:
    root = tmp_path / "ck" / "train"
    _gang_in_threads(2, lambda r: _ck(root, r, 2).save(f"a{r}".encode(), step=1, shard=True))
    _gang_in_threads(2, lambda r: _ck(root, r, 2).save(f"b{r}".encode(), step=2, shard=True))
    (root / "attempt-1" / "ckpt-000002" / "data" / "rank-00001" / "payload").write_bytes(b"X1")  # same size
    with pytest.raises(CheckpointError, match="withdrawn"):
        _ck(root, 1, 2, cache_dir=tmp_path / "l1").load()
    loaded = [_ck(root, r, 2, cache_dir=tmp_path / f"m{r}").load().read_bytes() for r in range(2)]
    assert loaded == [b"a0", b"a1"], "after the restart every rank resumes from the previous one"


def test_shard_save_needs_step_growing_steps_and_the_world_size(tmp_path: Path) -> None:
    root = tmp_path / "ck" / "train"
    with pytest.raises(UsageError, match="needs step="):
        _ck(root, 0, 1).save(b"x", shard=True)
    with pytest.raises(UsageError, match="world_size"):
        Checkpoint.for_path(str(root), cache_dir=tmp_path / "c").save(b"x", step=1, shard=True)
    ck = _ck(root, 0, 1)
    ck.save(b"x", step=5, shard=True)
    with pytest.raises(UsageError, match="must grow"):
        ck.save(b"y", step=5, shard=True)
    assert _ck(root, 0, 1, attempt=1, cache_dir=tmp_path / "d").load().read_bytes() == b"x"


def test_worker_context_gives_the_checkpoint_the_gangs_world_size_and_restart(tmp_path: Path) -> None:
    from gangrun import Context

    env = {
        "GANGRUN_TASK": "train", "GANGRUN_ATTEMPT": "2", "JOBSET_RESTART_ATTEMPT": "3", "RANK": "2",
        "WORLD_SIZE": "4", "NNODES": "2", "NPROC_PER_NODE": "2", "NODE_RANK": "1", "LOCAL_RANK": "0",
        "GANGRUN_CHECKPOINT_PATH": f"{tmp_path}/ck/train/attempt-2",
    }  # fmt: skip
    ckpt = Context.from_env(env, install_stop_handler=False).checkpoint
    assert ckpt is not None
    assert (ckpt.rank, ckpt.world_size, ckpt.restart_attempt, ckpt.attempt) == (2, 4, 3, 2)


@pytest.mark.parametrize("where", ["rename", "marker", "s3"])
def test_save_at_the_step_a_killed_gang_was_saving_commits_after_a_readmission(tmp_path: Path, request, where: str) -> None:
    """A preempted gang killed mid-save left that save's rendezvous. Readmitted, it runs the same
    attempt with the same restart attempt (a readmission is not a JobSet restart), resumes from
    the previous checkpoint and saves the same step again: a rank that reads the leftover
    rendezvous before rank 0 replaces it must still end up in the new save, not wait for the old one."""
    from gangrun._ckpt import shards
    from gangrun._ckpt.rendezvous import open_save

    if where == "s3":
        root, opts = request.getfixturevalue("s3_root")
        protocol = None
    else:
        root, opts, protocol = str(tmp_path / "ck" / "train"), None, where

    def ck(rank: int) -> Checkpoint:
        return Checkpoint.for_path(root, rank=rank, world_size=2, shard_timeout=20, protocol=protocol,
                                   storage_options=opts, cache_dir=tmp_path / f"c{rank}-{uuid.uuid4().hex[:6]}")  # fmt: skip

    _gang_in_threads(2, lambda r: ck(r).save(f"one-{r}".encode(), step=1, shard=True))
    killed = ck(1)
    # What the killed gang left of its save of step 2: rank 0 opened it (pending folder and
    # rendezvous) and rank 1 wrote its part, then both were killed before the commit.
    stale = open_save(killed._storage, killed._attempt_path, rank=0, restart=0, step=2, seq_floor=1, timeout=5, protocol=protocol)
    shards.write_part(stale, 1, transfer.source_of(b"old-1"))

    def readmitted(r: int) -> object:
        if r == 0:
            time.sleep(0.5)  # rank 1 reaches the save first and finds the old rendezvous
        return ck(r).save(f"two-{r}".encode(), step=2, shard=True)

    started = time.monotonic()
    results = _gang_in_threads(2, readmitted)
    assert all(isinstance(x, SaveInfo) for x in results), results
    assert time.monotonic() - started < 10, "committed without waiting for the old save to time out"
    assert results[0].seq == results[1].seq > stale.seq
    loaded = [ck(r) for r in range(2)]
    assert [c.load().read_bytes() for c in loaded] == [b"two-0", b"two-1"]
    assert {c.loaded_seq for c in loaded} == {results[0].seq}
