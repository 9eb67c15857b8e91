"""How fast a worker pod's command starts: `python -m gangrun.launch -- python worker.py`, without Kubernetes.

    python -m benchmarks.bench_launch [--runs 20] [--baseline-src DIR] [--json]

The launcher runs as in a worker pod (GANGRUN_TERMINATION_LOG and GANGRUN_EVENTS_FILE in a temporary
folder, a free GANGRUN_REPORT_PORT, NPROC_PER_NODE=1, node 1 of 2 with the start id given, MASTER_ADDR
localhost: the DNS wait, the report server and the termination message all happen). Medians over --runs,
the modes interleaved so that a busy machine slows them alike:

1. launcher start -> the worker script's first line, the worker as a subprocess (GANGRUN_LAUNCH_FORK=0,
   how every pod started before) vs in a fork of the launcher (runpy); baseline: bare `python worker.py`,
   one interpreter start;
2. the same to the end of the worker's `import gangrun; gangrun.context()` (what a worker does first);
   with --baseline-src, the same for that tree's launcher (before the fork, e.g. the main branch's);
3. `python -X importtime -c "import gangrun"` and of a worker's imports (`gangrun.context()`,
   `gangrun.checkpoint`): the sum of the top-level imports, this tree vs --baseline-src (another
   checkout's src folder, e.g. the main branch's) when given.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._lib import REPO, load_average

FIRST_LINE = "import time, sys; sys.stdout.write(repr(time.monotonic()) + '\\n'); sys.stdout.flush()\n"
CONTEXT = "import gangrun; gangrun.context()\n" + FIRST_LINE
IMPORTS = {"import gangrun": "import gangrun",
           "worker imports": "import gangrun, gangrun.checkpoint; gangrun.context().checkpoint"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pod_env(folder: Path, src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "GANGRUN_TERMINATION_LOG": str(folder / "termination-log"),
            "GANGRUN_EVENTS_FILE": str(folder / "events.jsonl"), "GANGRUN_REPORT_PORT": str(_free_port()),
            "NPROC_PER_NODE": "1", "NNODES": "2", "JOB_COMPLETION_INDEX": "1", "MASTER_ADDR": "localhost",
            "GANGRUN_START": "bench", "GANGRUN_TASK": "bench", "GANGRUN_ATTEMPT": "1",
            "GANGRUN_CHECKPOINT_PATH": str(folder / "ckpt" / "attempt-1")}


def _start_to_first_line(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.monotonic()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {out.returncode}: {out.stderr}")
    return float(out.stdout.splitlines()[-1]) - started


def starts(runs: int, src: Path, baseline_src: Path | None = None) -> dict[str, dict[str, float]]:
    """Median seconds from the launcher's start to the script's line, per script and mode."""
    py = sys.executable
    found: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, text in (("first line", FIRST_LINE), ("after gangrun.context()", CONTEXT)):
            (folder / "worker.py").write_text(text)
            modes = {"bare python": ([py, "worker.py"], {}),
                     "launcher, subprocess": ([py, "-m", "gangrun.launch", "--", py, "worker.py"],
                                              {"GANGRUN_LAUNCH_FORK": "0"}),
                     "launcher, fork+runpy": ([py, "-m", "gangrun.launch", "--", py, "worker.py"], {})}
            if baseline_src is not None:
                modes["baseline tree's launcher"] = ([py, "-m", "gangrun.launch", "--", py, "worker.py"],
                                                     {"PYTHONPATH": str(baseline_src)})
            times: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(runs):
                for mode, (argv, extra) in modes.items():
                    times[mode].append(_start_to_first_line(argv, {**_pod_env(folder, src), **extra}, folder))
            found[name] = times
    return {name: {m: statistics.median(t) for m, t in times.items()} for name, times in found.items()}


def import_ms(code: str, src: Path, runs: int) -> float:
    """Median of the top-level imports' cumulative microseconds, as milliseconds."""
    totals = []
    for _ in range(runs):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(src), "GANGRUN_CHECKPOINT_PATH": "/tmp/bench-ckpt"},
                             check=True).stderr
        rows = [line.split("|") for line in err.splitlines() if line.startswith("import time:") and "self [us]" not in line]
        totals.append(sum(int(r[1]) for r in rows if not r[2].startswith("  ")) / 1000)
    return statistics.median(totals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--baseline-src", type=Path, help="another checkout's src folder, for the import times")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    src = REPO / "src"
    print(f"load average {load_average()}; {args.runs} runs each, medians", flush=True)
    result: dict[str, object] = {"load": load_average()}
    found = starts(args.runs, src, args.baseline_src)
    result["start"] = found
    for name, modes in found.items():
        bare, sub, fork = modes["bare python"], modes["launcher, subprocess"], modes["launcher, fork+runpy"]
        print(f"launcher start -> worker's {name}: subprocess {sub * 1000:.0f} ms, fork+runpy {fork * 1000:.0f} ms "
              f"(x{fork / sub:.2f}); bare python {bare * 1000:.0f} ms: the launcher adds "
              f"{(sub - bare) * 1000:.0f} ms -> {(fork - bare) * 1000:.0f} ms")
        if "baseline tree's launcher" in modes:
            old = modes["baseline tree's launcher"]
            print(f"    baseline tree's launcher {old * 1000:.0f} ms (adds {(old - bare) * 1000:.0f} ms): "
                  f"this tree's fork+runpy x{fork / old:.2f}")
    imports: dict[str, dict[str, float]] = {}
    for name, code in IMPORTS.items():
        now = import_ms(code, src, args.runs)
        imports[name] = {"this tree": now}
        line = f"-X importtime {name}: {now:.1f} ms"
        if args.baseline_src:
            before = import_ms(code, args.baseline_src, args.runs)
            imports[name]["baseline"] = before
            line += f" vs {before:.1f} ms baseline (x{now / before:.2f})"
        print(line)
    result["imports_ms"] = imports
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
