"""The stop notice's cause and message when a gang stops for its own failure policy, as both backends write
them (the notice itself, `{"cause", "message", "deadline"}`, is gangrun._ckpt.notice's).

A worker failed: while restarts are left the whole gang restarts (cause `Restart`), else it stops (cause
`WorkerFailed`). Either way the surviving ranks learn which worker failed, instead of a stop whose cause
is unknown.
"""

from __future__ import annotations

from gangrun._core.policy import WORKER_FAILED

__all__ = ["RESTART", "WORKER_FAILED", "no_restart_left_message", "restart_message"]

RESTART = "Restart"  # a peer failed and the whole gang restarts (failurePolicy.maxRestarts)


def restart_message(failure: str) -> str:
    """`failure`: the failed worker as the backend names it ("worker rank 1 (node 1) exited with code 3")."""
    return f"{failure or 'a worker failed'}; the whole gang restarts"


def no_restart_left_message(failure: str) -> str:
    return f"{failure or 'a worker failed'}; no restart left: the gang stops"
