"""B7 on the local backend, with real processes: every rank of a start resumes from the same checkpoint
although rank 1 starts its load seconds after rank 0, which meanwhile trains on, commits a save at
every step and prunes with `keep_last: 1`. Each round is a preemption and a readmission in the same
attempt; every rank prints the step it loaded, and they must agree in every round."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

from gangrun._backends.local.backend import LocalBackend

from .conftest import phase, wait_for

SLOW_RANK = """
import os, sys, time
import gangrun
ctx = gangrun.context()
ckpt = ctx.checkpoint
ckpt.keep_last = 1
if ctx.rank == 1:
    time.sleep(float(os.environ["SLOW"]))  # a slow node: rank 0 trains and commits meanwhile
path = ckpt.load()
step = int(path.read_bytes()) if path is not None else 0
print(f"rank {ctx.rank} loaded step {step}", flush=True)
while step < int(os.environ["STEPS"]):
    if ctx.stop_requested:
        sys.exit(0)
    time.sleep(0.05)
    step += 1
    ckpt.save(str(step).encode(), step=step)  # rank 0 writes; one save a step
"""

ROUNDS = 3


def loaded(backend: LocalBackend, rank: int) -> list[int]:
    return [int(m.group(1)) for line in backend.logs("slow", rank=rank)
            if (m := re.search(rf"rank {rank} loaded step (\d+)", line))]


def test_b7_every_rank_resumes_from_the_same_step_in_every_round_although_one_rank_starts_late(
        backend: LocalBackend, manifest, tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text(SLOW_RANK)
    backend.submit(manifest("slow", command=[sys.executable, str(script)], resume=True, steps=100000,
                            env={"SLOW": "1.5"}))
    for n in range(1, ROUNDS + 1):
        wait_for(backend, "slow", lambda _, n=n: len(loaded(backend, 1)) >= n, what=f"rank 1's load in round {n}")
        view = wait_for(backend, "slow", lambda v, n=n: (v["accounting"]["lastCheckpoint"] or {}).get("step", 0)
                        >= 20 * n, what="rank 0's saves after rank 1's load")
        assert view["attempt"] == 1
        backend.evict("slow", "Preempted")
        wait_for(backend, "slow", lambda v: "waiting for re-admission" in v["reason"] or v["phase"] != "Running",
                 what="the preemption")
    wait_for(backend, "slow", lambda _: len(loaded(backend, 1)) > ROUNDS, what="the last round's loads")
    rank0, rank1 = loaded(backend, 0), loaded(backend, 1)
    assert rank0[: ROUNDS + 1] == rank1[: ROUNDS + 1], (rank0, rank1)
    assert rank0[0] == 0 and all(b > a for a, b in itertools.pairwise(rank0[: ROUNDS + 1])), rank0
    assert backend.cancel("slow")
    wait_for(backend, "slow", phase("Aborted"), after_end=True)
