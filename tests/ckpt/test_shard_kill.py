"""B1 for sharded saves: a rank SIGKILLed at any moment never leaves a committed checkpoint with a
missing or torn part.

Each round forks a gang of real processes (forked, not spawned, so a round costs milliseconds). Every
rank saves a directory part of a few hundred KB, step after step; rank 0 reports each step whose
save returned (committed). The test SIGKILLs one random rank at a random moment, then the rest (the gang
is restarted, as JobSet would), and every rank of the next gang must load the same checkpoint, at
least as new as the last reported, with every part complete. The next round resumes from there, so
leftovers of killed saves pile up and must be ignored.

Half the rounds kill at any moment; the other half wait until the victim is writing its part and
kill it at a random point of that write, which the disk makes long enough to hit (a pause before
each file, in the rank's own process, random so that the ranks finish their parts at different times). A round counts as "mid-write" when the victim's part folder
of the open save is there but not whole. Rounds go in pairs with the same restart
attempt, the second like a readmission after a preemption: it saves again the step the first was
saving when it was killed, next to that save's leftover rendezvous.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from gangrun import Checkpoint
from gangrun._ckpt.layout import part_name

FILES = 6
FILE_SIZE = 64 << 10
ROUNDS = 20
FILE_PAUSE = 0.015  # seconds before each file of a part, on average: a slow disk widens the window of a write


def _content(step: int, rank: int, i: int) -> bytes:
    return (f"{step}:{rank}:{i}:".encode() * (FILE_SIZE // 6 + 1))[: FILE_SIZE + i]


def _rank(root: str, protocol: str, rank: int, world: int, restart: int, start: int, report_fd: int, work: Path) -> None:
    ckpt = Checkpoint.for_path(
        root, attempt=1, rank=rank, world_size=world, restart_attempt=restart, protocol=protocol,
        cache_dir=work / f"cache-{rank}", shard_timeout=30,
    )  # fmt: skip
    put_file = ckpt._storage.put_file
    rng = random.Random(os.getpid())

    def slow_put_file(src: str, dst: str, *, move: bool = False) -> object:
        time.sleep(rng.uniform(0, 2 * FILE_PAUSE))  # ranks finish their parts at different times
        return put_file(src, dst, move=move)

    ckpt._storage.put_file = slow_put_file
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


def _open_saves(folder: Path) -> set[str]:
    """Sharded saves in progress: a pending folder, or a final name without its manifest."""
    if not folder.exists():
        return set()
    return {p.name for p in folder.iterdir() if ".shard-" in p.name or (p.name.startswith("ckpt-") and "." not in p.name and not (p / "manifest.json").exists())}


def _files_written(folder: Path, names: set[str], rank: int) -> int | None:
    """How many whole files `rank` has in its part folder of the newest of these saves (None: no
    such folder yet)."""
    for n in sorted(names, reverse=True):
        part = folder / n / "data" / part_name(rank)
        try:
            if part.is_dir():
                return sum(f.stat().st_size >= FILE_SIZE for f in part.rglob("*.bin"))
        except FileNotFoundError:  # committed (renamed) or removed while we looked: the gang still runs
            continue
    return None


def _caught_writing(folder: Path, names: set[str], rank: int) -> bool:
    """Whether `rank` was killed while writing its part: its part folder of the open save is there
    with fewer whole files than a part has."""
    written = _files_written(folder, names, rank)
    return written is not None and written < FILES


def _wait_until_writing(folder: Path, before: set[str], rank: int, timeout: float = 5.0) -> None:
    """Until `rank` has begun a part and written at most two of its files."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        written = _files_written(folder, _open_saves(folder) - before, rank)
        if written is not None and written <= 2:
            return
        time.sleep(0.001)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("protocol", ["rename", "marker"])
def test_b1_sigkill_of_one_rank_mid_save_never_commits_a_missing_or_torn_part(tmp_path: Path, protocol: str, world: int) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    root = str(tmp_path / "ck" / "train")
    folder = Path(root) / "attempt-1"
    confirmed = 0
    mid_write = 0
    for rnd in range(ROUNDS):
        before = _open_saves(folder)
        r, w = os.pipe()
        pids = []
        for rank in range(world):
            pid = os.fork()
            if pid == 0:  # a rank: never returns into pytest
                try:
                    os.close(r)
                    _rank(root, protocol, rank, world, rnd // 2, confirmed + 1, w, tmp_path / f"w{rnd}")
                finally:
                    os._exit(1)
            pids.append(pid)
        os.close(w)
        victim = rng.randrange(world)
        if rnd % 2:  # any moment of the rank's life: writing, waiting for the others, committing, between saves
            time.sleep(rng.uniform(0.05, 0.4))
        else:  # a moment while the victim writes its part (once it has saved a step or two)
            time.sleep(rng.uniform(0.05, 0.2))
            _wait_until_writing(folder, before, victim)
            time.sleep(rng.uniform(0.0, FILE_PAUSE))
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
        mid_write += _caught_writing(folder, _open_saves(folder) - before, victim)
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
    assert mid_write >= ROUNDS // 4, f"only {mid_write} of {ROUNDS} kills landed while the victim wrote its part (seed={seed})"
    assert confirmed >= ROUNDS // 2, f"saves must also commit between the kills (seed={seed}, step {confirmed})"
