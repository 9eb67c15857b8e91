"""Per-task accounting (B5), folded from the task's own timeline.

Both backends record every timeline event through one place, which also calls `Accounting.apply`;
nothing else changes an `Accounting`. So the figures can never disagree with the timeline they are
drawn from, and the Kubernetes status and the local store hold the same value (`for_storage`).

What the events mean here, in order of a task's life:

    Submitted                        the clock of goodput starts
    GangCreated                      an attempt's gang waits for quota: queued from here
    Admitted | GangStarted           queued until here (whichever comes first)
    GangStarted | Readmitted |       the whole gang runs from here ("gang up"); a restart while up
      GangRestarted                  is a stop and a start
    Preempted | Evicted |            the gang stops: work since the newest checkpoint of this attempt
      WorkerDisrupted |              (or since the gang came up, if later) is lost
      WorkerExited | AttemptEnded |
      Failed | Aborted
    CheckpointCommitted              the newest checkpoint; one committed during a stop (the final save
                                     in the grace period) shrinks that stop's loss
    ControlPlane (downFrom, downTo)  the backend was down: a gang that was up is known only until
                                     `downFrom`; its work since the newest checkpoint is lost
    Succeeded | Failed | Aborted     the clock of goodput stops

goodput = (gang up − work lost) / (end or now − submission).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gangrun._core.timeline import Event, EventType
from gangrun._core.times import time_in, time_out

_UP = frozenset({EventType.GANG_STARTED, EventType.READMITTED, EventType.RESTARTED})
_STOPS = frozenset({EventType.PREEMPTED, EventType.EVICTED, EventType.DISRUPTED, EventType.WORKER_EXITED,
                    EventType.ATTEMPT_ENDED, EventType.FAILED, EventType.ABORTED})
_ENDS = frozenset({EventType.SUCCEEDED, EventType.FAILED, EventType.ABORTED})


@dataclass(frozen=True, kw_only=True)
class CheckpointMark:
    attempt: int
    step: int | None
    at: datetime  # when it was committed
    uri: str = ""


@dataclass(frozen=True, kw_only=True)
class WorkLost:
    """One stop that threw work away: `seconds` of gang-up time since `since` (checkpoint or gang up)."""

    attempt: int
    cause: str
    at: datetime
    since: datetime

    @property
    def seconds(self) -> float:
        return max(0.0, (self.at - self.since).total_seconds())


@dataclass(frozen=True, kw_only=True)
class Accounting:
    submitted_at: datetime | None = None
    ended_at: datetime | None = None
    queued_seconds: float = 0.0
    queued_since: datetime | None = None
    gang_up_seconds: float = 0.0
    up_since: datetime | None = None
    up_attempt: int = 0
    work_lost: tuple[WorkLost, ...] = ()
    stopping: bool = False  # the newest work_lost entry is a stop still in progress (until the next gang up)
    last_checkpoint: CheckpointMark | None = None

    def apply(self, e: Event) -> Accounting:
        """The accounting after event `e`. Returns `self` for events that change nothing."""
        t, kind = e.time, e.type
        acct = self
        if kind is EventType.SUBMITTED and acct.submitted_at is None:
            acct = replace(acct, submitted_at=t)
        elif kind is EventType.GANG_CREATED:
            acct = replace(acct, queued_since=t)
        elif kind is EventType.CHECKPOINT:
            acct = acct._checkpoint(e)
        elif kind is EventType.CONTROL_PLANE and "downFrom" in e.data:
            acct = acct._stop("ControlPlaneDown", datetime.fromisoformat(e.data["downFrom"]))
        if kind in (EventType.ADMITTED, EventType.GANG_STARTED) and acct.queued_since is not None:
            acct = replace(acct, queued_seconds=acct.queued_seconds + _seconds(acct.queued_since, t),
                           queued_since=None)
        if kind is EventType.RESTARTED and acct.up_since is not None:
            acct = acct._stop("WorkerFailed", t)  # no WorkerExited came first (the Kubernetes backend)
        if kind in _STOPS:
            acct = acct._stop(_cause(e), t)
        elif kind in _UP and acct.up_since is None:
            acct = replace(acct, up_since=t, up_attempt=e.attempt or 0, stopping=False)
        if kind in _ENDS:
            acct = replace(acct._stop(_cause(e), t, lose=kind is not EventType.SUCCEEDED), ended_at=t,
                           queued_since=None)
        return acct

    def _stop(self, cause: str, at: datetime, *, lose: bool = True) -> Accounting:
        """The gang stops being up at `at`; unless `lose` is False its work since the last save is lost."""
        if self.up_since is None:
            return self
        up = self.gang_up_seconds + _seconds(self.up_since, at)
        if not lose:
            return replace(self, gang_up_seconds=up, up_since=None)
        since = self.unsaved_since() or self.up_since
        if since > self.up_since:  # a checkpoint of this run: the loss starts there (never after the stop)
            since = min(since, at)
        lost = WorkLost(attempt=self.up_attempt, cause=cause, at=at, since=since)
        return replace(self, gang_up_seconds=up, up_since=None, work_lost=(*self.work_lost, lost), stopping=True)

    def _checkpoint(self, e: Event) -> Accounting:
        committed = e.data.get("committedAt")
        mark = CheckpointMark(attempt=e.attempt or 0, step=e.data.get("step"), uri=e.data.get("uri") or "",
                              at=datetime.fromisoformat(committed) if committed else e.time)
        acct = replace(self, last_checkpoint=mark)
        last = acct.work_lost[-1] if acct.work_lost else None
        if acct.stopping and last is not None and last.attempt == mark.attempt and mark.at > last.since:
            # Saved while the gang was being stopped (the final save in the grace period): less was lost.
            acct = replace(acct, work_lost=(*acct.work_lost[:-1], replace(last, since=min(mark.at, last.at))))
        return acct

    # -- views ------------------------------------------------------------------------------------

    def gang_up(self, *, now: datetime) -> float:
        return self.gang_up_seconds + (_seconds(self.up_since, now) if self.up_since else 0.0)

    def queued(self, *, now: datetime) -> float:
        return self.queued_seconds + (_seconds(self.queued_since, now) if self.queued_since else 0.0)

    def unsaved_since(self) -> datetime | None:
        """Where the work a stop now would lose starts: the newest checkpoint of the attempt that is up,
        or the gang up if later. None when the gang is not up."""
        if self.up_since is None:
            return None
        ck = self.last_checkpoint
        if ck is not None and ck.attempt == self.up_attempt and ck.at > self.up_since:
            return ck.at
        return self.up_since

    def lost_seconds(self) -> float:
        return sum(w.seconds for w in self.work_lost)

    def goodput(self, *, now: datetime) -> float:
        if self.submitted_at is None:
            return 0.0
        elapsed = _seconds(self.submitted_at, self.ended_at or now)
        return max(0.0, self.gang_up(now=now) - self.lost_seconds()) / elapsed if elapsed > 0 else 0.0

    def view(self, *, now: datetime) -> dict[str, Any]:
        """The accounting fields of `get -o json` (without the eviction counts, which the state keeps)."""
        return {
            "queuedSeconds": round(self.queued(now=now), 3),
            "gangUpSeconds": round(self.gang_up(now=now), 3),
            "workLost": [{"attempt": w.attempt, "cause": w.cause, "seconds": round(w.seconds, 3),
                          "at": w.at.isoformat()} for w in self.work_lost],
            "workLostSeconds": round(self.lost_seconds(), 3),
            "goodput": round(self.goodput(now=now), 4),
            "lastCheckpoint": None if self.last_checkpoint is None else _mark_out(self.last_checkpoint),
        }

    # -- storage ----------------------------------------------------------------------------------

    def for_storage(self) -> dict[str, Any]:
        return {
            "submittedAt": time_out(self.submitted_at), "endedAt": time_out(self.ended_at),
            "queuedSeconds": self.queued_seconds, "queuedSince": time_out(self.queued_since),
            "gangUpSeconds": self.gang_up_seconds, "upSince": time_out(self.up_since), "upAttempt": self.up_attempt,
            "workLost": [{"attempt": w.attempt, "cause": w.cause, "at": w.at.isoformat(),
                          "since": w.since.isoformat()} for w in self.work_lost],
            "stopping": self.stopping,
            "lastCheckpoint": None if self.last_checkpoint is None else _mark_out(self.last_checkpoint),
        }

    @classmethod
    def from_storage(cls, d: dict[str, Any] | None) -> Accounting:
        if not d:
            return cls()
        ck = d.get("lastCheckpoint")
        return cls(
            submitted_at=time_in(d.get("submittedAt")), ended_at=time_in(d.get("endedAt")),
            queued_seconds=float(d.get("queuedSeconds", 0.0)), queued_since=time_in(d.get("queuedSince")),
            gang_up_seconds=float(d.get("gangUpSeconds", 0.0)), up_since=time_in(d.get("upSince")),
            up_attempt=int(d.get("upAttempt", 0)),
            work_lost=tuple(WorkLost(attempt=int(w["attempt"]), cause=str(w["cause"]),
                                     at=datetime.fromisoformat(w["at"]), since=datetime.fromisoformat(w["since"]))
                            for w in d.get("workLost", [])),
            stopping=bool(d.get("stopping", False)),
            last_checkpoint=None if not ck else CheckpointMark(
                attempt=int(ck["attempt"]), step=ck.get("step"), at=datetime.fromisoformat(ck["at"]),
                uri=ck.get("uri") or ""),
        )


def _cause(e: Event) -> str:
    """What a stop is called in `workLost`: the Kueue reason of an eviction, else the event's code or type."""
    if e.type is EventType.WORKER_EXITED:
        return str(e.data.get("cause") or "WorkerFailed")
    return str(e.data.get("reason") or e.data.get("code") or e.type.value)


def _mark_out(m: CheckpointMark) -> dict[str, Any]:
    return {"attempt": m.attempt, "step": m.step, "at": m.at.isoformat(), "uri": m.uri}


def _seconds(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds())
