"""B1 for sharded saves: a rank SIGKILLed at any moment never leaves a committed checkpoint with a
missing or torn part.

Each round forks a gang of real processes (forked, not spawned, so a round costs milliseconds). Every
rank saves a directory part of a few hundred KB, step after step; rank 0 reports each step whose save
returned (committed). The test SIGKILLs one random rank at a random moment, then the rest (the gang
is restarted, as JobSet would), and every rank of the next gang must load the same checkpoint, at
least as new as the last reported, with every part complete. The next round resumes from there
with the next restart attempt, so leftovers of killed saves pile up and must be ignored.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from gangrun import Checkpoint

FILES = 6
FILE_SIZE = 64 << 10
ROUNDS = 20


def _content(step: int, rank: int, i: int) -> bytes:
    return (f"{step}:{rank}:{i}:".encode() * (FILE_SIZE // 6 + 1))[: FILE_SIZE + i]


def _rank(root: str, protocol: str, rank: int, world: int, restart: int, start: int, report_fd: int, work: Path) -> None:
    ckpt = Checkpoint.for_path(
        root, attempt=1, rank=rank, world_size=world, restart_attempt=restart, protocol=protocol,
        cache_dir=work / f"cache-{rank}", shard_timeout=30,
    )  # fmt: skip
    src = work / f"state-{rank}"
    step = start
    while True:
        for i in range(FILES):
            d = src / f"d{i % 2}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"f{i}.bin").write_bytes(_content(step, rank, i))
        ckpt.save(src, step=step, shard=True)
        if rank == 0:
            os.write(report_fd, f"{step}\n".encode())
        step += 1


def _unfinished(folder: Path) -> set[str]:
    """Names of sharded saves in progress: a pending folder, or a final name without its manifest."""
    if not folder.exists():
        return set()
    return {p.name for p in folder.iterdir() if ".shard-" in p.name or (p.name.startswith("ckpt-") and "." not in p.name and not (p / "manifest.json").exists())}


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("protocol", ["rename", "marker"])
def test_b1_sigkill_of_one_rank_mid_save_never_commits_a_missing_or_torn_part(tmp_path: Path, protocol: str, world: int) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    root = str(tmp_path / "ck" / "train")
    confirmed = 0
    mid_write = 0
    for rnd in range(ROUNDS):
        before = _unfinished(Path(root) / "attempt-1")
        r, w = os.pipe()
        pids = []
        for rank in range(world):
            pid = os.fork()
            if pid == 0:  # a rank: never returns into pytest
                try:
                    os.close(r)
                    _rank(root, protocol, rank, world, rnd, confirmed + 1, w, tmp_path / f"w{rnd}")
                finally:
                    os._exit(1)
            pids.append(pid)
        os.close(w)
        time.sleep(rng.uniform(0.05, 0.4))
        victim = rng.randrange(world)
        os.kill(pids[victim], signal.SIGKILL)
        time.sleep(rng.uniform(0.0, 0.05))  # the others go on a moment: rank 0 may be waiting to commit
        for pid in pids:
            if pid != pids[victim]:
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            os.waitpid(pid, 0)
        with os.fdopen(r) as f:
            reported = [int(x) for x in f.read().split()]
        confirmed = max([confirmed, *reported])
        mid_write += bool(_unfinished(Path(root) / "attempt-1") - before)  # this round's kill caught a save open
        ctx = f"seed={seed} round={rnd} victim={victim} confirmed={confirmed}"
        loaded = set()
        for rank in range(world):
            ckpt = Checkpoint.for_path(root, attempt=1, rank=rank, world_size=world, cache_dir=tmp_path / "load" / f"{rnd}-{rank}")
            path = ckpt.load()
            if confirmed:
                assert path is not None and ckpt.loaded_step >= confirmed, ctx
            if path is None:
                loaded.add(None)
                continue
            loaded.add((ckpt.loaded_seq, ckpt.loaded_step))
            assert ckpt.loaded_world_size == world, ctx
            for i in range(FILES):
                got = (path / f"d{i % 2}" / f"f{i}.bin").read_bytes()
                assert got == _content(ckpt.loaded_step, rank, i), f"rank {rank} file {i} torn: {ctx}"
        assert len(loaded) == 1, f"ranks loaded different checkpoints {loaded}: {ctx}"
        step = next(iter(loaded))
        if step is not None:
            confirmed = step[1]
    assert mid_write >= ROUNDS // 4, f"only {mid_write} kills landed mid-save (seed={seed})"
    assert confirmed >= ROUNDS // 2, f"saves must also commit between the kills (seed={seed}, step {confirmed})"
