"""What the benchmarks share: the repository's root, the machine's load average (printed beside every timing, the
machine may be shared) and what the real node needs before a real-node benchmark can start."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tests.harness import binaries, realnode

REPO = Path(__file__).resolve().parents[1]


def control_plane_binaries() -> binaries.Binaries | None:
    """The control plane's binaries; None, once it printed why, when they are not built (the benchmark
    then exits 0)."""
    try:
        return binaries.locate_binaries()
    except binaries.NotBuiltError as e:
        print(f"skipped: {e}")
        return None


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def prerequisites() -> tuple[binaries.Binaries, list[Path]] | str:
    """The Kubernetes binaries and the images (built when missing) the real node needs; or why it cannot
    start here (no root, no binaries, the node's Debian packages missing, the image build failing)."""
    try:
        found = binaries.locate_binaries()
    except binaries.NotBuiltError as e:
        return str(e)
    missing = realnode.missing_pieces(found)
    if missing:
        return "the real node cannot start here; missing: " + "; ".join(missing)
    try:
        return found, realnode.image_archives()
    except realnode.NodeSetupError as e:
        return str(e)


def realnode_start(doc: str) -> tuple[argparse.Namespace, tuple[binaries.Binaries, list[Path]]] | None:
    """A real-node benchmark's arguments (--rounds, --json) and prerequisites, the load printed; None (and
    why, printed) when the real node cannot start here."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()
    parts = prerequisites()
    if isinstance(parts, str):
        print(f"skipped: {parts}")
        return None
    print(f"load average before the run: {load_average()} ({os.cpu_count()} cores)")
    return args, parts
