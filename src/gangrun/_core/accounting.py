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
                                     is a stop and a start, unless a stop awaits it (a grow or a
                                     crash whose restart is seen only after a readmission)
    Readmitted                       the wait for re-admission ends; the gang is up again only once
    WorkersRunning (at)              its workers are running again (at: from the objects)
    FirstStep (at)                   a worker's first step after its load: the time from gang up to
                                     here is `restoring`, not productive (the newest report of the
                                     period counts: the whole gang steps once its last rank does),
                                     except at the task's first start, which a run that is never
                                     interrupted makes too: only the starts after a stop restore
    Preempted | Evicted |            the gang stops: work since the state of the newest checkpoint of
      WorkerDisrupted |              this attempt was taken (or since the first step, if later) is lost
      WorkerExited (at) |            (WorkerExited: at the worker's end, when its pod says so)
      AttemptEnded | Failed | Aborted
    WaitingForReadmission            the time from the stop (or from a preemption of a gang already
                                     stopped) to Readmitted waits for re-admission; any other time
                                     between a stop and the next start is `restarting`
    CheckpointCommitted (takenAt)    the newest checkpoint; one taken during a stop (the final save
                                     in the grace period, whatever the worker knew of the stop)
                                     shrinks that stop's loss
    Admitted (nodes, of) |           an elastic gang's size: time up counts in node-seconds, as the
      Resized (to, of)               fraction of its full size it runs at (a rigid gang: 1); a
                                     resize while up is a stop (its work since the newest save is
                                     lost; the final save in the grace period shrinks that)
    ControlPlane (downFrom, downTo)  the backend was down: a gang that was up is known only until
                                     `downFrom`; its work since the newest checkpoint is lost
    Succeeded | Failed | Aborted     the clock of goodput stops

A report that arrives after its gang stopped (on Kubernetes the workers' termination messages are
read then) corrects the period that just ended.

goodput = (gang up − restoring − work lost) / (end or now − submission); the badput by cause
(`gangrun._core.badput`) is queued, waiting for re-admission, restarting, restoring, work lost and,
for an elastic gang, the unused share of the time it ran below its full size, so that goodput × life
plus the badput is the task's life. The step time is the productive time less the task's first start
before its first step, which goodput counts as productive (a run that is never interrupted makes it
too) and tools that count every start as badput do not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gangrun._core import accounting_storage, badput
from gangrun._core.accounting_records import CheckpointMark, UpPeriod, WorkLost, loss_since
from gangrun._core.timeline import Event, EventType
from gangrun._core.times import time_in
from gangrun._core.view_types import AccountingFigures

__all__ = ["SAVES_KEPT", "Accounting", "CheckpointMark", "UpPeriod", "WorkLost"]

_UP = frozenset({EventType.GANG_STARTED, EventType.RESTARTED})
_STOPS = frozenset({EventType.PREEMPTED, EventType.EVICTED, EventType.DISRUPTED, EventType.WORKER_EXITED,
                    EventType.ATTEMPT_ENDED, EventType.FAILED, EventType.ABORTED})
_ENDS = frozenset({EventType.SUCCEEDED, EventType.FAILED, EventType.ABORTED})
SAVES_KEPT = 20  # the newest save durations kept per kind, for the grace check


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
    below_full_seconds: float = 0.0  # of the periods that ended: up time × the share of the gang not running
    startup_seconds: float = 0.0  # the task's first start before its first step: productive, but no step
    restart_due: bool = False  # the newest stop is one the gang answers by a whole-gang restart (a resize, a crash)

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
                acct = replace(acct._stop("Resize", t), restart_due=True)
            acct = replace(acct, size=_fraction(e.data.get("to", e.data.get("nodes")), e.data["of"]))
        elif kind is EventType.CONTROL_PLANE and "downFrom" in e.data:
            acct = acct._stop("ControlPlaneDown", datetime.fromisoformat(e.data["downFrom"]))
        elif kind in (EventType.PREEMPTED, EventType.EVICTED) and acct.up_since is None \
                and acct.down_since is not None and not acct.down_waiting:
            # Taken back while it was being stopped or started (1 s into a grow): restarting until
            # now; a wait for re-admission counts from the preemption, as the state's does.
            acct = replace(acct._end_down(t), down_since=t)
        if kind in (EventType.ADMITTED, EventType.GANG_STARTED) and acct.queued_since is not None:
            acct = replace(acct, queued_seconds=acct.queued_seconds + _seconds(acct.queued_since, t),
                           queued_since=None)
        if kind is EventType.ADMITTED and acct.up_since is None and acct.down_since is None:
            acct = replace(acct, down_since=t)  # admitted: its workers are being started
        if kind is EventType.RESTARTED and acct.up_since is not None and not acct.restart_due:
            acct = acct._stop("WorkerFailed", t)  # no WorkerExited came first (the Kubernetes backend)
        # A restart seen while up that a stop awaits (a grow preempted before its restart was seen, and
        # readmitted) is that stop's restart: no new stop, and no worker failed.
        if kind in (EventType.RESTARTED, EventType.GANG_STARTED, EventType.GANG_CREATED):
            acct = replace(acct, restart_due=False) if acct.restart_due else acct
        if kind in _STOPS:
            if kind in (EventType.WORKER_EXITED, EventType.DISRUPTED) and acct.up_since is not None:
                acct = replace(acct, restart_due=True)
            # A worker's exit read from its pod happened at its finishedAt: the gang stopped then.
            acct = acct._stop(_cause(e), min(_at(e), t) if kind is EventType.WORKER_EXITED else t)
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
        acct = replace(self, gang_up_seconds=up, up_since=None, stepped_at=None,
                       restoring_seconds=self.restoring_seconds + self._restoring(period),
                       startup_seconds=self.startup_seconds + self._startup(period),
                       below_full_seconds=self.below_full_seconds + _seconds(self.up_since, at) * (1 - self.size),
                       last_up=period, down_since=at, down_waiting=False)
        if not lose:
            return acct
        lost = WorkLost(attempt=self.up_attempt, cause=cause, at=at, since=loss_since(period, self.last_checkpoint),
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
        acct = replace(self, last_up=fixed,
                       restoring_seconds=self.restoring_seconds + self._restoring(fixed) - self._restoring(p),
                       startup_seconds=self.startup_seconds + self._startup(fixed) - self._startup(p))
        return acct._relose(fixed)

    def _checkpoint(self, e: Event) -> Accounting:
        committed, taken = time_in(e.data.get("committedAt")), time_in(e.data.get("takenAt"))
        mark = CheckpointMark(attempt=e.attempt or 0, step=e.data.get("step"), uri=e.data.get("uri") or "",
                              at=committed or e.time, taken_at=taken)
        acct = replace(self, last_checkpoint=mark)
        seconds = e.data.get("saveSeconds")
        last = acct.work_lost[-1] if acct.work_lost else None
        # A save whose state was taken after the stop was made in the grace period, even when the stop
        # notice had not reached the worker yet (it says final=False, and its own SIGTERM came later).
        after_stop = acct.stopping and last is not None and last.attempt == mark.attempt and mark.taken >= last.at
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
            if e.data.get("final") or after_stop:
                acct = replace(acct, final_saves=(*acct.final_saves, float(seconds))[-SAVES_KEPT:])
            else:
                acct = replace(acct, periodic_saves=(*acct.periodic_saves, float(seconds))[-SAVES_KEPT:])
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

    def _startup(self, p: UpPeriod) -> float:
        """The task's first start before its first step (interpreter, imports, data): productive by
        gangrun's goodput, but no step time. None when no step was reported."""
        if p.stepped is None or p.start != self.first_up:
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

    def below_full_size(self, *, now: datetime) -> float:
        """Up time × the share of its full size an elastic gang did not run on (its unused nodes)."""
        return self.below_full_seconds + (_seconds(self.up_since, now) * (1 - self.size) if self.up_since else 0.0)

    def steps(self, *, now: datetime) -> float:
        """Productive time less the task's first start before its first step: the time spent stepping
        (what tools that count every start as badput call goodput)."""
        first = self.startup_seconds
        if self.up_since is not None and self.stepped_at is not None and self.up_since == self.first_up:
            first += _seconds(self.up_since, min(self.stepped_at, now)) * self.size
        return max(0.0, self.productive(now=now) - first)

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
        return loss_since(UpPeriod(attempt=self.up_attempt, start=self.up_since, end=datetime.max.replace(
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
        """Seconds of the task's life that were not productive, by cause (`gangrun._core.badput`)."""
        return badput.by_cause(queued=self.queued(now=now), waiting=self.waiting(now=now),
                               restoring=self.restoring(now=now), restarting=self.restarting(now=now),
                               lost=self.lost_seconds(), below=self.below_full_size(now=now))

    def view(self, *, now: datetime) -> AccountingFigures:
        """The accounting fields of `get -o json` (without the eviction counts, which the state keeps)."""
        return {
            "queuedSeconds": round(self.queued(now=now), 3),
            "gangUpSeconds": round(self.gang_up(now=now), 3),
            "restoringSeconds": round(self.restoring(now=now), 3),
            "workLost": [{"attempt": w.attempt, "cause": w.cause, "seconds": round(w.seconds, 3),
                          "at": w.at.isoformat()} for w in self.work_lost],
            "workLostSeconds": round(self.lost_seconds(), 3),
            "goodput": round(self.goodput(now=now), 4),
            "stepSeconds": round(self.steps(now=now), 3),
            "badputSeconds": self.badput(now=now),
            "lastCheckpoint": None if self.last_checkpoint is None else self.last_checkpoint.for_json(),
            "finalSaveSeconds": list(self.final_saves),
            "periodicSaveSeconds": list(self.periodic_saves),
        }

    # -- storage (the stored form is drawn in `gangrun._core.accounting_storage`) ----------------------

    def for_storage(self) -> dict[str, Any]:
        return accounting_storage.dump(self)

    @classmethod
    def from_storage(cls, d: dict[str, Any] | None) -> Accounting:
        return cls(**accounting_storage.fields(d)) if d else cls()


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


def _cause(e: Event) -> str:
    """What a stop is called in `workLost`: the Kueue reason of an eviction, else the event's code or type."""
    if e.type is EventType.WORKER_EXITED:
        return str(e.data.get("cause") or "WorkerFailed")
    return str(e.data.get("reason") or e.data.get("code") or e.type.value)


def _seconds(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds())
