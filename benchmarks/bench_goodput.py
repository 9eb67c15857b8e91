"""Goodput under a preemption storm, with and without checkpoint-aware preemption, side by side.

    python -m benchmarks.bench_goodput [--quick] [--seed 7] [--rounds 3] [--json]
    python -m benchmarks.bench_goodput --tier realnode [--rounds 3] [--resume on|off|both]   # goodput_realnode.py

One seeded storm on the local backend (real daemons, real worker processes, real checkpoints),
played four times at once, each in a control plane of its own:

    boosting off / on  ×  resumeAfterPreemption off / on

N low-priority gangs (1 node each, all of the quota) train a fixed number of steps and commit a
checkpoint every k steps, k different for each gang; a preempted gang restores from its newest
checkpoint. Their workers make no final save when stopped (as when a save would not fit in the
grace period): what a preemption costs is the work since the gang's newest checkpoint. M
high-priority tasks (1 node each) arrive at seeded times and run a few seconds; each needs the room
of one low gang. `--rounds R` plays R storms (seeds seed, seed+1, ...) one after another and adds
them up, so one unlucky burst of arrivals weighs less (a full run: 3 rounds, about 4 minutes on 2
cores; `--quick`: one small round, under a minute).

Boosting off, the local admission chooses victims as Kueue does by default among equal priorities:
the most recently admitted. Boosting on, it adds `gangrun._core.priority_boost`'s boost: the gang
that would lose the least goes first. The boost's steps are scaled to the storm's compressed time
(checkpoint intervals of seconds instead of minutes).

Printed per configuration, over the low gangs: work lost (seconds), goodput (their productive time
over their elapsed time, all gangs together), badput by cause, preemptions and retries spent.
Target: boosting on loses at most half the work boosting off loses, in the same run and the same
resume setting.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._goodput import CONFIGS, WORKER, Storm, compare, figures, plan, table, worker_env
from gangrun._backends.local import LocalBackend
from gangrun._core.spec import TaskSpec, parse_manifest

FULL = Storm(gangs=6, arrivals=8, steps=160, step_seconds=0.25, intervals=(2, 4, 8, 16, 32, 64),
             arrival_window=(6.0, 34.0), high_seconds=3.0, boost_steps=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0))
QUICK = Storm(gangs=4, arrivals=4, steps=64, step_seconds=0.25, intervals=(2, 8, 24, 64),
              arrival_window=(4.0, 14.0), high_seconds=2.0, boost_steps=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0))
def manifest(name: str, command: list[str], *, env: dict[str, str], priority: str, resume: bool) -> TaskSpec:
    return parse_manifest({
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
        "spec": {"nodes": 1, "command": command, "env": env, "priorityClass": priority,
                 "resources": {"cpu": "1", "memory": "10Mi"}, "terminationGracePeriod": "2s", "retries": 50,
                 "failurePolicy": {"resumeAfterPreemption": resume}}})


def play(storm: Storm, intervals: list[int], arrivals: list[float], *, boost: bool, resume: bool,
         home: Path, script: Path, timeout: float) -> list[dict[str, Any]]:
    """One configuration: the whole storm on a private control plane. Returns the low gangs' views."""
    b = LocalBackend(home)
    b.up(cpu=str(storm.gangs), memory="8Gi", gpu=0, priority_boost=boost, boost_steps=list(storm.boost_steps))
    low = [f"low-{i}" for i in range(len(intervals))]
    try:
        for name, every in zip(low, intervals, strict=True):
            b.submit(manifest(name, [sys.executable, str(script)], env=worker_env(storm, every), priority="low",
                              resume=resume))
            time.sleep(0.3)  # admitted one after another: "most recently admitted" means something
        t0 = time.monotonic()
        for i, at in enumerate(arrivals):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            b.submit(manifest(f"high-{i}", ["sleep", str(storm.high_seconds)], env={}, priority="high", resume=False))
        deadline = t0 + timeout
        while True:
            views = [b.get(n) for n in low]
            if all(v["phase"] in ("Succeeded", "Failed", "Aborted") for v in views):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"the storm did not finish within {timeout:.0f} s (boost={boost}, resume={resume})")
            time.sleep(0.5)
    finally:
        b.down()
    return views


def run(storm: Storm, seed: int, *, rounds: int = 1, timeout: float = 600.0) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="gangrun-goodput-"))
    script = tmp / "worker.py"
    script.write_text(WORKER)
    views: dict[tuple[bool, bool], list[dict[str, Any]]] = {c: [] for c in CONFIGS}
    intervals_all: list[int] = []
    played = []
    for r in range(rounds):
        intervals, arrivals = plan(storm, seed + r)
        played.append({"seed": seed + r, "checkpointEvery": intervals, "arrivalTimes": [round(a, 2) for a in arrivals]})
        intervals_all += intervals
        errors: list[BaseException] = []

        def one(boost: bool, resume: bool, r: int = r, intervals: list[int] = intervals,
                arrivals: list[float] = arrivals, errors: list[BaseException] = errors) -> None:
            try:
                got = play(storm, intervals, arrivals, boost=boost, resume=resume, script=script, timeout=timeout,
                           home=tmp / f"home-r{r}-boost{int(boost)}-resume{int(resume)}")
                views[(boost, resume)] += [{**v, "round": r} for v in got]
            except BaseException as e:  # reported after every thread is done
                errors.append(e)

        threads = [threading.Thread(target=one, args=c) for c in CONFIGS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    results = {c: figures(views[c], intervals_all) for c in CONFIGS}
    return compare(results, {"seed": seed, "rounds": played, "gangs": storm.gangs, "arrivals": storm.arrivals})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smallest storm (CI smoke: about a minute)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=None,
                    help="storms played and added up (default 3; --quick and --tier realnode: 1)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--tier", choices=("local", "realnode"), default="local",
                    help="realnode: the storm on the real Kubernetes node (goodput_realnode.py)")
    ap.add_argument("--resume", choices=("off", "on", "both"), default="both",
                    help="--tier realnode: the resumeAfterPreemption settings played (default both)")
    args = ap.parse_args()
    if args.tier == "realnode":
        from benchmarks import goodput_realnode

        resume = {"off": (False,), "on": (True,), "both": (False, True)}[args.resume]
        sys.exit(goodput_realnode.main(args.seed, args.rounds or 1, resume, args.json))
    storm = QUICK if args.quick else FULL
    out = run(storm, args.seed, rounds=args.rounds or (1 if args.quick else 3))
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for r in out["rounds"]:
        print(f"seed {r['seed']}: {out['gangs']} low gangs (checkpoint every {r['checkpointEvery']} steps of "
              f"{storm.step_seconds} s), {out['arrivals']} high arrivals at {r['arrivalTimes']} s")
    print(table(out))


if __name__ == "__main__":
    main()
