"""A worker killed on a real node: the gang restarted in place next to the same gang recreated, same run.

    python -m benchmarks.bench_realnode_restart [--rounds 3] [--json]    # as root

Starts the control plane (tier C), the real node and the controller in-cluster as bench_realnode does.
Each round runs the shipped example (`python -m gangrun.examples.train`) as a 2-worker gang of half a
CPU each (`maxRestarts: 1`, checkpoints on a hostPath volume) once per strategy, interleaved
(`restartStrategy: InPlace`, then `Recreate`): once rank 0 trained 10 steps, its training process is
SIGKILLed from the host, as the OOM killer would end it, and the figure is the kill -> the later of
the two ranks' first training step of restart 1 (the `step N: loss` line after the restarted worker's
`starting at step` line, stamped by the container runtime). In place, the failed worker's launcher
keeps its pod, the controller sees the pod NotReady and orders round 1 from both launchers; recreated,
JobSet deletes both Jobs and their pods and creates them again, the scheduler binds them and the
kubelet starts their sandboxes and containers. Medians [min-max] over rounds; the ratio is of the
medians (the issue's target: in place at most a third of recreate's time).

The figure is not split into the substrate's and gangrun's shares here (bench_realnode does that for a
preemption). Without root, the Kubernetes binaries or the node's Debian packages it prints why and
exits 0.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from datetime import datetime

from benchmarks._lib import load_average, realnode_start
from tests.harness import controlplane

STRATEGIES = ("InPlace", "Recreate")
STEP = re.compile(r"^(\S+) step \d+: loss", re.M)


def _stamp(text: str) -> float:
    """An RFC 3339 timestamp of the container runtime (nanoseconds) as epoch seconds."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()


def first_step_after_restart(text: str) -> float | None:
    """When the worker's first step of restart 1 was logged, or None (not yet)."""
    start = re.search(r"restart 1: starting at step", text)
    m = STEP.search(text, start.end()) if start else None
    return _stamp(m.group(1)) if m else None


def one_run(rc, strategy: str, n: int) -> float:  # type: ignore[no-untyped-def]
    from tests.harness.realnode_tasks import (
        TIMEOUT,
        LogFollower,
        cleanup_task,
        kill_training_process,
        new_running_pods,
        rank_of,
        submit,
        train_task,
    )
    from tests.harness.tasks import TASK_LABEL

    name = f"{strategy.lower()}-{n}"
    try:
        submit(rc, train_task(rc, name, steps=100, step_seconds=0.1, max_restarts=1, restart_strategy=strategy))
        first = rc.kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={name}", 2, timeout=TIMEOUT)
        rank0 = next(p for p in first if rank_of(p) == 0)
        LogFollower(rc, rank0["metadata"]["name"]).wait(r"step 10: loss")
        killed = time.time()
        kill_training_process(rank0["metadata"]["uid"])
        pods = first if strategy == "InPlace" else new_running_pods(
            rc, name, 1, {p["metadata"]["uid"] for p in first})
        logs = [LogFollower(rc, p["metadata"]["name"], timestamps=True) for p in pods]

        def both() -> list[float] | None:
            seen = [first_step_after_restart(f.text) for f in logs]
            return [x for x in seen if x is not None] if None not in seen else None

        stepped = rc.kube.wait_for(f"{name}: both ranks stepped after the restart", both, timeout=TIMEOUT,
                                   interval=0.2)
        return max(stepped) - killed
    finally:
        cleanup_task(rc, name)


def main() -> int:
    started = realnode_start(__doc__)
    if started is None:
        return 0
    args, (binaries, images) = started
    from tests.harness.realnode_tasks import real_cluster

    times: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    with controlplane.running("C", binaries) as cp, real_cluster(cp, images) as rc:
        for n in range(1, args.rounds + 1):
            for strategy in STRATEGIES:
                times[strategy].append(one_run(rc, strategy, n))
                print(f"round {n} {strategy}: kill -> every rank's first step after the restart "
                      f"{times[strategy][-1]:.2f} s", flush=True)
    med = {s: statistics.median(v) for s, v in times.items()}
    for s, v in times.items():
        print(f"{s:9} {med[s]:6.2f} s  [{min(v):.2f}-{max(v):.2f}]")
    ratio = med["InPlace"] / med["Recreate"]
    print(f"InPlace / Recreate: {ratio:.2f} (target <= 0.33)")
    print(f"load average after the run: {load_average()}")
    if args.json:
        print(json.dumps({"seconds": times, "median": med, "ratio": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
