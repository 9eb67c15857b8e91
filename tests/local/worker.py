"""A test worker: counts steps, checkpoints every step, and says where it resumed from.

Behaviour from the environment (set in the test manifests):
  STEPS (20)            steps to reach
  STEP_SECONDS (0.2)    sleep per step
  CRASH_AT_STEP / CRASH_RANK / CRASH_ON_RESTART   exit 3 at that step, on that rank, only in that
                        restart round (JOBSET_RESTART_ATTEMPT), default round 0: a crash that happens once

It uses the SDK (`gangrun.context()`, `ctx.checkpoint.load()/save(step=)`); if the SDK is absent it
falls back to plain files under GANGRUN_CHECKPOINT_PATH with the same load order (own attempt first).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

STEPS = int(os.environ.get("STEPS", "20"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.2"))
RANK = int(os.environ["RANK"])
ATTEMPT = int(os.environ["GANGRUN_ATTEMPT"])
RESTART = int(os.environ["JOBSET_RESTART_ATTEMPT"])


class _Files:
    """The fallback: step-N.json files, newest of this attempt first, then earlier attempts."""

    def __init__(self) -> None:
        self.own = Path(os.environ["GANGRUN_CHECKPOINT_PATH"])
        self.loaded_from = None

    def load(self):
        root = self.own.parent
        for n in range(ATTEMPT, 0, -1):
            saves = sorted((root / f"attempt-{n}").glob("step-*.json"), key=lambda p: int(p.stem[5:]))
            if saves:
                self.loaded_from = "own" if n == ATTEMPT else "previous"
                return saves[-1]
        return None

    def save(self, data: bytes, *, step: int) -> None:
        if RANK != 0:
            return
        self.own.mkdir(parents=True, exist_ok=True)
        tmp = self.own / f".step-{step}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.own / f"step-{step}.json")
        events = os.environ.get("GANGRUN_EVENTS_FILE")
        if events:
            line = json.dumps({"type": "checkpoint_committed", "task": os.environ["GANGRUN_TASK"], "attempt": ATTEMPT,
                               "rank": 0, "seq": step, "step": step, "uri": str(self.own), "time": time.time()})
            with open(events, "a") as f:
                f.write(line + "\n")


def checkpointer():
    try:
        import gangrun

        return gangrun.context().checkpoint
    except (ImportError, AttributeError):
        return _Files()


def main() -> int:
    ckpt = checkpointer()
    path = ckpt.load()
    step = json.loads(Path(path).read_bytes())["step"] if path else 0
    print(f"start attempt={ATTEMPT} restart={RESTART} rank={RANK} resumed_from={step} "
          f"loaded_from={ckpt.loaded_from} port={os.environ['MASTER_PORT']} world={os.environ['WORLD_SIZE']}",
          flush=True)
    crash_at = int(os.environ.get("CRASH_AT_STEP", "0"))
    crash_rank = int(os.environ.get("CRASH_RANK", "1"))
    crash_round = int(os.environ.get("CRASH_ON_RESTART", "0"))
    while step < STEPS:
        time.sleep(STEP_SECONDS)
        step += 1
        if step == crash_at and crash_rank == RANK and crash_round == RESTART:
            print(f"crash at step={step}", flush=True)
            return 3
        ckpt.save(json.dumps({"step": step}).encode(), step=step)
        print(f"step={step}", flush=True)
    print(f"done attempt={ATTEMPT} step={step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
