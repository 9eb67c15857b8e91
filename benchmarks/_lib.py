"""What the benchmarks share: the repository's root, the machine's load average (printed beside every timing, the
machine may be shared) and what the real node needs before a real-node benchmark can start."""

from __future__ import annotations

from pathlib import Path

from tests.harness import binaries, realnode

REPO = Path(__file__).resolve().parents[1]


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
