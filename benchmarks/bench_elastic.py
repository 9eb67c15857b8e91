"""Elastic gangs against waiting for the full size: the same seeded preemption storm, run twice.

    python -m benchmarks.bench_elastic [--seed 7] [--json]

On the local backend (quota 4 CPU, 1 CPU a node), with real worker processes:

- two low-priority data-parallel gangs of 4 nodes, each with a fixed amount of work (samples; a step
  on n nodes does n samples, as a fixed per-node batch does), checkpointing every step and resuming
  after preemption;
- a seeded storm of high-priority 2-node arrivals, each preempting the running low gang.

The storm runs once with the low gangs rigid (they wait for all 4 nodes) and once elastic
(`minNodes: 2`, `resizeCooldown: 1s`: they shrink to what fits, then grow back). Printed side by
side: useful node-seconds (samples that count × step time, the high tasks' work included), the
storm's wall time, their ratio (useful node-seconds per wall-clock second), and the work lost
(node-seconds computed again after a restore). The target: elastic completes at least 1.3× the
useful node-seconds per wall-clock second of rigid.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gangrun._backends.local import LocalBackend
from gangrun._manifest_file import load_manifest

WORKER = """import json, os, sys, time
import gangrun
ctx = gangrun.context()
nodes = int(os.environ["NNODES"])
target, step_s = int(os.environ["TARGET_SAMPLES"]), float(os.environ["STEP_SECONDS"])
path = ctx.checkpoint.load()
samples = json.loads(open(path, "rb").read())["samples"] if path else 0
rank0 = os.environ["RANK"] == "0"
if rank0:
    print(f"start nodes={nodes} samples={samples}", flush=True)
step = 0
while samples < target and not ctx.stop_requested:
    time.sleep(step_s)
    samples, step = samples + nodes, step + 1
    ctx.checkpoint.save(json.dumps({"samples": samples}).encode(), step=samples)
    if rank0:
        print(f"step nodes={nodes} samples={samples}", flush=True)
sys.exit(0 if samples >= target else 143)
"""
QUOTA_CPU = 4
STEP_SECONDS = 0.1
LOW_NODES, LOW_SAMPLES = 4, 4 * 100  # 10 s of work at the full size
HIGH_NODES, HIGH_SAMPLES = 2, 2 * 80  # 8 s each


def storm(seed: int, arrivals: int) -> list[float]:
    """High-priority arrival times (s): gaps of 9 s plus an exponential one of mean 2 s, after a 2 s start."""
    rng = random.Random(seed)
    t, times = 2.0, []
    for _ in range(arrivals):
        times.append(round(t, 2))
        t += 9.0 + rng.expovariate(1 / 2.0)
    return times


def manifest(tmp: Path, name: str, *, nodes: int, samples: int, priority: str, elastic: bool) -> Any:
    spec: dict[str, Any] = {
        "nodes": nodes, "command": [sys.executable, str(tmp / "worker.py")], "priorityClass": priority,
        "resources": {"cpu": "1", "memory": "64Mi"}, "terminationGracePeriod": "5s",
        "env": {"TARGET_SAMPLES": str(samples), "STEP_SECONDS": str(STEP_SECONDS)},
        "failurePolicy": {"resumeAfterPreemption": True},
    }
    if elastic:
        spec.update(minNodes=2, resizeCooldown="1s")
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask",
                                    "metadata": {"name": name}, "spec": spec}))
    return load_manifest(path)


def run(seed: int, arrivals: int, *, elastic: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gangrun-bench-elastic-") as d:
        tmp = Path(d)
        (tmp / "worker.py").write_text(WORKER)
        b = LocalBackend(tmp / "home")
        b.up(cpu=str(QUOTA_CPU), memory="4Gi", gpu=0)
        try:
            lows = [f"low-{i}" for i in range(2)]
            highs = [f"high-{i}" for i in range(arrivals)]
            t0 = time.monotonic()
            for name in lows:
                b.submit(manifest(tmp, name, nodes=LOW_NODES, samples=LOW_SAMPLES, priority="low", elastic=elastic))
            for name, at in zip(highs, storm(seed, arrivals), strict=True):
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                b.submit(manifest(tmp, name, nodes=HIGH_NODES, samples=HIGH_SAMPLES, priority="high",
                                  elastic=False))
            views = [wait_ended(b, name) for name in lows + highs]
            wall = time.monotonic() - t0
            bad = [(v["name"], v["phase"]) for v in views if v["phase"] != "Succeeded"]
            if bad:
                raise SystemExit(f"not every task succeeded: {bad}")
            computed = sum(_computed(list(b.logs(name, rank=0))) for name in lows + highs)
            useful = 2 * LOW_SAMPLES + arrivals * HIGH_SAMPLES
            resizes = sum(1 for name in lows for e in b.events(name) if e.type.value == "Resized")
            return {"elastic": elastic, "wall_s": round(wall, 2),
                    "useful_node_s": round(useful * STEP_SECONDS, 2),
                    "useful_node_s_per_s": round(useful * STEP_SECONDS / wall, 3),
                    "work_lost_node_s": round((computed - useful) * STEP_SECONDS, 2),
                    "retries": sum(v["userRetriesUsed"] + v["systemRetriesUsed"] for v in views),
                    "attempts": max(v["attempt"] for v in views), "resizes": resizes}
        finally:
            b.down()


def wait_ended(b: LocalBackend, name: str, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    view = b.get(name)
    while view["phase"] not in ("Succeeded", "Failed", "Aborted"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: still {view['phase']} after {timeout} s: {view['reason']}")
        view = b.wait_for_change(name, after_version=(view["attempt"], view["phaseVersion"], view["phase"]),
                                 timeout=0.5)
    return view


def _computed(lines: list[str]) -> int:
    """Samples computed, counting those computed again after a restore: each step line adds its nodes."""
    return sum(int(line.split("nodes=")[1].split()[0]) for line in lines if line.startswith("step "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--arrivals", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rigid = run(args.seed, args.arrivals, elastic=False)
    flexible = run(args.seed, args.arrivals, elastic=True)
    ratio = flexible["useful_node_s_per_s"] / rigid["useful_node_s_per_s"]
    if args.json:
        print(json.dumps({"seed": args.seed, "storm": storm(args.seed, args.arrivals), "rigid": rigid,
                          "elastic": flexible, "ratio": round(ratio, 3)}))
        return
    print(f"storm (seed {args.seed}): high-priority 2-node arrivals at {storm(args.seed, args.arrivals)} s")
    print(f"{'':28}{'rigid':>10}{'elastic':>10}")
    for key, label in (("wall_s", "time to finish (s)"), ("useful_node_s", "useful node-seconds"),
                       ("useful_node_s_per_s", "useful node-s per second"), ("work_lost_node_s", "work lost (node-s)"),
                       ("retries", "retries spent"), ("attempts", "attempts (max)"), ("resizes", "resizes")):
        print(f"{label:28}{rigid[key]:>10}{flexible[key]:>10}")
    print(f"elastic / rigid useful node-seconds per second: {ratio:.2f}x (target >= 1.3x)")


if __name__ == "__main__":
    main()
