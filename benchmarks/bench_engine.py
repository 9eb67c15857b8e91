"""Lifecycle engine throughput: decisions per second on one core over a realistic mix of observations.

    python -m benchmarks.bench_engine [--seconds 2]

The mix replays what a controller sees over a task's life (mostly steady Running, then admission,
start-up, preemption, the S7 race, readmission, evictions that end attempts, completion). Printed next
to the cost of a no-op Python call measured in the same run, so the figure travels across machines.
Target (issue #2): at least 50,000 decisions/s.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta

from gangrun._core.engine import decide
from gangrun._core.observation import NOT_FOUND, observed
from gangrun._core.policy import Policy
from gangrun._core.state import TaskState
from tests.harness.builders import make_gang, make_workload

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def scenario() -> list[tuple[Policy, TaskState, object]]:
    """(policy, state before, observation) triples recorded by replaying one task's life, weighted."""
    policy = Policy(retries=1, resume_after_preemption=True, max_runtime=timedelta(hours=4))
    steps = [
        (NOT_FOUND, 1),
        (observed(make_gang().suspended().obj(), make_workload().obj()), 5),
        (observed(make_gang().scheduled(1).obj(), make_workload().admitted().obj()), 3),
        (observed(make_gang().ready(1).obj(), make_workload().admitted().obj()), 3),
        (observed(make_gang().ready().obj(), make_workload().admitted().obj()), 60),  # steady running
        (observed(make_gang().ready().obj(), make_workload().preemption().obj()), 2),  # W1
        (observed(make_gang().suspended().obj(), make_workload().admitted().obj()), 1),  # S7 race
        (observed(make_gang().suspended().obj(), make_workload().preemption().obj()), 10),  # waiting
        (observed(make_gang().suspended().obj(), make_workload().readmitted().obj()), 2),
        (observed(make_gang().ready().obj(), make_workload().readmitted().obj()), 10),
        (observed(make_gang().ready().restarts(1).restarting().obj(), make_workload().admitted().obj()), 2),
        (observed(make_gang().suspended().obj(), make_workload().admitted().evicted("NodeFailures", "n1").obj()), 1),
        (observed(make_gang().completed().obj(), make_workload().admitted().obj()), 1),
    ]
    triples = []
    state = TaskState.new(now=T0)
    now = T0
    for obs, weight in steps:
        for _ in range(weight):
            now += timedelta(seconds=1)
            triples.append((policy, state, obs))
            state = decide(policy, state, obs, now=now).state
    return triples


def noop(policy, state, obs, *, now):  # the baseline: a call with the same arguments that does nothing
    return None


def measure(func, triples, now, seconds: float) -> float:
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for policy, state, obs in triples:
            func(policy, state, obs, now=now)
        n += len(triples)
        if time.perf_counter() >= deadline:
            break
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    triples = scenario()
    now = T0 + timedelta(hours=1)
    measure(decide, triples, now, 0.2)  # warm up
    noop_rate = measure(noop, triples, now, args.seconds)
    rate = measure(decide, triples, now, args.seconds)
    print(f"mix of {len(triples)} observations over one task's life")
    print(f"no-op call:       {noop_rate:14,.0f} calls/s  ({1e9 / noop_rate:7.0f} ns)")
    print(f"engine decide():  {rate:14,.0f} decisions/s  ({1e9 / rate:7.0f} ns)")
    print(f"ratio:            one decision costs {noop_rate / rate:.1f} no-op calls")
    print(f"target 50,000/s:  {'met' if rate >= 50_000 else 'NOT met'} ({rate / 50_000:.1f}x)")


if __name__ == "__main__":
    main()
