"""A test worker: counts steps, checkpoints every step, and says where it resumed from.

Behaviour from the environment (set in the test manifests):
  STEPS (20)            steps to reach
  STEP_SECONDS (0.2)    sleep per step
  CRASH_AT_STEP / CRASH_RANK / CRASH_ON_RESTART   exit 3 at that step, on that rank, only in that
                        restart round (JOBSET_RESTART_ATTEMPT), default round 0: a crash that happens once
  LINGER_SECONDS        on a stop notice, keep going this long before a final save and exit (a worker
                        that uses its grace period)
  CHECKPOINT_EVERY (1)  save every N steps (0: never, a gang with all its work at risk)

It uses only the SDK (`gangrun.context()`, `ctx.checkpoint.load()/save(step=)`): a broken SDK fails
the scenarios that run it, and the start line says which source the SDK loaded from.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import gangrun

STEPS = int(os.environ.get("STEPS", "20"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.2"))
RANK = int(os.environ["RANK"])
ATTEMPT = int(os.environ["GANGRUN_ATTEMPT"])
RESTART = int(os.environ["JOBSET_RESTART_ATTEMPT"])


def main() -> int:
    ctx = gangrun.context()
    ckpt = ctx.checkpoint
    linger = float(os.environ.get("LINGER_SECONDS", "0"))
    path = ckpt.load()
    step = json.loads(Path(path).read_bytes())["step"] if path else 0
    print(f"start attempt={ATTEMPT} restart={RESTART} rank={RANK} resumed_from={step} "
          f"loaded_from={ckpt.loaded_from} sdk={type(ckpt).__module__} port={os.environ['MASTER_PORT']} "
          f"world={os.environ['WORLD_SIZE']}", flush=True)
    crash_at = int(os.environ.get("CRASH_AT_STEP", "0"))
    crash_rank = int(os.environ.get("CRASH_RANK", "1"))
    crash_round = int(os.environ.get("CRASH_ON_RESTART", "0"))
    every = int(os.environ.get("CHECKPOINT_EVERY", "1"))
    while step < STEPS:
        if linger and ctx.stop_requested:
            time.sleep(linger)
            ckpt.save(json.dumps({"step": step}).encode(), step=step)
            print(f"stopped at step={step}", flush=True)
            return 0
        time.sleep(STEP_SECONDS)
        step += 1
        if step == crash_at and crash_rank == RANK and crash_round == RESTART:
            print(f"crash at step={step}", flush=True)
            return 3
        if every and step % every == 0:
            ckpt.save(json.dumps({"step": step}).encode(), step=step)
        print(f"step={step}", flush=True)
    print(f"done attempt={ATTEMPT} step={step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
