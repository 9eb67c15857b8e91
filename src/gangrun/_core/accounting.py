"""Per-task accounting (B5), folded from the task's own timeline.

Both backends record every timeline event through one place, which also calls `Accounting.apply`;
nothing else changes an `Accounting`. So the figures can never disagree with the timeline they are
drawn from, and the Kubernetes status and the local store hold the same value (`for_storage`).

Where an event carries `data["at"]`, that is when it happened according to the objects (a
container's `startedAt`, a worker's own clock), and it is used instead of when the backend noticed.

What the events mean here, in order of a task's life:

    Submitted                        the clock of goodput starts
    GangCreated                      an attempt's gang waits for quota: queued from here
    Admitted | GangStarted           queued until here (whichever comes first); from admission to
                                     gang up the gang is being started (`restarting`)
    GangStarted | GangRestarted      the whole gang runs from here ("gang up"); a restart while up
                                     is a stop and a start
    Readmitted                       the wait for re-admission ends; the gang is up again only once
    WorkersRunning (at)              its workers are running again (at: from the objects)
    FirstStep (at)                   a worker's first step after its load: the time from gang up to
                                     here is `restoring`, not productive (the newest report of the
                                     period counts: the whole gang steps once its last rank does),
                                     except at the task's first start, which a run that is never
                                     interrupted makes too: only the starts after a stop restore
    Preempted | Evicted |            the gang stops: work since the state of the newest checkpoint of
      WorkerDisrupted |              this attempt was taken (or since the first step, if later) is lost
      WorkerExited | AttemptEnded |
      Failed | Aborted
    WaitingForReadmission            the time from the stop to Readmitted waits for re-admission;
                                     any other time between a stop and the next start is `restarting`
    CheckpointCommitted (takenAt)    the newest checkpoint; one taken during a stop (the final save
                                     in the grace period) shrinks that stop's loss
    Admitted (nodes, of) |           an elastic gang's size: time up counts in node-seconds, as the
      Resized (to, of)               fraction of its full size it runs at (a rigid gang: 1); a
                                     resize while up is a stop (its work since the newest save is
                                     lost; the final save in the grace period shrinks that)
    ControlPlane (downFrom, downTo)  the backend was down: a gang that was up is known only until
                                     `downFrom`; its work since the newest checkpoint is lost
    Succeeded | Failed | Aborted     the clock of goodput stops

A report that arrives after its gang stopped (on Kubernetes the workers' termination messages are
read then) corrects the period that just ended.

goodput = (gang up − restoring − work lost) / (end or now − submission); the badput by cause is
queued, waiting for re-admission, restarting, restoring and work lost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gangrun._core.timeline import Event, EventType
from gangrun._core.times import time_in, time_out

_UP = frozenset({EventType.GANG_STARTED, EventType.RESTARTED})
_STOPS = frozenset({EventType.PREEMPTED, EventType.EVICTED, EventType.DISRUPTED, EventType.WORKER_EXITED,
                    EventType.ATTEMPT_ENDED, EventType.FAILED, EventType.ABORTED})
_ENDS = frozenset({EventType.SUCCEEDED, EventType.FAILED, EventType.ABORTED})
SAVES_KEPT = 20  # the newest save durations kept per kind, for the grace check


@dataclass(frozen=True, kw_only=True)
class CheckpointMark:
    attempt: int
    step: int | None
    at: datetime  # when it was committed
    uri: str = ""
    taken_at: datetime | None = None  # when its state was taken (save() was called); None from older workers

    @property
    def taken(self) -> datetime:
        return self.taken_at or self.at


@dataclass(frozen=True, kw_only=True)
class WorkLost:
    """One stop that threw work away: `seconds` of gang-up time since `since` (checkpoint or first step),
    at `size` of the gang's full size (an elastic gang running small loses less)."""

    attempt: int
    cause: str
    at: datetime
    since: datetime
    size: float = 1.0

    @property
    def seconds(self) -> float:
        return max(0.0, (self.at - self.since).total_seconds()) * self.size


@dataclass(frozen=True, kw_only=True)
class UpPeriod:
    """The newest period the gang was up, once it ended: a late report may still correct it."""

    attempt: int
    start: datetime
    end: datetime
    stepped: datetime | None = None
    size: float = 1.0


@dataclass(frozen=True, kw_only=True)
class Accounting:
    submitted_at: datetime | None = None
    ended_at: datetime | None = None
    queued_seconds: float = 0.0
    queued_since: datetime | None = None
    gang_up_seconds: float = 0.0
    up_since: datetime | None = None
    up_attempt: int = 0
    first_up: datetime | None = None  # when the task's gang was first up: its start-up is not restoring
    stepped_at: datetime | None = None  # the first step after the load of the period up since `up_since`
    restoring_seconds: float = 0.0  # of the periods that ended
    last_up: UpPeriod | None = None
    down_since: datetime | None = None  # the gang stopped and has not started or queued since
    down_waiting: bool = False  # ... and waits for re-admission
    waiting_seconds: float = 0.0
    restarting_seconds: float = 0.0
    awaiting_workers: bool = False  # readmitted: up again once the workers run
    workers_running_at: datetime | None = None  # the newest round of workers seen running
    work_lost: tuple[WorkLost, ...] = ()
    stopping: bool = False  # the newest work_lost entry is a stop still in progress (until the next gang up)
    last_checkpoint: CheckpointMark | None = None
    final_saves: tuple[float, ...] = ()  # seconds each save made during a stop took (the newest SAVES_KEPT)
    periodic_saves: tuple[float, ...] = ()  # seconds each other save took
    size: float = 1.0  # the fraction of its full size the gang runs at (elastic gangs; node-seconds)

    def apply(self, e: Event) -> Accounting:
        """The accounting after event `e`. Returns `self` for events that change nothing."""
        t, kind = e.time, e.type
        acct = self
        if kind is EventType.SUBMITTED and acct.submitted_at is None:
            acct = replace(acct, submitted_at=t)
        elif kind is EventType.GANG_CREATED:
            acct = replace(acct._end_down(t), queued_since=t, awaiting_workers=False)
        elif kind is EventType.CHECKPOINT:
            acct = acct._checkpoint(e)
        elif kind is EventType.FIRST_STEP:
            acct = acct._first_step(_at(e))
        elif kind is EventType.WAITING and acct.down_since is not None and not acct.down_waiting:
            acct = replace(acct, down_waiting=True)
        elif kind is EventType.READMITTED:
            acct = acct._readmitted(_at(e), attempt=e.attempt or acct.up_attempt)
        elif kind is EventType.WORKERS_RUNNING:
            acct = acct._workers_running(_at(e), attempt=e.attempt or acct.up_attempt)
        elif kind in (EventType.ADMITTED, EventType.RESIZED) and e.data.get("of"):
            if kind is EventType.RESIZED and acct.up_since is not None:
                acct = acct._stop("Resize", t)
            acct = replace(acct, size=_fraction(e.data.get("to", e.data.get("nodes")), e.data["of"]))
        elif kind is EventType.CONTROL_PLANE and "downFrom" in e.data:
            acct = acct._stop("ControlPlaneDown", datetime.fromisoformat(e.data["downFrom"]))
        if kind in (EventType.ADMITTED, EventType.GANG_STARTED) and acct.queued_since is not None:
            acct = replace(acct, queued_seconds=acct.queued_seconds + _seconds(acct.queued_since, t),
                           queued_since=None)
        if kind is EventType.ADMITTED and acct.up_since is None and acct.down_since is None:
            acct = replace(acct, down_since=t)  # admitted: its workers are being started
        if kind is EventType.RESTARTED and acct.up_since is not None:
            acct = acct._stop("WorkerFailed", t)  # no WorkerExited came first (the Kubernetes backend)
        if kind in _STOPS:
            acct = acct._stop(_cause(e), t)
        elif kind in _UP and acct.up_since is None:
            acct = acct._start(t, attempt=e.attempt or 0)
        if kind in _ENDS:
            acct = acct._stop(_cause(e), t, lose=kind is not EventType.SUCCEEDED)
            acct = replace(acct._end_down(t), ended_at=t, queued_since=None, awaiting_workers=False)
        return acct

    # -- transitions ------------------------------------------------------------------------------

    def _start(self, at: datetime, *, attempt: int) -> Accounting:
        """The gang is up from `at` (never before the stop that preceded it)."""
        if self.down_since is not None and at < self.down_since:
            at = self.down_since
        acct = self._end_down(at)
        return replace(acct, up_since=at, up_attempt=attempt, stepped_at=None, stopping=False, awaiting_workers=False,
                       first_up=acct.first_up or at)

    def _end_down(self, at: datetime) -> Accounting:
        """The time since the gang stopped ends at `at`: it waited for re-admission, or restarted."""
        if self.down_since is None:
            return self
        spent = _seconds(self.down_since, at)
        if self.down_waiting:
            return replace(self, waiting_seconds=self.waiting_seconds + spent, down_since=None, down_waiting=False)
        return replace(self, restarting_seconds=self.restarting_seconds + spent, down_since=None)

    def _readmitted(self, at: datetime, *, attempt: int) -> Accounting:
        acct = self
        if acct.down_since is not None and acct.down_waiting:
            acct = replace(acct._end_down(at), down_since=max(at, acct.down_since))  # now restarting
        if acct.up_since is not None:
            return acct
        running = acct.workers_running_at
        stopped = acct.last_up.end if acct.last_up is not None else None
        if running is not None and stopped is not None and running > stopped:
            return acct._back(running, attempt=attempt)  # the workers were seen running first
        return replace(acct, awaiting_workers=True)

    def _workers_running(self, at: datetime, *, attempt: int) -> Accounting:
        acct = self if self.workers_running_at == at else replace(self, workers_running_at=at)
        if acct.awaiting_workers and acct.up_since is None:
            return acct._back(at, attempt=attempt)
        return acct

    def _back(self, at: datetime, *, attempt: int) -> Accounting:
        """Up again after a readmission, from when the workers ran (`at`). If that was before the
        readmission was noticed, the wait ended then, not when it was noticed."""
        acct = self
        if acct.last_up is not None and at < acct.last_up.end:
            at = acct.last_up.end
        if acct.down_since is not None and at < acct.down_since and not acct.down_waiting:
            over = _seconds(at, acct.down_since)
            acct = replace(acct, waiting_seconds=max(0.0, acct.waiting_seconds - over), down_since=at)
        return acct._start(at, attempt=attempt)

    def _stop(self, cause: str, at: datetime, *, lose: bool = True) -> Accounting:
        """The gang stops being up at `at`; unless `lose` is False its work since the last save is lost."""
        if self.up_since is None:
            return self
        up = self.gang_up_seconds + _seconds(self.up_since, at) * self.size
        period = UpPeriod(attempt=self.up_attempt, start=self.up_since, end=max(at, self.up_since),
                          stepped=self.stepped_at, size=self.size)
        restoring = self.restoring_seconds + self._restoring(period)
        acct = replace(self, gang_up_seconds=up, up_since=None, stepped_at=None, restoring_seconds=restoring,
                       last_up=period, down_since=at, down_waiting=False)
        if not lose:
            return acct
        lost = WorkLost(attempt=self.up_attempt, cause=cause, at=at, since=_loss_since(period, self.last_checkpoint),
                        size=self.size)
        return replace(acct, work_lost=(*self.work_lost, lost), stopping=True)

    def _first_step(self, at: datetime) -> Accounting:
        if self.up_since is not None:
            if at < self.up_since or (self.stepped_at is not None and at <= self.stepped_at):
                return self  # a report of an earlier period, or not newer than the one counted
            return replace(self, stepped_at=at)
        p = self.last_up
        if p is None or not p.start <= at <= p.end or (p.stepped is not None and at <= p.stepped):
            return self
        # The period that just ended, corrected by a report read after its stop.
        fixed = replace(p, stepped=at)
        restoring = self.restoring_seconds + self._restoring(fixed) - self._restoring(p)
        acct = replace(self, last_up=fixed, restoring_seconds=restoring)
        return acct._relose(fixed)

    def _checkpoint(self, e: Event) -> Accounting:
        committed, taken = time_in(e.data.get("committedAt")), time_in(e.data.get("takenAt"))
        mark = CheckpointMark(attempt=e.attempt or 0, step=e.data.get("step"), uri=e.data.get("uri") or "",
                              at=committed or e.time, taken_at=taken)
        acct = replace(self, last_checkpoint=mark)
        seconds = e.data.get("saveSeconds")
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
            if e.data.get("final"):
                acct = replace(acct, final_saves=(*acct.final_saves, float(seconds))[-SAVES_KEPT:])
            else:
                acct = replace(acct, periodic_saves=(*acct.periodic_saves, float(seconds))[-SAVES_KEPT:])
        last = acct.work_lost[-1] if acct.work_lost else None
        if last is not None and last.attempt == mark.attempt and mark.taken > last.since \
                and (mark.taken <= last.at or acct.stopping):
            # Reported after the stop (a worker's termination message): the state it holds was taken
            # before the stop, or while the gang was being stopped (the final save in the grace
            # period). Either way less was lost; a save of a later period says nothing of this stop.
            acct = replace(acct, work_lost=(*acct.work_lost[:-1], replace(last, since=min(mark.taken, last.at))))
        return acct

    def _restoring(self, p: UpPeriod) -> float:
        """The restoring time of period `p`: none for the task's first start, which a run that is never
        interrupted makes too (its start-up is part of the work, not a cost of being stopped)."""
        if p.stepped is None or p.start == self.first_up:
            return 0.0
        return _seconds(p.start, min(p.stepped, p.end)) * p.size

    def _relose(self, period: UpPeriod) -> Accounting:
        """The loss of the stop that ended `period`, once a late report moved its first step."""
        last = self.work_lost[-1] if self.work_lost else None
        if not self.stopping or last is None or last.at != period.end or last.attempt != period.attempt:
            return self
        since = max(last.since, min(period.stepped or period.start, last.at))
        return replace(self, work_lost=(*self.work_lost[:-1], replace(last, since=since)))

    # -- views ------------------------------------------------------------------------------------

    def gang_up(self, *, now: datetime) -> float:
        return self.gang_up_seconds + (_seconds(self.up_since, now) * self.size if self.up_since else 0.0)

    def queued(self, *, now: datetime) -> float:
        return self.queued_seconds + (_seconds(self.queued_since, now) if self.queued_since else 0.0)

    def restoring(self, *, now: datetime) -> float:
        """Gang-up time before the workers' first step after their load (a period still restoring with no
        report yet counts as productive: a worker that never reports is not charged for it)."""
        if self.up_since is None or self.stepped_at is None or self.up_since == self.first_up:
            return self.restoring_seconds
        return self.restoring_seconds + _seconds(self.up_since, min(self.stepped_at, now)) * self.size

    def waiting(self, *, now: datetime) -> float:
        return self.waiting_seconds + (_seconds(self.down_since, now) if self.down_since and self.down_waiting
                                       and self.ended_at is None else 0.0)

    def restarting(self, *, now: datetime) -> float:
        return self.restarting_seconds + (_seconds(self.down_since, now) if self.down_since and not self.down_waiting
                                          and self.ended_at is None else 0.0)

    def unsaved_since(self) -> datetime | None:
        """Where the work a stop now would lose starts: when the state of the attempt's newest checkpoint
        was taken, or the first step (the gang up, before one is reported), if later. None when the
        gang is not up."""
        if self.up_since is None:
            return None
        return _loss_since(UpPeriod(attempt=self.up_attempt, start=self.up_since, end=datetime.max.replace(
            tzinfo=self.up_since.tzinfo), stepped=self.stepped_at), self.last_checkpoint)

    def lost_seconds(self) -> float:
        return sum(w.seconds for w in self.work_lost)

    def productive(self, *, now: datetime) -> float:
        return max(0.0, self.gang_up(now=now) - self.restoring(now=now) - self.lost_seconds())

    def goodput(self, *, now: datetime) -> float:
        if self.submitted_at is None:
            return 0.0
        elapsed = _seconds(self.submitted_at, self.ended_at or now)
        return self.productive(now=now) / elapsed if elapsed > 0 else 0.0

    def badput(self, *, now: datetime) -> dict[str, float]:
        """Seconds of the task's life that were not productive, by cause."""
        return {"queued": round(self.queued(now=now), 3), "waitingForReadmission": round(self.waiting(now=now), 3),
                "restoring": round(self.restoring(now=now), 3), "restarting": round(self.restarting(now=now), 3),
                "workLost": round(self.lost_seconds(), 3)}

    def view(self, *, now: datetime) -> dict[str, Any]:
        """The accounting fields of `get -o json` (without the eviction counts, which the state keeps)."""
        return {
            "queuedSeconds": round(self.queued(now=now), 3),
            "gangUpSeconds": round(self.gang_up(now=now), 3),
            "restoringSeconds": round(self.restoring(now=now), 3),
            "workLost": [{"attempt": w.attempt, "cause": w.cause, "seconds": round(w.seconds, 3),
                          "at": w.at.isoformat()} for w in self.work_lost],
            "workLostSeconds": round(self.lost_seconds(), 3),
            "goodput": round(self.goodput(now=now), 4),
            "badputSeconds": self.badput(now=now),
            "lastCheckpoint": None if self.last_checkpoint is None else _mark_out(self.last_checkpoint),
            "finalSaveSeconds": list(self.final_saves),
            "periodicSaveSeconds": list(self.periodic_saves),
        }

    # -- storage ----------------------------------------------------------------------------------

    def for_storage(self) -> dict[str, Any]:
        p = self.last_up
        return {
            "submittedAt": time_out(self.submitted_at), "endedAt": time_out(self.ended_at),
            "queuedSeconds": self.queued_seconds, "queuedSince": time_out(self.queued_since),
            "gangUpSeconds": self.gang_up_seconds, "upSince": time_out(self.up_since), "upAttempt": self.up_attempt,
            "firstUp": time_out(self.first_up), "steppedAt": time_out(self.stepped_at),
            "restoringSeconds": self.restoring_seconds,
            "lastUp": None if p is None else {"attempt": p.attempt, "start": p.start.isoformat(),
                                              "end": p.end.isoformat(), "stepped": time_out(p.stepped),
                                              "size": p.size},
            "downSince": time_out(self.down_since), "downWaiting": self.down_waiting,
            "waitingSeconds": self.waiting_seconds, "restartingSeconds": self.restarting_seconds,
            "awaitingWorkers": self.awaiting_workers, "workersRunningAt": time_out(self.workers_running_at),
            "workLost": [{"attempt": w.attempt, "cause": w.cause, "at": w.at.isoformat(),
                          "since": w.since.isoformat(), "size": w.size} for w in self.work_lost],
            "size": self.size,
            "stopping": self.stopping,
            "lastCheckpoint": None if self.last_checkpoint is None else _mark_out(self.last_checkpoint),
            "finalSaveSeconds": list(self.final_saves), "periodicSaveSeconds": list(self.periodic_saves),
            # For readers of the stored form (the Kubernetes status): as of the newest event, so that
            # the stored value changes only with the timeline, not with the clock.
            "badputSeconds": self._settled_badput(),
        }

    def _settled_badput(self) -> dict[str, float]:
        restoring = self.restoring_seconds
        if self.up_since is not None and self.stepped_at is not None and self.up_since != self.first_up:
            restoring += _seconds(self.up_since, self.stepped_at) * self.size
        return {"queued": round(self.queued_seconds, 3), "waitingForReadmission": round(self.waiting_seconds, 3),
                "restoring": round(restoring, 3), "restarting": round(self.restarting_seconds, 3),
                "workLost": round(self.lost_seconds(), 3)}

    @classmethod
    def from_storage(cls, d: dict[str, Any] | None) -> Accounting:
        if not d:
            return cls()
        ck, p = d.get("lastCheckpoint"), d.get("lastUp")
        return cls(
            submitted_at=time_in(d.get("submittedAt")), ended_at=time_in(d.get("endedAt")),
            queued_seconds=float(d.get("queuedSeconds", 0.0)), queued_since=time_in(d.get("queuedSince")),
            gang_up_seconds=float(d.get("gangUpSeconds", 0.0)), up_since=time_in(d.get("upSince")),
            up_attempt=int(d.get("upAttempt", 0)),
            first_up=time_in(d.get("firstUp")), stepped_at=time_in(d.get("steppedAt")),
            restoring_seconds=float(d.get("restoringSeconds", 0.0)),
            last_up=None if not p else UpPeriod(
                attempt=int(p["attempt"]), start=datetime.fromisoformat(p["start"]),
                end=datetime.fromisoformat(p["end"]), stepped=time_in(p.get("stepped")),
                size=float(p.get("size", 1.0))),
            down_since=time_in(d.get("downSince")), down_waiting=bool(d.get("downWaiting", False)),
            waiting_seconds=float(d.get("waitingSeconds", 0.0)),
            restarting_seconds=float(d.get("restartingSeconds", 0.0)),
            awaiting_workers=bool(d.get("awaitingWorkers", False)),
            workers_running_at=time_in(d.get("workersRunningAt")),
            work_lost=tuple(WorkLost(attempt=int(w["attempt"]), cause=str(w["cause"]),
                                     at=datetime.fromisoformat(w["at"]), since=datetime.fromisoformat(w["since"]),
                                     size=float(w.get("size", 1.0)))
                            for w in d.get("workLost", [])),
            stopping=bool(d.get("stopping", False)),
            last_checkpoint=None if not ck else CheckpointMark(
                attempt=int(ck["attempt"]), step=ck.get("step"), at=datetime.fromisoformat(ck["at"]),
                uri=ck.get("uri") or "", taken_at=time_in(ck.get("takenAt"))),
            final_saves=tuple(float(x) for x in d.get("finalSaveSeconds") or ()),
            periodic_saves=tuple(float(x) for x in d.get("periodicSaveSeconds") or ()),
            size=float(d.get("size", 1.0)),
        )


def _at(e: Event) -> datetime:
    """When `e` happened by the objects (`data["at"]`), else when it was recorded."""
    try:
        return time_in(e.data.get("at")) or e.time
    except (TypeError, ValueError):
        return e.time


def _fraction(nodes: Any, of: Any) -> float:
    """The share of its full size a gang runs at, from an event's data (1 when it does not say)."""
    try:
        share = int(nodes) / int(of)
    except (TypeError, ValueError, ZeroDivisionError):
        return 1.0
    return min(1.0, max(0.0, share))


def _loss_since(p: UpPeriod, ck: CheckpointMark | None) -> datetime:
    """Work of `p` is lost from its first step, or from when the newest checkpoint's state was taken."""
    since = p.stepped or p.start
    if ck is not None and ck.attempt == p.attempt and ck.taken > since:
        since = ck.taken
    return min(since, p.end)


def _cause(e: Event) -> str:
    """What a stop is called in `workLost`: the Kueue reason of an eviction, else the event's code or type."""
    if e.type is EventType.WORKER_EXITED:
        return str(e.data.get("cause") or "WorkerFailed")
    return str(e.data.get("reason") or e.data.get("code") or e.type.value)


def _mark_out(m: CheckpointMark) -> dict[str, Any]:
    return {"attempt": m.attempt, "step": m.step, "at": m.at.isoformat(), "uri": m.uri,
            **({"takenAt": m.taken_at.isoformat()} if m.taken_at is not None else {})}


def _seconds(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds())
