"""A process's end as shells and Kubernetes report it: its exit code, or 128 + N when signal N killed it."""

from __future__ import annotations


def exit_status(returncode: int) -> int:
    """`subprocess`'s returncode (-N for a signal) as an exit status."""
    return 128 - returncode if returncode < 0 else returncode
