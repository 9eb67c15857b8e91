"""One event timeline per task (B5), derived from what the engine decided.

`transition_events(before, after, action, now)` is pure: both backends call it after each decision and
append the result to the task's timeline, so the timeline reads the same on either backend. Backends
add what only they can see (a worker ready, a checkpoint committed, who preempted whom) with `Event`s
of the types below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from gangrun._core.checkpoint_root import describe
from gangrun._core.engine import Action, ActionKind
from gangrun._core.eviction import EvictionKind
from gangrun._core.state import TaskState


class EventType(StrEnum):
    SUBMITTED = "Submitted"
    GANG_CREATED = "GangCreated"
    ADMITTED = "Admitted"
    PHASE = "Phase"
    GANG_STARTED = "GangStarted"
    WORKER_READY = "WorkerReady"
    PREEMPTED = "Preempted"
    EVICTED = "Evicted"
    WAITING = "WaitingForReadmission"
    READMITTED = "Readmitted"
    CHECKPOINT = "CheckpointCommitted"
    RESTARTED = "GangRestarted"
    RESTARTING = "GangRestarting"  # a worker failed and the gang restarts: in place, or by recreating its pods (data)
    RESIZED = "Resized"  # an elastic gang runs at another size from now on (data: from, to, of)
    DISRUPTED = "WorkerDisrupted"  # a worker lost to a node disruption: the gang restarts, charged to no budget
    ATTEMPT_ENDED = "AttemptEnded"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTED = "Aborted"
    WORKER_EXITED = "WorkerExited"  # a worker's own exit outside a stop: the cause of a restart or failure
    CONTROL_PLANE = "ControlPlane"  # the backend itself: restarted, stopped, lost a gang's workers
    WORKERS_RUNNING = "WorkersRunning"  # every worker of a round is running again (data "at": when, from the objects)
    FIRST_STEP = "FirstStep"  # a worker's first training step after its load (data "at": the worker's own time)
    GRACE_TOO_SHORT = "GracePeriodTooShort"  # the grace period is shorter than the final saves need
    RESUMED_FROM = "ResumedFrom"  # the load took spec.checkpoint.resumeFrom's checkpoint (data: source, uri, step)
    RESUME_FOUND_NOTHING = "ResumeFromFoundNothing"  # a warning: resumeFrom held nothing; it starts from scratch


@dataclass(frozen=True, kw_only=True)
class Event:
    time: datetime
    type: EventType
    message: str
    attempt: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def for_json(self) -> dict[str, Any]:
        return {"time": self.time.isoformat(), "type": self.type.value, "attempt": self.attempt,
                "message": self.message, **({"data": self.data} if self.data else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Event:
        return cls(time=datetime.fromisoformat(d["time"]), type=EventType(d["type"]), message=d["message"],
                   attempt=d.get("attempt"), data=d.get("data") or {})


def transition_events(before: TaskState, after: TaskState, action: Action, *, now: datetime,
                      resume_from: str = "") -> list[Event]:
    """The timeline entries that the step from `before` to `after` (with `action`) adds. `resume_from`:
    the task's spec.checkpoint.resumeFrom, which the creation of attempt 1's gang names."""
    out: list[Event] = []
    n = before.attempt

    def add(type_: EventType, message: str, attempt: int | None = n, **data: Any) -> None:
        out.append(Event(time=now, type=type_, message=message, attempt=attempt, data=data))

    for ev in after.evictions[len(before.evictions):]:  # the history only grows: new entries are new evictions
        type_ = EventType.PREEMPTED if ev.kind is EvictionKind.PREEMPTED else EventType.EVICTED
        add(type_, ev.as_eviction().summary(), reason=ev.reason, detail=ev.detail)
    for d in after.disruptions[len(before.disruptions):]:
        add(EventType.DISRUPTED, f"{d.describe()}; restarting the gang (not counted)", attempt=d.attempt,
            reason=d.reason, restartAttempt=d.restart_attempt)
    # The eviction that this step saw end by readmission, if any.
    readmission_of = before.eviction if after.eviction is None and action.kind is ActionKind.NONE else None
    readmitted = readmission_of is not None
    if readmission_of is not None:
        waited = now - readmission_of.at
        add(EventType.READMITTED, f"readmitted after {waited.total_seconds():.1f}s",
            waitedSeconds=waited.total_seconds())
    if after.info != before.info and after.attempt == n and action.kind is ActionKind.NONE:
        if after.waiting:
            if not before.waiting:
                add(EventType.WAITING, after.info.reason)
        elif after.started and not before.started:
            add(EventType.GANG_STARTED, f"all workers up: {after.info.reason}")
        elif after.restart_attempt > before.restart_attempt:
            add(EventType.RESTARTED, f"whole-gang restart {after.restart_attempt}: {after.info.reason}")
        elif not readmitted and (after.phase is not before.phase or after.info.reason != before.info.reason):
            add(EventType.PHASE, f"{after.phase.value}: {after.info.reason}", phase=after.phase.value)
    if action.kind is ActionKind.CREATE_GANG and not before.gang_seen:
        if resume_from and action.attempt == 1:
            add(EventType.GANG_CREATED, f"gang of attempt 1 created; it resumes from {describe(resume_from)} "
                                        "(spec.checkpoint.resumeFrom)", attempt=1, resumeFrom=resume_from)
        else:
            add(EventType.GANG_CREATED, f"gang of attempt {action.attempt} created", attempt=action.attempt)
    if action.kind is ActionKind.RETRY:
        add(EventType.ATTEMPT_ENDED, f"{action.retry.value if action.retry else ''} retry: {action.message}",
            outcome=_outcome(after, n), code=action.code)
    elif action.kind is ActionKind.FAIL:
        add(EventType.FAILED, f"{after.code or action.code}: {after.message or action.message}", code=after.code)
    elif action.kind is ActionKind.SUCCEED:
        add(EventType.SUCCEEDED, after.info.reason)
    elif action.kind is ActionKind.ABORT:
        add(EventType.ABORTED, action.message)
    return out


def _outcome(state: TaskState, attempt: int) -> str | None:
    for record in state.attempts:
        if record.number == attempt and record.outcome is not None:
            return record.outcome.value
    return None
