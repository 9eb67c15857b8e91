"""B1 for torch saves: a rank SIGKILLed at any moment of a save never leaves a checkpoint that loads
torn.

Each round starts a 2-rank gang (forked from a process with torch imported, so a round costs a fork,
not two torch imports) that saves 16 MiB per rank step after step, resuming from the newest
checkpoint of the attempt, kills one rank at a random moment, then the other (as a backend stops
the gang when a worker dies). The newest committed checkpoint must then load whole, with every
element from one and the same step, and be no older than the last save rank 0 reported committed.
Leftovers of killed saves pile up in the attempt folder across rounds and must be ignored.

Half the rounds kill while the victim is writing its shard file; a round counts as "mid-write" when
that file of the open save is there but shorter than a whole one.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

from gangrun import Checkpoint
from tests.torch_sdk.torchgang import Zygote, free_port, rank_env, require_torch

torch = require_torch()

ROUNDS = 20
WORLD = 2
ROWS, COLS = 65536, 64  # 16 MiB of float32 per rank


def _open_saves(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if ".tmp-" in p.name] if folder.exists() else []


def _shard_sizes(folder: Path, rank: int) -> list[int]:
    """Sizes of `rank`'s shard files in the open saves (files the rank was writing, or wrote)."""
    sizes = []
    for p in _open_saves(folder):
        try:
            sizes.append((p / "data" / f"__{rank}_0.distcp").stat().st_size)
        except FileNotFoundError:  # not begun, or the folder was just committed or removed
            continue
    return sizes


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it saw its peer die in a collective and exited on its own
        pass


def _gone(pids: list[int]) -> None:
    """Wait until the killed ranks are gone (the zygote reaps them), so that nothing writes on."""
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.005)


def _committed(out: Path) -> list[int]:
    if not out.exists():
        return []
    return [json.loads(line)["committed"] for line in out.read_text().splitlines() if line.startswith('{"rank": 0, "committed"')]


def test_b1_rank_killed_mid_save_never_yields_a_torn_checkpoint(tmp_path: Path) -> None:
    from gangrun.torch import load_state

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    root = tmp_path / "train"
    folder = root / "attempt-1"
    zygote = Zygote()
    whole = 0  # the size of a complete shard file, once one is committed
    mid_write = 0
    start = 0
    try:
        for rnd in range(ROUNDS):
            port = free_port()
            outs = [tmp_path / f"r{rnd}-rank{r}.log" for r in range(WORLD)]
            env = {"ROWS": str(ROWS), "COLS": str(COLS), "START": str(start)}
            pids = [zygote.fork("churn", rank_env(root, rank=r, world=WORLD, port=port, env=env), outs[r]) for r in range(WORLD)]
            deadline = time.monotonic() + 60
            while not _committed(outs[0]):  # one save is in; the next is under way
                assert time.monotonic() < deadline, f"no save committed: {outs[0].read_text() if outs[0].exists() else ''}"
                time.sleep(0.01)
            victim = rng.randrange(WORLD)
            if rnd % 2 or not whole:
                time.sleep(rng.uniform(0.0, 0.6))  # any moment
            else:  # while the victim writes its shard file
                while time.monotonic() < deadline and not any(s < whole for s in _shard_sizes(folder, victim)):
                    time.sleep(0.001)
                time.sleep(rng.uniform(0.0, 0.005))
            os.kill(pids[victim], signal.SIGKILL)
            time.sleep(0.2)
            _kill(pids[1 - victim])
            _gone(pids)
            mid_write += any(s < whole for s in _shard_sizes(folder, victim)) if whole else 0
            committed = max(_committed(outs[0]))
            ctx = f"seed={seed} round={rnd} victim={victim} committed={committed}"
            sd = {"w": torch.full((WORLD * ROWS, COLS), -1.0), "b": torch.zeros(COLS), "meta": {"note": None}}
            loaded = load_state(sd, checkpoint=Checkpoint.for_path(str(root), attempt=1))
            assert loaded is not None and loaded.loaded_from == "own", ctx
            assert loaded.step is not None and loaded.step >= committed, f"{loaded}: {ctx}"
            assert bool((sd["w"] == loaded.step).all()) and bool((sd["b"] == -loaded.step).all()), f"torn: {ctx}"
            start = loaded.step
            manifest = json.loads(Path(loaded.uri, "manifest.json").read_text())
            whole = next(f["size"] for f in manifest["files"] if f["path"] == f"__{victim}_0.distcp")
    finally:
        zygote.close()
    assert mid_write >= ROUNDS // 4, f"only {mid_write} of {ROUNDS} kills landed while the victim wrote its shard (seed={seed})"
