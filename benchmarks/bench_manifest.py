"""Reading manifests, good and hostile: time and peak memory against PyYAML's own safe loader.

    python -m benchmarks.bench_manifest           # prints a table
    python -m benchmarks.bench_manifest --json    # one JSON document

For each input, in one run: the time `gangrun._manifest_file.parse_document` (+ `parse_manifest`
where the document gets that far) takes, and its peak traced memory, each as a ratio to
`yaml.safe_load` of a typical 1 KiB manifest (the baseline). The hostile inputs are the classes
refused at `gangrun validate`: a 1 MiB file at the size cap, an alias bomb, deep nesting, a
5,000-digit number, a duplicate key, a lone surrogate. Targets: every hostile input is refused
within 10x the baseline's time and memory (the parse stops at the first problem, and the file is
read no further than the cap); a valid manifest at the cap is read within 100x the baseline's time,
in memory proportional to its size. PyYAML's loader is not run on the hostile inputs: on the alias
bomb it does not end in useful time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import yaml

from gangrun._core.spec import parse_manifest
from gangrun._errors import SpecError
from gangrun._manifest_file import MAX_BYTES, parse_document

GOOD = b"""apiVersion: gangrun.dev/v1alpha1
kind: ClusteredTask
metadata: {name: train}
spec:
  nodes: 2
  nprocPerNode: 4
  command: [python, -m, train, --epochs, "10"]
  env: {A: "1", B: two, C: "3"}
  resources: {cpu: "4", memory: 16Gi, gpu: 1}
  retries: 2
  maxRuntime: 4h
  failurePolicy: {maxRestarts: 1, resumeAfterPreemption: true}
  queue: default
  priorityClass: low
  checkpoint: {uri: "s3://bucket/prefix"}
"""


def _bomb(levels: int) -> bytes:
    out = [b"a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    out += [b"a%d: &a%d [%s]" % (i, i, b", ".join([b"*a%d" % (i - 1)] * 10)) for i in range(1, levels)]
    return b"\n".join(out) + b"\n"


def _at_cap() -> bytes:
    """A valid manifest just under the cap: 250 environment variables of 4 KiB."""
    body = GOOD.replace(b"  env: {A: \"1\", B: two, C: \"3\"}\n", b"") + b"  env:\n"
    value = b"x" * ((MAX_BYTES - len(body)) // 250 - 16)
    return body + b"".join(b"    V%03d: %s\n" % (i, value) for i in range(250))


INPUTS: dict[str, bytes] = {
    "good (1 KiB)": GOOD,
    "1 MiB at the cap": _at_cap(),
    "over the cap": b"#" * (MAX_BYTES + 1),
    "alias bomb (10 levels)": _bomb(10),
    "flow nesting x100000": b"[" * 100_000,
    "block nesting x200": b"".join(b"  " * i + b"a:\n" for i in range(200)),
    "5,000-digit number": GOOD + b"  maxSystemRetries: " + b"9" * 5000 + b"\n",
    "duplicate key": GOOD + b"  nodes: 3\n",
    "lone surrogate (JSON)": b'{"apiVersion": "\\ud800"}',
    "maxRuntime: .inf": GOOD.replace(b"4h", b".inf"),
}


def _gangrun(data: bytes) -> Callable[[], Any]:
    def run() -> str:
        try:
            parse_manifest(parse_document(data, json_=data.startswith(b"{")))
        except SpecError as e:
            return "refused: " + str(e)[:60]
        return "accepted"
    return run


def _measure(fn: Callable[[], Any], repeat: int) -> tuple[float, int, Any]:
    times = []
    result = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(times), peak, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    base_t, base_m, _ = _measure(lambda: yaml.safe_load(GOOD), args.repeat)
    rows = []
    for name, data in INPUTS.items():
        t, m, result = _measure(_gangrun(data), args.repeat)
        rows.append({"input": name, "bytes": len(data), "seconds": t, "peakBytes": m,
                     "timeRatio": t / base_t, "memoryRatio": m / base_m, "result": result})
    doc = {"baseline": {"seconds": base_t, "peakBytes": base_m}, "inputs": rows}
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"baseline yaml.safe_load of a 1 KiB manifest: {base_t * 1e3:.2f} ms, {base_m / 1024:.0f} KiB peak")
    print(f"{'input':<26}{'bytes':>9}{'ms':>9}{'x time':>9}{'KiB peak':>10}{'x mem':>8}  result")
    for r in rows:
        print(f"{r['input']:<26}{r['bytes']:>9}{r['seconds'] * 1e3:>9.2f}{r['timeRatio']:>9.1f}"
              f"{r['peakBytes'] / 1024:>10.0f}{r['memoryRatio']:>8.1f}  {r['result']}")


if __name__ == "__main__":
    main()
