"""Local backend benchmarks, each next to a baseline measured in the same run.

    python -m benchmarks.bench_local [--tasks 500] [--json]

Small gangs (a few seconds):

1. submit → all 8 workers of a gang (2 nodes × 4) running user code, vs spawning 8 bare processes
   of the same script until each has started;
2. injected preemption with room left → readmitted gang running again, vs stopping 8 bare processes
   and spawning 8 new ones;
3. daemon CPU while idle with 100 queued tasks (and one gang running), vs the same daemon idle with
   no task at all.

"Running user code" = the worker wrote its marker file, so interpreter start-up is included on both
sides.

Many tasks (`--tasks N`, default 500; a minute or two), through `LocalBackend` only, so the figures
survive changes to the daemon's internals:

4. submit round-trip at queue depth 0-50 vs the last 50 (each submit runs an admission round over the
   whole queue);
5. `get` round-trip with N tasks queued vs with one task;
6. daemon CPU idle with N queued behind a running gang vs idle with no task (3.);
7. preemption: a `high` task submitted while one `normal` gang holds the quota -> the high task's
   worker running, with N tasks queued vs with none;
8. moving: the quota raised to 8 CPU, the N queued 1-CPU tasks (`sleep 0.2`) run to Succeeded: wall
   time vs the same N commands run 8 at a time as bare processes, the daemon's CPU while they move,
   and `get` latency meanwhile;
9. the pure admission planner (`admission.plan`, no daemon) at n = 100, 200, 500, 1000 gangs, in
   three queue shapes; its time ratio to n = 100 next to the n log n ratio. A ratio well above
   n log n is printed as such: the planner is then worse than O(n log n) per decision round.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from gangrun._backends.local import LocalBackend
from gangrun._backends.local.admission import Request, Resources, plan
from gangrun._core.spec import TaskSpec, parse_manifest

WORKER = """import os, time
open(os.path.join(os.environ["BENCH_DIR"], str(os.getpid())), "w").close()
time.sleep(float(os.environ.get("SLEEP", "600")))
"""
ROUNDS = 3


def wait_markers(d: Path, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(os.listdir(d)) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {n} workers in {d}")
        time.sleep(0.002)


def bare_spawn(script: Path, d: Path, n: int = 8) -> tuple[float, list[subprocess.Popen]]:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, str(script)], env={**os.environ, "BENCH_DIR": str(d)})
             for _ in range(n)]
    wait_markers(d, n)
    return time.perf_counter() - t0, procs


def manifest(tmp: Path, name: str, script: Path, d: Path, *, nodes: int, nproc: int, cpu: str,
             command: list[str] | None = None, priority: str = "") -> TaskSpec:
    doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
           "spec": {"nodes": nodes, "nprocPerNode": nproc, "command": command or [sys.executable, str(script)],
                    "env": {"BENCH_DIR": str(d), "MARK": str(d / name)}, "resources": {"cpu": cpu, "memory": "10Mi"},
                    "failurePolicy": {"resumeAfterPreemption": True}, "terminationGracePeriod": "2s"}}
    if priority:
        doc["spec"]["priorityClass"] = priority
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return parse_manifest(doc, source=str(p))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


def main(n: int, *, json_out: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gangrun-bench-"))
    script = tmp / "worker.py"
    script.write_text(WORKER)
    b = LocalBackend(tmp / "home")
    b.up(cpu="8", memory="8Gi", gpu=0)
    start, restart, base_start, base_restart = [], [], [], []
    try:
        for i in range(ROUNDS):
            d = tmp / f"bare-{i}"
            d.mkdir()
            t, procs = bare_spawn(script, d)
            base_start.append(t)
            d2 = tmp / f"bare-{i}-again"
            d2.mkdir()
            t0 = time.perf_counter()
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait()
            _, procs = bare_spawn(script, d2)
            base_restart.append(time.perf_counter() - t0)
            for p in procs:
                p.kill()
                p.wait()

            d = tmp / f"gang-{i}"
            d.mkdir()
            spec = manifest(tmp, f"gang-{i}", script, d, nodes=2, nproc=4, cpu="1")
            t0 = time.perf_counter()
            b.submit(spec)
            wait_markers(d, 8)
            start.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b.evict(f"gang-{i}", "Preempted")
            wait_markers(d, 16)
            restart.append(time.perf_counter() - t0)
            b.cancel(f"gang-{i}")
        pid = b.status()["pid"]
        while b.status()["used"]["cpu"] != "0":
            time.sleep(0.05)
        idle_empty = idle_cpu(pid, 5)
        many = many_tasks(b, tmp, script, n, pid)
    finally:
        b.down()
    med = statistics.median
    print(f"{'measure':<58} {'gangrun':>10} {'baseline':>10}")
    print(f"{f'submit -> 8-process gang running (median of {ROUNDS})':<58} {med(start) * 1000:>8.0f}ms "
          f"{med(base_start) * 1000:>8.0f}ms  (spawn 8 bare processes)")
    print(f"{'preemption -> readmitted gang running again (median)':<58} {med(restart) * 1000:>8.0f}ms "
          f"{med(base_restart) * 1000:>8.0f}ms  (stop 8 + spawn 8 bare)")
    print(f"{f'daemon CPU idle, {n} queued + 1 running':<58} {many['idle_queued'] * 100:>9.2f}% "
          f"{idle_empty * 100:>9.2f}%  (same daemon, no task)")
    row = "{:<58} {:>8.1f}ms {:>8.1f}ms  ({})"
    k = min(50, n)
    print(row.format(f"submit round-trip p50, queue depth {n - k}-{n}", many["submit_last_p50"] * 1000,
                     many["submit_first_p50"] * 1000, f"depth 0-{k}"))
    print(row.format(f"get round-trip p50, {n} tasks", many["get_p50"] * 1000, many["get_base_p50"] * 1000,
                     "1 task"))
    print(row.format(f"get round-trip p99, {n} tasks", many["get_p99"] * 1000, many["get_base_p99"] * 1000,
                     "1 task"))
    print(row.format(f"high submitted -> its worker running (median), {n} queued", many["preempt"] * 1000,
                     many["preempt_base"] * 1000, "nothing queued"))
    print("{:<58} {:>9.1f}s {:>9.1f}s  ({})".format(
        f"{n} x `sleep 0.2`, 8 at a time, submitted -> all Succeeded", many["drain"], many["drain_base"],
        "the same commands as bare processes"))
    print(f"  daemon CPU while they moved: {many['moving_cpu_s']:.2f} s over {many['drain']:.1f} s "
          f"({many['moving_cpu_s'] / many['drain'] * 100:.0f}% of a core, {many['moving_cpu_s'] / n * 1000:.1f} ms "
          f"per task); get meanwhile p50 {many['get_moving_p50'] * 1000:.1f} ms, "
          f"p99 {many['get_moving_p99'] * 1000:.1f} ms")
    scaling = admission_scaling()
    print("admission.plan per decision round (pure, no daemon); ratio to n=100 vs the n log n ratio:")
    for shape, rows in scaling.items():
        cells = "   ".join(f"n={r['n']}: {r['ms']:.2f} ms x{r['ratio']:.1f} (nlogn x{r['nlogn']:.1f})" for r in rows)
        worst = rows[-1]["ratio"] / rows[-1]["nlogn"]
        verdict = "within O(n log n)" if worst <= 1.5 else f"WORSE than O(n log n): {worst:.1f}x the n log n ratio"
        print(f"  {shape:<13} {cells}   -> {verdict}")
    if json_out:
        print(json.dumps({"tasks": n, "idle_empty_cpu_pct": round(idle_empty * 100, 2),
                          **{k: round(v, 4) for k, v in many.items()}, "admission": scaling}))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def wait_files(d: Path, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while len(os.listdir(d)) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {n} files in {d}")
        time.sleep(0.01)


def preempt_round(b: LocalBackend, tmp: Path, script: Path, name: str, blocker_dir: Path) -> float:
    """A `high` task submitted while a `normal` gang holds all the quota -> the high task's worker running;
    then it is cancelled and the preempted gang readmitted (its worker starts again)."""
    d = tmp / name
    d.mkdir()
    before = len(os.listdir(blocker_dir))
    t0 = time.perf_counter()
    b.submit(manifest(tmp, name, script, d, nodes=1, nproc=1, cpu="1", priority="high"))
    wait_markers(d, 1)
    took = time.perf_counter() - t0
    b.cancel(name)
    wait_markers(blocker_dir, before + 1)
    return took


def bare_pool(commands: list[tuple[list[str], dict[str, str]]], width: int) -> float:
    """Run the commands `width` at a time as plain child processes; the wall time until all exited."""
    t0 = time.perf_counter()
    running: list[subprocess.Popen[bytes]] = []
    todo = list(commands)
    while todo or running:
        while todo and len(running) < width:
            argv, env = todo.pop(0)
            running.append(subprocess.Popen(argv, env={**os.environ, **env}))
        # poll, not os.wait(): the daemon is a child of this process too, and it does not exit
        running = [p for p in running if p.poll() is None]
        time.sleep(0.002)
    return time.perf_counter() - t0


def many_tasks(b: LocalBackend, tmp: Path, script: Path, n: int, pid: int) -> dict[str, float]:
    """Items 4-8 of the module docstring, on the daemon the small-gang rounds left idle and empty."""
    out: dict[str, float] = {}
    blocker_dir = tmp / "blocker"
    blocker_dir.mkdir()
    b.up(cpu="1")
    b.submit(manifest(tmp, "blocker", script, blocker_dir, nodes=1, nproc=1, cpu="1"))
    wait_markers(blocker_dir, 1)
    gets = [timed(b.get, "blocker") for _ in range(200)]
    out["get_base_p50"], out["get_base_p99"] = pct(gets, 50), pct(gets, 99)
    out["preempt_base"] = statistics.median(preempt_round(b, tmp, script, f"high-base-{i}", blocker_dir)
                                            for i in range(ROUNDS))

    # N `low` tasks queue behind the `normal` blocker: nothing moves until the quota grows.
    moving_dir = tmp / "moving"
    moving_dir.mkdir()
    cmd = ["sh", "-c", 'sleep 0.2 && : > "$MARK"']
    names = [f"q-{i:04d}" for i in range(n)]
    submits = [timed(b.submit, manifest(tmp, nm, script, moving_dir, nodes=1, nproc=1, cpu="1", command=cmd,
                                        priority="low")) for nm in names]
    out["submit_first_p50"], out["submit_last_p50"] = pct(submits[:50], 50), pct(submits[-50:], 50)
    time.sleep(1)
    out["idle_queued"] = idle_cpu(pid, 10)
    gets = [timed(b.get, names[i * 7919 % n]) for i in range(200)]
    out["get_p50"], out["get_p99"] = pct(gets, 50), pct(gets, 99)
    out["preempt"] = statistics.median(preempt_round(b, tmp, script, f"high-{i}", blocker_dir)
                                       for i in range(ROUNDS))

    # Let them move: 8 more CPU, the blocker keeps its one.
    cpu0 = cpu_seconds(pid)
    t0 = time.perf_counter()
    b.up(cpu="9")
    moving_gets: list[float] = []
    deadline = time.monotonic() + 60 + 2 * n
    while len(os.listdir(moving_dir)) < n or any(t["phase"] != "Succeeded" for t in b.list()
                                                  if t["name"].startswith("q-")):
        if time.monotonic() > deadline:
            raise SystemExit(f"the {n} queued tasks did not all succeed in time")
        if len(os.listdir(moving_dir)) < n:  # while they run, sample get; list only at the end
            moving_gets.append(timed(b.get, names[len(moving_gets) * 7919 % n]))
        time.sleep(0.05)
    out["drain"] = time.perf_counter() - t0
    out["moving_cpu_s"] = cpu_seconds(pid) - cpu0
    out["get_moving_p50"], out["get_moving_p99"] = pct(moving_gets, 50), pct(moving_gets, 99)
    bare_dir = tmp / "bare-moving"
    bare_dir.mkdir()
    out["drain_base"] = bare_pool([(cmd, {"MARK": str(bare_dir / nm)}) for nm in names], 8)
    return out


ADMISSION_SIZES = (100, 200, 500, 1000)
ONE = Resources(cpu=Decimal(1), memory=Decimal(10 * 2**20))


def queue_shape(shape: str, n: int) -> tuple[Resources, list[Request], list[Request]]:
    """n gangs of 1 CPU: `queued` = 8 admitted, n-8 waiting at the same priority (the daemon's usual
    state); `preempting` = n/2 low admitted, n/2 high waiting, each preempting one; `full` = n/2
    admitted, n/2 waiting at the same priority, none may preempt."""
    held = 8 if shape == "queued" else n // 2
    low = 100 if shape == "preempting" else 1000
    high = 10000 if shape == "preempting" else 1000
    admitted = [Request(name=f"a{i}", priority=low, order=i, resources=ONE, admitted_at=float(i)) for i in range(held)]
    pending = [Request(name=f"p{i}", priority=high, order=held + i, resources=ONE) for i in range(n - held)]
    return ONE.scaled(held), admitted, pending


def admission_scaling() -> dict[str, list[dict[str, float]]]:
    out: dict[str, list[dict[str, float]]] = {}
    for shape in ("queued", "preempting", "full"):
        rows: list[dict[str, float]] = []
        for n in ADMISSION_SIZES:
            quota, admitted, pending = queue_shape(shape, n)
            reps = max(5, 5000 // n)
            best = math.inf
            for _ in range(3):  # the best of three batches: the machine may be shared
                t0 = time.perf_counter()
                for _ in range(reps):
                    plan(quota, admitted, pending)
                best = min(best, (time.perf_counter() - t0) / reps)
            first = rows[0] if rows else {"n": n, "ms": best * 1000}
            rows.append({"n": n, "ms": round(best * 1000, 3), "ratio": round(best * 1000 / first["ms"], 2),
                         "nlogn": round(n * math.log(n) / (first["n"] * math.log(first["n"])), 2)})
        out[shape] = rows
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    a = ap.parse_args()
    main(a.tasks, json_out=a.json)
