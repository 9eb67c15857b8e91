"""The stored form of an `Accounting` (B5): the local store's row and the Kubernetes status.

`dump` writes every field the fold needs to go on, plus `badputSeconds` for readers of the status;
`fields` reads them back as the keyword arguments of `Accounting` (a missing field takes its default,
so a status written by an older controller still reads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gangrun._core import badput
from gangrun._core.accounting_records import CheckpointMark, UpPeriod, WorkLost
from gangrun._core.times import time_in, time_out

if TYPE_CHECKING:  # the accounting calls this module: only its type is needed here
    from gangrun._core.accounting import Accounting


def dump(a: Accounting) -> dict[str, Any]:
    p = a.last_up
    return {
        "submittedAt": time_out(a.submitted_at), "endedAt": time_out(a.ended_at),
        "queuedSeconds": a.queued_seconds, "queuedSince": time_out(a.queued_since),
        "gangUpSeconds": a.gang_up_seconds, "upSince": time_out(a.up_since), "upAttempt": a.up_attempt,
        "firstUp": time_out(a.first_up), "steppedAt": time_out(a.stepped_at),
        "restoringSeconds": a.restoring_seconds,
        "lastUp": None if p is None else p.for_json(),
        "downSince": time_out(a.down_since), "downWaiting": a.down_waiting,
        "waitingSeconds": a.waiting_seconds, "restartingSeconds": a.restarting_seconds,
        "awaitingWorkers": a.awaiting_workers, "workersRunningAt": time_out(a.workers_running_at),
        "workLost": [w.for_json() for w in a.work_lost],
        "size": a.size, "belowFullSeconds": a.below_full_seconds, "startupSeconds": a.startup_seconds,
        "stopping": a.stopping, "restartDue": a.restart_due,
        "lastCheckpoint": None if a.last_checkpoint is None else a.last_checkpoint.for_json(),
        "finalSaveSeconds": list(a.final_saves), "periodicSaveSeconds": list(a.periodic_saves),
        # For readers of the stored form (the Kubernetes status): as of the newest event, so that
        # the stored value changes only with the timeline, not with the clock.
        "badputSeconds": settled_badput(a),
    }


def settled_badput(a: Accounting) -> dict[str, float]:
    """The badput by cause as of the newest event: the periods still open count up to it only."""
    restoring = a.restoring_seconds
    if a.up_since is not None and a.stepped_at is not None and a.up_since != a.first_up:
        restoring += max(0.0, (a.stepped_at - a.up_since).total_seconds()) * a.size
    return badput.by_cause(queued=a.queued_seconds, waiting=a.waiting_seconds, restoring=restoring,
                           restarting=a.restarting_seconds, lost=a.lost_seconds(), below=a.below_full_seconds)


def fields(d: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `Accounting` stored in `d`."""
    ck, p = d.get("lastCheckpoint"), d.get("lastUp")
    return {
        "submitted_at": time_in(d.get("submittedAt")), "ended_at": time_in(d.get("endedAt")),
        "queued_seconds": float(d.get("queuedSeconds", 0.0)), "queued_since": time_in(d.get("queuedSince")),
        "gang_up_seconds": float(d.get("gangUpSeconds", 0.0)), "up_since": time_in(d.get("upSince")),
        "up_attempt": int(d.get("upAttempt", 0)),
        "first_up": time_in(d.get("firstUp")), "stepped_at": time_in(d.get("steppedAt")),
        "restoring_seconds": float(d.get("restoringSeconds", 0.0)),
        "last_up": None if not p else UpPeriod.from_json(p),
        "down_since": time_in(d.get("downSince")), "down_waiting": bool(d.get("downWaiting", False)),
        "waiting_seconds": float(d.get("waitingSeconds", 0.0)),
        "restarting_seconds": float(d.get("restartingSeconds", 0.0)),
        "awaiting_workers": bool(d.get("awaitingWorkers", False)),
        "workers_running_at": time_in(d.get("workersRunningAt")),
        "work_lost": tuple(WorkLost.from_json(w) for w in d.get("workLost", [])),
        "stopping": bool(d.get("stopping", False)), "restart_due": bool(d.get("restartDue", False)),
        "last_checkpoint": None if not ck else CheckpointMark.from_json(ck),
        "final_saves": tuple(float(x) for x in d.get("finalSaveSeconds") or ()),
        "periodic_saves": tuple(float(x) for x in d.get("periodicSaveSeconds") or ()),
        "size": float(d.get("size", 1.0)),
        "below_full_seconds": float(d.get("belowFullSeconds", 0.0)),
        "startup_seconds": float(d.get("startupSeconds", 0.0)),
    }


