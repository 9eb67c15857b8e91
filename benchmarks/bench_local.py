"""Local backend benchmarks, each next to a baseline measured in the same run.

    python benchmarks/bench_local.py

1. submit → all 8 workers of a gang (2 nodes × 4) running user code, vs spawning 8 bare processes
   of the same script until each has started;
2. injected preemption with room left → readmitted gang running again, vs stopping 8 bare processes
   and spawning 8 new ones;
3. daemon CPU while idle with 100 queued tasks (and one gang running), vs the same daemon idle with
   no task at all.

"Running user code" = the worker wrote its marker file, so interpreter start-up is included on both
sides.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from gangrun._backends.local import LocalBackend
from gangrun._core.spec import load_manifest

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


def manifest(tmp: Path, name: str, script: Path, d: Path, *, nodes: int, nproc: int, cpu: str) -> Path:
    doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
           "spec": {"nodes": nodes, "nprocPerNode": nproc, "command": [sys.executable, str(script)],
                    "env": {"BENCH_DIR": str(d)}, "resources": {"cpu": cpu, "memory": "10Mi"},
                    "failurePolicy": {"resumeAfterPreemption": True}, "terminationGracePeriod": "2s"}}
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


def main() -> None:
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
            spec = load_manifest(manifest(tmp, f"gang-{i}", script, d, nodes=2, nproc=4, cpu="1"))
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
        d = tmp / "blocker"
        d.mkdir()
        b.up(cpu="1")
        b.submit(load_manifest(manifest(tmp, "blocker", script, d, nodes=1, nproc=1, cpu="1")))
        for i in range(100):
            b.submit(load_manifest(manifest(tmp, f"queued-{i}", script, d, nodes=1, nproc=1, cpu="1")))
        wait_markers(d, 1)
        time.sleep(1)
        idle_100 = idle_cpu(pid, 10)
    finally:
        b.down()
    med = statistics.median
    print(f"{'measure':<58} {'gangrun':>10} {'baseline':>10}")
    print(f"{'submit -> 8-process gang running (median of %d)' % ROUNDS:<58} {med(start) * 1000:>8.0f}ms "
          f"{med(base_start) * 1000:>8.0f}ms  (spawn 8 bare processes)")
    print(f"{'preemption -> readmitted gang running again (median)':<58} {med(restart) * 1000:>8.0f}ms "
          f"{med(base_restart) * 1000:>8.0f}ms  (stop 8 + spawn 8 bare)")
    print(f"{'daemon CPU idle, 100 queued + 1 running':<58} {idle_100 * 100:>9.2f}% {idle_empty * 100:>9.2f}%  "
          "(same daemon, no task)")


if __name__ == "__main__":
    main()
