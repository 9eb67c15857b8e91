"""B1 for torch saves: a rank SIGKILLed mid-save never leaves a checkpoint that loads torn.

Each round runs a 2-rank gang that saves 16 MiB per rank over and over, kills one rank at a random
moment, then the rest (as a backend stops the gang when a worker dies). The newest committed
checkpoint must then load whole, with every element from one and the same step, and be no older
than the last save rank 0 reported committed.
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

from torchgang import Gang, require_torch

from gangrun import Checkpoint

torch = require_torch()

ROUNDS = 5
ROWS, COLS = 65536, 64  # 16 MiB of float32 per rank


def test_b1_rank_killed_mid_save_never_yields_a_torn_checkpoint(tmp_path: Path) -> None:
    from gangrun.torch import load_state

    rng = random.Random(20261201)
    root = tmp_path / "train"
    mid_write = 0
    for attempt in range(1, ROUNDS + 1):
        gang = Gang(root, world=2, mode="churn", attempt=attempt, env={"ROWS": str(ROWS), "COLS": str(COLS)})
        out = gang.procs[0].stdout
        assert out is not None
        committed = json.loads(out.readline())["committed"]  # one save is in; the next is under way
        time.sleep(rng.uniform(0.0, 0.6))
        gang.procs[rng.randrange(2)].send_signal(signal.SIGKILL)
        time.sleep(0.2)
        gang.kill()
        attempt_dir = root / f"attempt-{attempt}"
        names = sorted(p.name for p in attempt_dir.iterdir())
        mid_write += any(".tmp-" in n for n in names)
        sd = {"w": torch.full((2 * ROWS, COLS), -1.0), "b": torch.zeros(COLS), "meta": {"note": None}}
        loaded = load_state(sd, checkpoint=Checkpoint.for_path(str(root), attempt=attempt))
        assert loaded is not None and loaded.loaded_from == "own", names
        assert loaded.step is not None and loaded.step >= committed, (loaded, committed)
        assert bool((sd["w"] == loaded.step).all()) and bool((sd["b"] == -loaded.step).all()), f"torn: {names}"
    assert mid_write >= 2, f"only {mid_write} of {ROUNDS} kills landed mid-save; the test proves little"
