"""How fast a local gang restarts after a worker dies, next to a bare kill-and-respawn measured in the same run.

    python -m benchmarks.bench_local_restart [--rounds 5] [--workers 2,4] [--json]

For each N of --workers, one task of N nodes (one process each, `maxRestarts` above --rounds) runs the
worker script below: `gangrun.context()`, load the newest checkpoint, then steps of 50 ms (sleep),
rank 0 saving a small checkpoint every 5 steps, every rank writing a wall-clock line per step. Each
round waits until every rank has stepped past a save, SIGKILLs rank 1's training process and
measures kill -> every rank's first step after the whole-gang restart (the survivors get the stop
notice, save once more and exit; all N start again as new processes and load the checkpoint).

Baseline, interleaved with the rounds: N plain Python processes of the same script without gangrun
(the checkpoint a JSON file); kill rank 1, SIGKILL the others, reap them, spawn N new ones and wait
for each one's first step. Medians [min-max] over rounds; the ratio is of the medians.

Breakdown of the gangrun figure, for the rank that stepped last in each round (a round's parts add up
to its total; each part's median is printed): kill -> the daemon saw the exit (the timeline's
WorkerExited) -> new round started (WorkersRunning: the survivors stopped, N processes spawned) -> the
script's first line (interpreter start) -> `import gangrun` -> `gangrun.context()` (mostly importing the
SDK's modules, which `import gangrun` defers) -> checkpoint load -> first step.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._lib import load_average
from gangrun._backends.local import LocalBackend
from gangrun._core.spec import parse_manifest
from gangrun._core.timeline import EventType

STEP_SECONDS, SAVE_EVERY = 0.05, 5
WORKER = """import os, time
T0 = time.time()
import json, threading
d, rank, rnd = os.environ["BENCH_DIR"], int(os.environ["RANK"]), os.environ["JOBSET_RESTART_ATTEMPT"]
fd = os.open(os.path.join(d, f"r{rnd}-rank{rank}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def mark(what, value="", at=None):
    os.write(fd, f"{what} {time.time() if at is None else at:.6f} {value}\\n".encode())
mark("start", os.getpid(), T0)
every, pause, stopping = int(os.environ["SAVE_EVERY"]), float(os.environ["STEP_SECONDS"]), threading.Event()
if os.environ.get("BARE") == "1":
    ckpt = ctx = None
    try:
        step = json.loads(open(os.path.join(d, "ckpt.json")).read())["step"]
    except FileNotFoundError:
        step = 0
else:
    import gangrun
    mark("import")
    ctx = gangrun.context()
    ckpt = ctx.checkpoint
    ctx.on_stop(lambda notice: stopping.set())
    mark("context")
    path = ckpt.load()
    step = json.loads(path.read_bytes())["step"] if path else 0
mark("load", step)
def save(step):
    if ckpt is not None:
        ckpt.save(json.dumps({"step": step}).encode(), step=step)
    elif rank == 0:
        with open(os.path.join(d, "ckpt.tmp"), "w") as f:
            f.write(json.dumps({"step": step}))
        os.replace(os.path.join(d, "ckpt.tmp"), os.path.join(d, "ckpt.json"))
while not stopping.is_set():
    time.sleep(pause)
    step += 1
    if ctx is not None:
        ctx.progress(step)
    mark("step", step)
    if step % every == 0:
        save(step)
save(step)
if ckpt is not None:
    ckpt.wait()
"""
PARTS = ("kill -> daemon saw the exit", "exit -> new round started", "round started -> script's first line",
         "import gangrun", "gangrun.context()", "checkpoint load", f"first step ({STEP_SECONDS * 1000:.0f} ms sleep)")


def marks(d: Path, rnd: int, rank: int) -> list[tuple[str, float, str]]:
    try:
        lines = (d / f"r{rnd}-rank{rank}").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(w, float(t), v) for w, t, v in (f"{line} ".split(" ", 2) for line in lines if line.count(" ") >= 2)]


def first(found: list[tuple[str, float, str]], what: str) -> float:
    return next(t for w, t, _ in found if w == what)


def wait_steps(d: Path, rnd: int, n: int, steps: int, timeout: float = 120) -> None:
    """Until every rank of round `rnd` has taken `steps` steps since its load."""
    deadline = time.monotonic() + timeout
    while True:
        found = [marks(d, rnd, r) for r in range(n)]
        if all(sum(w == "step" for w, _, _ in m) >= steps for m in found):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {n} ranks of round {rnd} in {d} to take {steps} steps")
        time.sleep(0.005)


def bare_round(script: Path, d: Path, n: int) -> float:
    """N bare processes running; kill rank 1, kill and reap the rest, respawn N: kill -> every first step."""
    d.mkdir()
    env = {**os.environ, "BENCH_DIR": str(d), "BARE": "1", "STEP_SECONDS": str(STEP_SECONDS),
           "SAVE_EVERY": str(SAVE_EVERY)}

    def spawn(rnd: int) -> list[subprocess.Popen[bytes]]:
        return [subprocess.Popen([sys.executable, str(script)], env={**env, "RANK": str(r),
                                 "JOBSET_RESTART_ATTEMPT": str(rnd)}) for r in range(n)]

    procs = spawn(0)
    wait_steps(d, 0, n, SAVE_EVERY + 1)
    killed = time.time()
    procs[1].kill()
    procs[1].wait()
    for p in procs:
        p.kill()
        p.wait()
    procs = spawn(1)
    wait_steps(d, 1, n, 1)
    for p in procs:
        p.kill()
        p.wait()
    return max(first(marks(d, 1, r), "step") for r in range(n)) - killed


def gang_round(b: LocalBackend, name: str, d: Path, n: int, rnd: int) -> tuple[float, list[float]]:
    """Kill rank 1 of round `rnd`: kill -> every rank's first step in round rnd+1, and the breakdown."""
    wait_steps(d, rnd, n, SAVE_EVERY + 1)
    pid = int(next(v for w, _, v in marks(d, rnd, 1) if w == "start"))
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    wait_steps(d, rnd + 1, n, 1)
    events = [e for e in b.events(name) if e.time.timestamp() >= killed - 0.01]  # the daemon stamps to the µs
    seen = next(e.time.timestamp() for e in events if e.type is EventType.WORKER_EXITED)
    started = next(e.time.timestamp() for e in events if e.type is EventType.WORKERS_RUNNING)
    found = {r: marks(d, rnd + 1, r) for r in range(n)}
    last = max(found, key=lambda r: first(found[r], "step"))
    at = [killed, seen, started] + [first(found[last], w) for w in ("start", "import", "context", "load", "step")]
    return at[-1] - killed, [b - a for a, b in itertools.pairwise(at)]


def submit(b: LocalBackend, tmp: Path, script: Path, d: Path, n: int, rounds: int) -> str:
    name = f"restart-{n}"
    doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
           "spec": {"nodes": n, "command": [sys.executable, str(script)], "terminationGracePeriod": "10s",
                    "env": {"BENCH_DIR": str(d), "STEP_SECONDS": str(STEP_SECONDS), "SAVE_EVERY": str(SAVE_EVERY)},
                    "resources": {"cpu": "1", "memory": "50Mi"}, "failurePolicy": {"maxRestarts": rounds + 1}}}
    b.submit(parse_manifest(doc, source=str(tmp / f"{name}.yaml")))
    return name


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.0f} ms [{min(xs) * 1000:.0f}-{max(xs) * 1000:.0f}]"


def main(rounds: int, workers: list[int], *, json_out: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gangrun-bench-"))
    script = tmp / "worker.py"
    script.write_text(WORKER)
    load_before = load_average()
    print(f"load average {load_before}; {rounds} rounds per gang size, medians [min-max]", flush=True)
    b = LocalBackend(tmp / "home")
    b.up(cpu=str(sum(workers)), memory="8Gi", gpu=0)
    result: dict[str, Any] = {"rounds": rounds, "load_before": load_before, "sizes": {}}
    try:
        for n in workers:
            d = tmp / f"gang-{n}"
            d.mkdir()
            name = submit(b, tmp, script, d, n, rounds)
            gang, bare, parts = [], [], []
            for i in range(rounds):  # interleaved, so that a busy machine slows both alike
                bare.append(bare_round(script, tmp / f"bare-{n}-{i}", n))
                took, split = gang_round(b, name, d, n, i)
                gang.append(took)
                parts.append(split)
            b.cancel(name)
            medians = [statistics.median(p[k] for p in parts) for k in range(len(PARTS))]
            result["sizes"][n] = {"gangrun_s": gang, "bare_s": bare, "breakdown_median_s": dict(zip(PARTS, medians,
                                                                                                   strict=True))}
            ratio = statistics.median(gang) / statistics.median(bare)
            print(f"N={n}: kill rank 1 -> every rank's first step: gangrun {spread(gang)}, bare kill+respawn "
                  f"{spread(bare)}: x{ratio:.1f}")
            for part, m in zip(PARTS, medians, strict=True):
                print(f"    {part:<40} {m * 1000:6.0f} ms")
    finally:
        b.down()
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_after"] = load_average()
    print(f"load average after: {result['load_after']}")
    if json_out:
        print(json.dumps(result))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", default="2,4", help="gang sizes (nodes, one process each), comma-separated")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    a = ap.parse_args()
    main(a.rounds, [int(x) for x in a.workers.split(",")], json_out=a.json)
