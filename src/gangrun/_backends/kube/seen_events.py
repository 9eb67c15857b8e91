"""What the controller saw itself, as timeline events: the workers' reports (a checkpoint committed,
the first step after a load, what resumeFrom gave), a worker that failed by itself, the gang running
again after a readmission, Kueue's admission.

Each is read again at every reconcile from the objects as they are, so each function records only
news: what would change the accounting (or, for resumeFrom, the stored result) given what is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gangrun._backends.clock import utc
from gangrun._backends.kube.stored import persisted
from gangrun._checkpoint_report import Commit
from gangrun._core import kueue, worker_reports
from gangrun._core.accounting import Accounting
from gangrun._core.actions import RecordEvent
from gangrun._core.conditions import find_condition
from gangrun._core.observation import Gang, Observation
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from gangrun._core.view_types import ResumeFromResult

RESUME_RESULT = "resumeFromResult"  # the status field of what resumeFrom gave


def checkpoint_events(ledger: Accounting, commits: Sequence[Commit], *, now: datetime) -> list[RecordEvent]:
    """A CheckpointCommitted event for each commit newer than the newest one already accounted.

    Stamped when it is read, so the timeline stays in order; when it committed is in the data (the
    local backend does the same). A sharded save reported by several ranks is one commit.
    """
    newest = ledger.last_checkpoint.at if ledger.last_checkpoint is not None else None
    unique: dict[tuple[int, object], Commit] = {}
    for c in sorted(commits, key=lambda c: (c.at, c.rank)):
        unique.setdefault((c.attempt, c.seq if c.seq is not None else c.at), c)
    out: list[RecordEvent] = []
    for c in sorted(unique.values(), key=lambda c: c.at):
        if newest is not None and c.at <= newest:
            continue
        out.append(RecordEvent(worker_reports.commit_event(
            attempt=c.attempt, rank=c.rank, step=c.step, seq=c.seq, uri=c.uri, committed_at=c.at, now=now,
            taken_at=c.taken_at, save_seconds=c.save_seconds, final=c.final)))
    return out


def resumed(task: dict[str, Any], reports: Sequence[dict[str, Any]], *, attempt: int,
             now: datetime) -> tuple[ResumeFromResult | None, list[RecordEvent]]:
    """`status.resumeFromResult`: what spec.checkpoint.resumeFrom gave the newest load a worker reported,
    and its event (ResumedFrom, or the warning ResumeFromFoundNothing) when that load is news."""
    stored = (persisted(task) or {}).get(RESUME_RESULT)
    newest = max((r for r in reports if r.get("attempt") in (None, attempt)), key=lambda r: r["time"], default=None)
    if newest is None:
        return stored, []
    event = worker_reports.resume_event(newest, attempt=attempt, at=min(utc(float(newest["time"])), now), now=now)
    result = worker_reports.resume_result(event)
    if result == stored:
        return stored, []
    return result, [RecordEvent(event)]


def first_step_events(ledger: Accounting, steps: Sequence[dict[str, Any]], *, attempt: int,
                      now: datetime) -> list[RecordEvent]:
    """A FirstStep event for each worker's first step (from its report) that changes the accounting: the
    newest of the current or just-ended period. Read again at every reconcile, so only news is recorded."""
    out: list[RecordEvent] = []
    for doc in sorted(steps, key=lambda d: d["time"]):
        event, after = worker_reports.first_step(ledger, doc, attempt=attempt, at=doc["time"], now=now)
        if after != ledger:
            out.append(RecordEvent(event))
            ledger = after
    return out


def worker_failed(ledger: Accounting, gang: Gang | None, decided: TaskState, *, attempt: int,
                   now: datetime) -> list[RecordEvent]:
    """A WorkerExited event when a worker of the running gang failed by itself (its pod ended, not
    deleted), at its container's finishedAt: the gang stopped then, and the teardown and restart that
    JobSet makes next are restarting, not work lost. None during an eviction or a node disruption,
    whose stops are their own; read again at every reconcile, so only news is recorded."""
    at = gang.first_failure_at if gang is not None else None
    if at is None or gang is None or gang.suspended or gang.disruption is not None or decided.eviction is not None \
            or decided.waiting or ledger.up_since is None or not ledger.up_since < at <= now:
        return []
    event = Event(time=now, type=EventType.WORKER_EXITED, attempt=attempt, message=gang.first_failure,
                  data={"at": at.isoformat()})
    return [RecordEvent(event)] if ledger.apply(event) != ledger else []


def workers_running(ledger: Accounting, before: TaskState, running: datetime | None, *,
                     now: datetime) -> list[RecordEvent]:
    """After a readmission: the gang is up again from when its last worker's container started."""
    if running is None or ledger.up_since is not None or running == ledger.workers_running_at:
        return []
    if ledger.last_up is not None and running <= ledger.last_up.end:
        return []  # the workers that were stopped, still running while Kueue suspends the JobSet
    if not ledger.awaiting_workers and before.eviction is None:
        return []  # not back from an eviction: GangStarted and GangRestarted say when it is up
    return [RecordEvent(Event(time=now, type=EventType.WORKERS_RUNNING, attempt=before.attempt,
                              data={"at": min(running, now).isoformat()},
                              message=f"every worker of attempt {before.attempt} running again"))]


def admitted(ledger: Accounting, before: TaskState, obs: Observation, *, now: datetime,
              size: tuple[int, int] | None = None) -> list[RecordEvent]:
    """An Admitted event the first time the attempt's gang is seen unsuspended: its queued time ends.
    `size`: an elastic gang's (nodes, of), which the accounting counts node-seconds by."""
    gang = obs.gang
    if ledger.queued_since is None or gang is None or gang.suspended or before.phase.terminal:
        return []
    reserved = find_condition(obs.workload.conditions, kueue.QUOTA_RESERVED) if obs.workload is not None else None
    how = f" ({reserved.message})" if reserved is not None and reserved.is_true and reserved.message else ""
    data = {"nodes": size[0], "of": size[1]} if size is not None and size[0] else {}
    if data and size is not None and size[0] < size[1]:
        how += f" on {size[0]} of {size[1]} nodes (what fits now)"
    return [RecordEvent(Event(time=now, type=EventType.ADMITTED, attempt=before.attempt, data=data,
                              message=f"gang of attempt {before.attempt} admitted by Kueue{how}"))]
