"""The whole preemption-and-resume story on the local backend, in well under a minute.

    python examples/preemption_demo.py

1. starts a private local control plane (quota: 2 cpu) in a temporary GANGRUN_HOME;
2. submits `train` (2 nodes, priority low, resumeAfterPreemption) and waits until it saved step 6;
3. submits `urgent` (priority high): the queue is full, so Kueue-like admission preempts `train`;
4. shows `train` waiting for re-admission in the same attempt, `urgent` running and finishing;
5. `train` is readmitted, resumes from its own checkpoint (attempt 1) and succeeds;
6. prints the timeline and the accounting, then stops the control plane.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from gangrun._backends.local import LocalBackend
from gangrun._manifest_file import load_manifest

HERE = Path(__file__).resolve().parent


def wait(b: LocalBackend, name: str, done, what: str, timeout: float = 120) -> dict:
    deadline, last = time.monotonic() + timeout, ""
    while True:
        v = b.get(name)
        line = f"  {name:<7} {v['phase']:<20} {v['reason'][:110]}"
        if line != last:
            print(line, flush=True)
            last = line
        if done(v):
            return v
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {name}: {what}")
        time.sleep(0.2)


def saved(step: int):
    return lambda v: ((v["accounting"]["lastCheckpoint"] or {}).get("step") or 0) >= step


def main() -> int:
    # Workers run `python`: make it this interpreter, which has numpy and gangrun.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    home = Path(tempfile.mkdtemp(prefix="gangrun-demo-"))
    b = LocalBackend(home)
    started = time.monotonic()
    try:
        b.up(cpu="2", memory="4Gi", gpu=0)
        print("local control plane up: quota 2 cpu; train needs 2 (2 nodes x 1), urgent needs 1\n")
        print("submit train (low priority, resumeAfterPreemption: true)")
        b.submit(load_manifest(HERE / "train.yaml"))
        wait(b, "train", saved(6), "a checkpoint at step 6")
        print("\ntrain saved step 6 -> submit urgent (high priority)")
        b.submit(load_manifest(HERE / "urgent.yaml"))
        v = wait(b, "train", lambda v: "waiting for re-admission" in v["reason"], "preemption")
        print(f"\ntrain was preempted and keeps attempt {v['attempt']}; it waits for re-admission\n")
        wait(b, "urgent", lambda v: v["phase"] == "Succeeded", "urgent to finish")
        print("\nurgent succeeded -> train is readmitted")
        v = wait(b, "train", lambda v: v["phase"] in ("Succeeded", "Failed"), "train to finish")
        print(f"\ntrain: {v['phase']} on attempt {v['attempt']} (user retries used {v['userRetriesUsed']})\n")
        print("timeline of train:")
        for e in b.events("train"):
            if e.type.value not in ("WorkerReady", "CheckpointCommitted") or "step 6)" in e.message:
                print(f"  {e.time.strftime('%H:%M:%S.%f')[:-3]}  {e.type.value:<22} {e.message[:120]}")
        print("\nwhere rank 0 of train started from:")
        for line in b.logs("train", rank=0):
            if "starting at step" in line or "loaded checkpoint" in line or line.startswith("done"):
                print("  " + line)
        acct = v["accounting"]
        print(f"\naccounting: queued {acct['queuedSeconds']:.1f}s, waited for re-admission "
              f"{acct['waitingForReadmissionSeconds']:.1f}s, preemptions {acct['preemptionsByCause']}, "
              f"work lost {acct['workLostSeconds']:.2f}s, goodput {acct['goodput']:.0%}")
        print(f"\ndemo finished in {time.monotonic() - started:.1f}s")
        return 0 if v["phase"] == "Succeeded" and v["attempt"] == 1 else 1
    finally:
        b.down()


if __name__ == "__main__":
    sys.exit(main())
