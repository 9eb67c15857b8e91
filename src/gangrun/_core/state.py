"""The persisted state of one task, as a frozen value with named transitions.

It lives in one place per backend (the ClusteredTask status on Kubernetes, SQLite locally) and is
everything the engine needs besides the spec and the current observation. `for_storage()` and
`from_storage()` turn it into plain JSON-able dicts and back; they are the only (de)serialisers.
See docs/attempt-states.md for the diagram.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from gangrun._core.eviction import Eviction, EvictionKind
from gangrun._core.observation import Disruption
from gangrun._core.phases import Phase, PhaseInfo
from gangrun._core.times import time_in, time_out
from gangrun._core.view_types import AttemptView, EvictionView


class Outcome(StrEnum):
    SUCCEEDED = "Succeeded"
    USER_RETRY = "UserRetry"
    SYSTEM_RETRY = "SystemRetry"
    FAILED = "Failed"
    ABORTED = "Aborted"


@dataclass(frozen=True, kw_only=True)
class EvictionRecord:
    """One time Kueue took the gang back, recorded when first seen (Kueue overwrites it at readmission)."""

    attempt: int
    kind: EvictionKind
    reason: str
    detail: str
    message: str
    at: datetime
    readmitted_at: datetime | None = None

    @classmethod
    def of(cls, ev: Eviction, *, attempt: int, at: datetime) -> EvictionRecord:
        return cls(attempt=attempt, kind=ev.kind, reason=ev.reason, detail=ev.detail, message=ev.message, at=at)

    def for_json(self) -> EvictionView:
        """The eviction as stored and as `get -o json` lists it."""
        return {"attempt": self.attempt, "kind": self.kind.value, "reason": self.reason, "detail": self.detail,
                "message": self.message, "at": time_out(self.at), "readmittedAt": time_out(self.readmitted_at)}

    def as_eviction(self) -> Eviction:
        return Eviction(kind=self.kind, reason=self.reason, detail=self.detail, message=self.message)


@dataclass(frozen=True, kw_only=True)
class DisruptionRecord:
    """One whole-gang restart for a worker lost to a node disruption (charged to no budget)."""

    attempt: int
    restart_attempt: int  # the gang's restart round it started
    reason: str
    message: str
    worker: str
    at: datetime

    @classmethod
    def of(cls, d: Disruption, *, attempt: int, restart_attempt: int, at: datetime) -> DisruptionRecord:
        return cls(attempt=attempt, restart_attempt=restart_attempt, reason=d.reason, message=d.message,
                   worker=d.worker, at=at)

    def describe(self) -> str:
        """`worker lost to node disruption (<reason>): <message> (<worker>)`."""
        text = f"worker lost to node disruption ({self.reason}): {self.message}"
        return text + (f" ({self.worker})" if self.worker else "")


@dataclass(frozen=True, kw_only=True)
class AttemptRecord:
    number: int
    started_at: datetime  # when gangrun created its gang
    running_at: datetime | None = None  # first Running: maxRuntime counts from here (S8)
    ended_at: datetime | None = None
    outcome: Outcome | None = None
    code: str | None = None
    reason: str | None = None

    def for_storage(self) -> AttemptView:
        """The attempt as stored and as `get -o json` lists it."""
        return {"number": self.number, "startedAt": time_out(self.started_at), "runningAt": time_out(self.running_at),
                "endedAt": time_out(self.ended_at), "outcome": self.outcome.value if self.outcome else None,
                "code": self.code, "reason": self.reason}

# A module constant rather than a call in the field default: PhaseInfo is frozen, so one shared value is safe.
_SUBMITTED = PhaseInfo(phase=Phase.QUEUED, version=0, reason="task submitted")


@dataclass(frozen=True, kw_only=True)
class TaskState:
    info: PhaseInfo = _SUBMITTED
    attempt: int = 1
    gang_seen: bool = False  # the gang of this attempt has been observed: a later absence is a deletion
    started: bool = False  # sticky for the attempt: the whole gang has been up once (a hold vs an eviction)
    restart_attempt: int = 0  # the gang's whole-gang restarts in this attempt (JobSet status.restarts)
    user_retries_used: int = 0
    system_retries_used: int = 0
    consecutive_system_failures: int = 0
    disruption_restarts: int = 0  # the gang's uncounted (disruption) restarts already seen, this attempt
    disruptions_in_a_row: int = 0  # disruption restarts since the gang was last fully up
    eviction: EvictionRecord | None = None  # the eviction in progress, from first sight until readmission
    waiting: bool = False  # S5: the started gang is suspended and keeps its attempt until Kueue readmits it
    unexplained_suspend_since: datetime | None = None  # S7: suspended, Workload not Evicted yet
    message: str = ""  # the final error on Failed; otherwise empty
    code: str = ""  # the final error code on Failed
    attempts: tuple[AttemptRecord, ...] = ()
    evictions: tuple[EvictionRecord, ...] = ()  # every closed or open eviction, for accounting (B5)
    disruptions: tuple[DisruptionRecord, ...] = ()  # every restart for a node disruption, for accounting

    @classmethod
    def new(cls, *, now: datetime) -> TaskState:
        return cls(attempts=(AttemptRecord(number=1, started_at=now),))

    # -- views ------------------------------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self.info.phase

    @property
    def current(self) -> AttemptRecord:
        return self.attempts[-1]

    @property
    def running_at(self) -> datetime | None:
        return self.current.running_at if self.attempts else None

    def waiting_for_readmission(self, *, now: datetime) -> timedelta:
        """Total time spent between an eviction and its readmission (open ones count up to `now`)."""
        return sum(((e.readmitted_at or now) - e.at for e in self.evictions), timedelta())

    # -- transitions --------------------------------------------------------------------------------

    def with_info(self, info: PhaseInfo) -> TaskState:
        return self if info == self.info else replace(self, info=info)

    def with_running(self, *, at: datetime, restart_attempt: int) -> TaskState:
        """The whole gang is up: started becomes sticky, maxRuntime starts counting once per attempt."""
        if (self.started and self.restart_attempt == restart_attempt and self.consecutive_system_failures == 0
                and self.disruptions_in_a_row == 0 and self.unexplained_suspend_since is None
                and self.current.running_at is not None):
            return self  # the steady state: most observations change nothing
        current = self.current if self.current.running_at else replace(self.current, running_at=at)
        return replace(self, started=True, restart_attempt=restart_attempt, consecutive_system_failures=0,
                       disruptions_in_a_row=0, attempts=self.attempts[:-1] + (current,),
                       unexplained_suspend_since=None)

    def with_disruption(self, d: Disruption, *, restarts_not_counted: int, restart_attempt: int,
                        at: datetime) -> TaskState:
        """The gang restarted (uncounted) into round `restart_attempt` for a worker lost to a node
        disruption; `restarts_not_counted` is the gang's total of such restarts. Returns the same state
        if none is new."""
        new = restarts_not_counted - self.disruption_restarts
        if new <= 0:
            return self
        record = DisruptionRecord.of(d, attempt=self.attempt, restart_attempt=restart_attempt, at=at)
        return replace(self, disruption_restarts=restarts_not_counted,
                       disruptions_in_a_row=self.disruptions_in_a_row + new, disruptions=self.disruptions + (record,))

    def with_eviction_seen(self, ev: Eviction, *, at: datetime) -> TaskState:
        """Record an eviction the first time it is seen. Returns the same state if one is already open."""
        if self.eviction is not None:
            return self
        record = EvictionRecord.of(ev, attempt=self.attempt, at=at)
        return replace(self, eviction=record, evictions=self.evictions + (record,))

    def with_readmitted(self, *, at: datetime) -> TaskState:
        """Close the open eviction: the gang was admitted again."""
        if self.eviction is None:
            return self
        closed = replace(self.eviction, readmitted_at=at)
        evictions = tuple(closed if e == self.eviction else e for e in self.evictions)
        return replace(self, eviction=None, evictions=evictions, unexplained_suspend_since=None, waiting=False)

    def with_waiting(self) -> TaskState:
        """S5: the preempted gang keeps its attempt and waits for re-admission."""
        return self if self.waiting else replace(self, waiting=True, unexplained_suspend_since=None)

    def with_attempt_ended(self, outcome: Outcome, *, at: datetime, code: str, reason: str) -> TaskState:
        ended = replace(self.current, ended_at=at, outcome=outcome, code=code or None, reason=reason)
        evictions = self.evictions
        if self.eviction is not None:  # an eviction that ended the attempt is never readmitted
            evictions = tuple(replace(e, readmitted_at=at) if e == self.eviction else e for e in evictions)
        return replace(self, attempts=self.attempts[:-1] + (ended,), eviction=None, evictions=evictions,
                       unexplained_suspend_since=None, waiting=False)

    def with_failed(self, *, at: datetime, attempt_code: str, attempt_reason: str, code: str, message: str,
                    reason: str) -> TaskState:
        """The task failed for good: the attempt ends as Failed, the task keeps the final error."""
        failed = self.with_attempt_ended(Outcome.FAILED, at=at, code=attempt_code, reason=attempt_reason)
        failed = replace(failed, code=code, message=message)
        return failed.with_info(failed.info.advance(Phase.FAILED, reason))

    def with_next_attempt(self, *, at: datetime) -> TaskState:
        """A fresh attempt: a new gang, nothing sticky carried over; budgets are kept."""
        number = self.attempt + 1
        return replace(self, attempt=number, gang_seen=False, started=False, restart_attempt=0,
                       disruption_restarts=0, disruptions_in_a_row=0,
                       attempts=self.attempts + (AttemptRecord(number=number, started_at=at),))

    # -- storage ------------------------------------------------------------------------------------

    def for_storage(self) -> dict[str, Any]:
        return {
            "phase": self.info.phase.value,
            "phaseVersion": self.info.version,
            "reason": self.info.reason,
            "attempt": self.attempt,
            "gangSeen": self.gang_seen,
            "started": self.started,
            "restartAttempt": self.restart_attempt,
            "userRetriesUsed": self.user_retries_used,
            "systemRetriesUsed": self.system_retries_used,
            "consecutiveSystemFailures": self.consecutive_system_failures,
            "disruptionRestarts": self.disruption_restarts,
            "disruptionsInARow": self.disruptions_in_a_row,
            "eviction": _eviction_out(self.eviction),
            "waitingForReadmission": self.waiting,
            "unexplainedSuspendSince": time_out(self.unexplained_suspend_since),
            "message": self.message,
            "code": self.code,
            "attempts": [a.for_storage() for a in self.attempts],
            "evictions": [_eviction_out(e) for e in self.evictions],
            "disruptions": [_disruption_out(d) for d in self.disruptions],
        }

    @classmethod
    def from_storage(cls, data: dict[str, Any]) -> TaskState:
        return cls(
            info=PhaseInfo(phase=Phase(data["phase"]), version=int(data["phaseVersion"]), reason=data["reason"]),
            attempt=int(data["attempt"]),
            gang_seen=bool(data.get("gangSeen", False)),
            started=bool(data.get("started", False)),
            restart_attempt=int(data.get("restartAttempt", 0)),
            user_retries_used=int(data.get("userRetriesUsed", 0)),
            system_retries_used=int(data.get("systemRetriesUsed", 0)),
            consecutive_system_failures=int(data.get("consecutiveSystemFailures", 0)),
            disruption_restarts=int(data.get("disruptionRestarts", 0)),
            disruptions_in_a_row=int(data.get("disruptionsInARow", 0)),
            eviction=_eviction_in(data.get("eviction")),
            waiting=bool(data.get("waitingForReadmission", False)),
            unexplained_suspend_since=time_in(data.get("unexplainedSuspendSince")),
            message=data.get("message", ""),
            code=data.get("code", ""),
            attempts=tuple(_attempt_in(a) for a in data.get("attempts", [])),
            evictions=tuple(e for e in (_eviction_in(x) for x in data.get("evictions", [])) if e is not None),
            disruptions=tuple(_disruption_in(d) for d in data.get("disruptions", [])),
        )


def _attempt_in(d: dict[str, Any]) -> AttemptRecord:
    started = time_in(d.get("startedAt"))
    assert started is not None, "an attempt record always has startedAt"
    return AttemptRecord(number=int(d["number"]), started_at=started, running_at=time_in(d.get("runningAt")),
                         ended_at=time_in(d.get("endedAt")),
                         outcome=Outcome(d["outcome"]) if d.get("outcome") else None,
                         code=d.get("code"), reason=d.get("reason"))


def _eviction_out(e: EvictionRecord | None) -> EvictionView | None:
    return None if e is None else e.for_json()


def _eviction_in(d: dict[str, Any] | None) -> EvictionRecord | None:
    if not d:
        return None
    at = time_in(d.get("at"))
    assert at is not None, "an eviction record always has its time"
    return EvictionRecord(attempt=int(d["attempt"]), kind=EvictionKind(d["kind"]), reason=d.get("reason", ""),
                          detail=d.get("detail", ""), message=d.get("message", ""), at=at,
                          readmitted_at=time_in(d.get("readmittedAt")))


def _disruption_out(d: DisruptionRecord) -> dict[str, Any]:
    return {"attempt": d.attempt, "restartAttempt": d.restart_attempt, "reason": d.reason, "message": d.message,
            "worker": d.worker, "at": time_out(d.at)}


def _disruption_in(d: dict[str, Any]) -> DisruptionRecord:
    at = time_in(d.get("at"))
    assert at is not None, "a disruption record always has its time"
    return DisruptionRecord(attempt=int(d["attempt"]), restart_attempt=int(d.get("restartAttempt", 0)),
                            reason=d.get("reason", ""), message=d.get("message", ""), worker=d.get("worker", ""),
                            at=at)


__all__ = ["AttemptRecord", "DisruptionRecord", "EvictionRecord", "Outcome", "TaskState"]
