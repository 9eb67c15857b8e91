"""Does the reported goodput tell the truth? The same checkpointing workload run twice on the local backend.

    python -m benchmarks.bench_goodput_check [--steps 240] [--step-seconds 0.25] [--json]

1. uninterrupted: one gang (1 node × 2 ranks) trains STEPS steps and succeeds;
2. interrupted: the same gang is preempted three times by a high-priority task that runs for a few
   seconds (the gang waits for re-admission, then resumes from its final save), and one of its
   workers is killed with SIGKILL (the gang restarts and resumes from its newest checkpoint).

The worker is realistic where it matters to the accounting: each start takes a few seconds before
its first step (STARTUP_SECONDS of imports, then a load that takes LOAD_SECONDS when there is a
checkpoint), it saves every CKPT_EVERY steps in the background (blocking=False), and it makes a final
save when told to stop.

The truth is (uninterrupted time ÷ interrupted time): the share of the interrupted run's life that
the work itself needed. The check passes when the interrupted run's reported goodput is within 5
percentage points of it. Both runs' badput by cause is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gangrun._backends.local import LocalBackend
from gangrun._core.spec import TaskSpec, parse_manifest

WORKER = """import json, os, sys, time
time.sleep(float(os.environ["STARTUP_SECONDS"]))  # imports, CUDA context, rendezvous
import gangrun
ctx = gangrun.context()
path = ctx.checkpoint.load()
step = 0
if path:
    time.sleep(float(os.environ["LOAD_SECONDS"]))  # reading the state back
    step = json.loads(open(path, "rb").read())["step"]
steps, every, dt = int(os.environ["STEPS"]), int(os.environ["CKPT_EVERY"]), float(os.environ["STEP_SECONDS"])
progress = os.environ["PROGRESS"] + f".{ctx.rank}"
while step < steps:
    if ctx.should_stop():
        ctx.checkpoint.save(json.dumps({"step": step}).encode(), step=step)  # the final save
        sys.exit(0)
    time.sleep(dt)  # one training step
    step += 1
    with open(progress + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(progress + ".tmp", progress)
    if step % every == 0:
        ctx.checkpoint.save(json.dumps({"step": step}).encode(), step=step, blocking=False)
ctx.checkpoint.wait()
"""
ACCOUNTED = ("queued", "waitingForReadmission", "restoring", "restarting", "workLost")


def manifest(tmp: Path, name: str, script: Path, env: dict[str, str], *, cpu: str, priority: str,
             command: list[str] | None = None) -> TaskSpec:
    doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
           "spec": {"nodes": 1, "nprocPerNode": 2 if command is None else 1,
                    "command": command or [sys.executable, str(script)], "env": env,
                    "resources": {"cpu": cpu, "memory": "10Mi"}, "priorityClass": priority,
                    "checkpoint": {"uri": str(tmp / "ckpt" / name)},
                    "failurePolicy": {"resumeAfterPreemption": True, "maxRestarts": 3},
                    "terminationGracePeriod": "10s"}}
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return parse_manifest(doc, source=str(p))


def step_of(progress: Path) -> int:
    try:
        return int((progress.parent / f"{progress.name}.0").read_text() or 0)
    except (OSError, ValueError):
        return 0


def wait_until(what: str, cond: Any, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def run(b: LocalBackend, tmp: Path, script: Path, name: str, env: dict[str, str], *,
        interrupt: bool, preempt_at: list[int], kill_at: int, blocker_seconds: float) -> tuple[float, dict[str, Any]]:
    progress = tmp / f"{name}.progress"
    env = {**env, "PROGRESS": str(progress)}
    t0 = time.monotonic()
    b.submit(manifest(tmp, name, script, env, cpu="1", priority="normal"))
    if interrupt:
        for i, at in enumerate(preempt_at):
            wait_until(f"step {at}", lambda at=at: step_of(progress) >= at)
            blocker = f"{name}-high-{i}"
            b.submit(manifest(tmp, blocker, script, {}, cpu="1", priority="high",
                              command=["sleep", str(blocker_seconds)]))
            wait_until(f"{blocker} to end", lambda blocker=blocker: b.get(blocker)["phase"] == "Succeeded")
        wait_until(f"step {kill_at}", lambda: step_of(progress) >= kill_at)
        pid = next(w["pid"] for w in b.get(name)["gang"]["workers"] if w["rank"] == 0)
        os.kill(pid, signal.SIGKILL)
    wait_until(f"{name} to succeed", lambda: b.get(name)["phase"] in ("Succeeded", "Failed"))
    took = time.monotonic() - t0
    view = b.get(name)
    if view["phase"] != "Succeeded":
        raise SystemExit(f"{name} ended {view['phase']}: {view.get('message')}")
    return took, view


def main(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="gangrun-goodput-"))
    script = tmp / "worker.py"
    script.write_text(WORKER)
    env = {"STEPS": str(args.steps), "STEP_SECONDS": str(args.step_seconds), "CKPT_EVERY": str(args.ckpt_every),
           "STARTUP_SECONDS": str(args.startup_seconds), "LOAD_SECONDS": str(args.load_seconds),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    b = LocalBackend(tmp / "home")
    b.up(cpu="1", memory="8Gi", gpu=0)  # room for one gang: a high-priority task preempts it
    n = args.steps
    try:
        t_u, v_u = run(b, tmp, script, "steady", env, interrupt=False, preempt_at=[], kill_at=0, blocker_seconds=0)
        t_i, v_i = run(b, tmp, script, "interrupted", env, interrupt=True,
                       preempt_at=[n // 8 + 3, 3 * n // 8 + 7, 5 * n // 8 + 11], kill_at=7 * n // 8 - 5,
                       blocker_seconds=args.blocker_seconds)
    finally:
        b.down()
    truth = t_u / t_i
    reported = v_i["accounting"]["goodput"]
    ok = abs(reported - truth) <= 0.05
    print(f"{'':<28} {'uninterrupted':>14} {'interrupted':>14}")
    print(f"{'wall time, submit -> done':<28} {t_u:>13.1f}s {t_i:>13.1f}s")
    print(f"{'reported goodput':<28} {v_u['accounting']['goodput']:>14.3f} {reported:>14.3f}")
    for k in ACCOUNTED:
        print(f"{'  badput ' + k:<28} {v_u['accounting']['badputSeconds'][k]:>13.1f}s "
              f"{v_i['accounting']['badputSeconds'][k]:>13.1f}s")
    print(f"{'stops (work lost per stop)':<28} {'':>14} "
          + ", ".join(f"{w['cause']} {w['seconds']:.1f}s" for w in v_i["accounting"]["workLost"]))
    a = v_i["accounting"]
    flattering = (a["gangUpSeconds"] - a["workLostSeconds"]) / t_i
    print(f"{'restoring counted as work':<28} {'':>14} {flattering:>14.3f}  (what goodput said before it was told apart)")
    print(f"truth (uninterrupted ÷ interrupted time) {truth:.3f}; reported {reported:.3f}; "
          f"difference {abs(reported - truth) * 100:.1f} points -> {'PASS' if ok else 'FAIL'} (within 5)")
    if args.json:
        print(json.dumps({"uninterrupted_seconds": round(t_u, 2), "interrupted_seconds": round(t_i, 2),
                          "truth": round(truth, 4), "reported_goodput": reported,
                          "uninterrupted_goodput": v_u["accounting"]["goodput"],
                          "restoring_counted_as_work": round(flattering, 4),
                          "badput_interrupted": v_i["accounting"]["badputSeconds"],
                          "badput_uninterrupted": v_u["accounting"]["badputSeconds"], "pass": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--step-seconds", type=float, default=0.25)
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--startup-seconds", type=float, default=3.0)
    ap.add_argument("--load-seconds", type=float, default=1.0)
    ap.add_argument("--blocker-seconds", type=float, default=3.0)
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    sys.exit(main(ap.parse_args()))
