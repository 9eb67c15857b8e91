"""The whole preemption-and-resume story on the local backend, in well under a minute.

    python examples/preemption_demo.py [--ui]

1. starts a private local control plane (quota: 2 cpu) in a temporary GANGRUN_HOME;
2. submits `train` (2 nodes, priority low, resumeAfterPreemption) and waits until it saved step 6;
3. submits `urgent` (priority high): the queue is full, so Kueue-like admission preempts `train`;
4. shows `train` waiting for re-admission in the same attempt, `urgent` running and finishing;
5. `train` is readmitted, resumes from its own checkpoint (attempt 1) and succeeds;
6. prints the timeline and the accounting, stops the control plane, and says how to see it all in a
   browser (`gangrun ui`). With `--ui` the page is served from the start, to watch it happen.

It uses only gangrun's public surface: the Python API and the `gangrun` command.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gangrun

HERE = Path(__file__).resolve().parent
UI_PORT = 8265


def gangrun_cli(home: Path, *args: str, **popen) -> subprocess.Popen | subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gangrun", *args]
    env = {**os.environ, "GANGRUN_HOME": str(home)}
    if popen:
        return subprocess.Popen(cmd, env=env, **popen)
    return subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)


def wait(run: gangrun.TaskRun, done, what: str, timeout: float = 120) -> dict:
    deadline, last = time.monotonic() + timeout, ""
    while True:
        v = run.status()
        line = f"  {run.name:<7} {v['phase']:<20} {v['reason'][:110]}"
        if line != last:
            print(line, flush=True)
            last = line
        if done(v):
            return v
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {run.name}: {what}")
        time.sleep(0.2)


def saved(step: int):
    return lambda v: ((v["accounting"]["lastCheckpoint"] or {}).get("step") or 0) >= step


def serve_ui(home: Path) -> subprocess.Popen:
    ui = gangrun_cli(home, "ui", "--port", str(UI_PORT), stdout=subprocess.PIPE, text=True)
    print(ui.stdout.readline().strip() if ui.stdout else "", flush=True)  # "gangrun ui: http://127.0.0.1:8265/ ..."
    return ui


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gangrun's preemption-and-resume story on the local backend")
    parser.add_argument("--ui", action="store_true", help=f"serve the web page (port {UI_PORT}) to watch it happen")
    args = parser.parse_args(argv)
    # Workers run `python`: make it this interpreter, which has gangrun.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    home = Path(tempfile.mkdtemp(prefix="gangrun-demo-"))
    ui = None
    started = time.monotonic()
    try:
        gangrun_cli(home, "local", "up", "--cpu", "2", "--memory", "4Gi", "--gpu", "0")
        print("local control plane up: quota 2 cpu; train needs 2 (2 nodes x 1), urgent needs 1\n")
        if args.ui:
            ui = serve_ui(home)
        print("submit train (low priority, resumeAfterPreemption: true)")
        train = gangrun.submit(gangrun.ClusteredTask.from_file(HERE / "train.yaml"), backend="local", home=home)
        wait(train, saved(6), "a checkpoint at step 6")
        print("\ntrain saved step 6 -> submit urgent (high priority)")
        urgent = gangrun.submit(HERE / "urgent.yaml", backend="local", home=home)
        v = wait(train, lambda v: "waiting for re-admission" in v["reason"], "preemption")
        print(f"\ntrain was preempted and keeps attempt {v['attempt']}; it waits for re-admission\n")
        wait(urgent, lambda v: v["phase"] == "Succeeded", "urgent to finish")
        print("\nurgent succeeded -> train is readmitted")
        v = train.wait(timeout=120)
        print(f"\ntrain: {v['phase']} on attempt {v['attempt']} (user retries used {v['userRetriesUsed']})\n")
        print("timeline of train:")
        events = train.events()
        readmitted = next((i for i, e in enumerate(events) if e["type"] == "Readmitted"), 0)
        # The save made within the grace period of the preemption: the one the readmitted gang resumes from.
        final = max((i for i, e in enumerate(events[:readmitted]) if e["type"] == "CheckpointCommitted"), default=-1)
        for i, e in enumerate(events):
            if e["type"] not in ("WorkerReady", "CheckpointCommitted") or "step 6)" in e["message"] or i == final:
                note = "  <- resumed from" if i == final else ""
                print(f"  {e['time'][11:23]}  {e['type']:<22} {e['message'][:120]}{note}")
        print("\nwhere rank 0 of train started from:")
        for line in train.logs(rank=0).splitlines():
            if "starting at step" in line or "loaded checkpoint" in line or line.startswith("done"):
                print("  " + line)
        acct = v["accounting"]
        causes = ", ".join(f"{n} {cause}" for cause, n in acct["preemptionsByCause"].items()) or "none"
        print(f"\naccounting: queued {acct['queuedSeconds']:.1f}s, waited for re-admission "
              f"{acct['waitingForReadmissionSeconds']:.1f}s, restoring {acct['restoringSeconds']:.1f}s, "
              f"preemptions: {causes}, work lost {acct['workLostSeconds']:.2f}s, goodput {acct['goodput']:.0%}")
        print(f"\ndemo finished in {time.monotonic() - started:.1f}s")
        ok = v["phase"] == "Succeeded" and v["attempt"] == 1
    except BaseException:
        if ui is not None:
            ui.terminate()
        raise
    finally:
        gangrun_cli(home, "local", "down")
    if ui is not None:
        print(f"\nthe timeline is at http://127.0.0.1:{UI_PORT}/#/tasks/train (Ctrl-C stops the page)")
        try:
            ui.wait()
        except KeyboardInterrupt:
            pass
        finally:
            ui.terminate()
    else:
        print(f"\nsee it in a browser: GANGRUN_HOME={home} gangrun ui   -> http://127.0.0.1:{UI_PORT}/"
              f"\n(or: ./dev demo --ui)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
