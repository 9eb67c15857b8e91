"""What the engine needs of a task's spec, and the retry budgets (S9) as one pure decision.

User retries and system retries are separate budgets kept by gangrun (never on the gang, which is
recreated per attempt). A system retry never uses a user retry; `max_system_retries` bounds system
retries *in a row*: the counter resets when an attempt's whole gang is up, or on a user retry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from gangrun._core import stop_causes
from gangrun._core.eviction import retry_sentence
from gangrun._core.phases import Phase
from gangrun._core.state import Outcome, TaskState

DEFAULT_MAX_SYSTEM_RETRIES = 3
DEFAULT_SUSPEND_GRACE = timedelta(seconds=30)

# Error codes on attempts and on the final failure.
GANG_EVICTED = "GangEvicted"
MAX_RETRIES_EXCEEDED = "MaxRetriesExceeded"
MAX_SYSTEM_FAILURES_EXCEEDED = "MaxSystemFailuresExceeded"
MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
QUEUE_NOT_FOUND = "KueueLocalQueueNotFound"
DELETED_EXTERNALLY = "ResourceDeletedExternally"
CONTROL_PLANE_STOPPED = "ControlPlaneStopped"  # the gang ended with the control plane that ran it (local)
UNEXPECTED_DELETION = "UnexpectedObjectDeletion"
WORKER_FAILED = stop_causes.WORKER_FAILED  # one name for the stop cause and the condition reason
WORKER_CANNOT_START = "WorkerCannotStart"
WORKER_DISRUPTED = "WorkerLostToNodeDisruption"


class RetryKind(StrEnum):
    USER = "user"
    SYSTEM = "system"


@dataclass(frozen=True, kw_only=True)
class Policy:
    retries: int = 0
    max_system_retries: int = DEFAULT_MAX_SYSTEM_RETRIES
    max_restarts: int = 0
    resume_after_preemption: bool = False
    restart_on_disruption: bool = True
    max_runtime: timedelta | None = None
    suspend_grace: timedelta = DEFAULT_SUSPEND_GRACE  # S7: how long a suspension may stay unexplained

    def retries_left(self, state: TaskState) -> int:
        return max(0, self.retries - state.user_retries_used)


@dataclass(frozen=True, kw_only=True)
class AttemptEnd:
    """The result of ending an attempt: the new state, and whether the task goes on."""

    state: TaskState
    retried: bool
    code: str
    message: str


def end_attempt(policy: Policy, state: TaskState, kind: RetryKind, *, code: str, message: str,
                now: datetime) -> AttemptEnd:
    """End the current attempt as a `kind` retry; start the next one if the budget allows, else fail.

    `message` already says what the failure costs (see `retry_sentence`).
    """
    n = state.attempt
    if kind is RetryKind.USER:
        if policy.retries_left(state) > 0:
            ended = state.with_attempt_ended(Outcome.USER_RETRY, at=now, code=code, reason=message)
            ended = replace(ended, user_retries_used=state.user_retries_used + 1, consecutive_system_failures=0)
            return _next(ended, now=now, code=code, message=message, kind=kind)
        final_code = MAX_RETRIES_EXCEEDED
        final = message
    else:
        in_a_row = state.consecutive_system_failures + 1
        if in_a_row <= policy.max_system_retries:
            ended = state.with_attempt_ended(Outcome.SYSTEM_RETRY, at=now, code=code, reason=message)
            ended = replace(ended, system_retries_used=state.system_retries_used + 1,
                            consecutive_system_failures=in_a_row)
            return _next(ended, now=now, code=code, message=message, kind=kind)
        final_code = MAX_SYSTEM_FAILURES_EXCEEDED
        final = f"{message}; {in_a_row} system failures in a row exceed maxSystemRetries ({policy.max_system_retries})"
    failed = state.with_failed(at=now, attempt_code=code, attempt_reason=message, code=final_code, message=final,
                               reason=f"attempt {n} failed: {final}")
    return AttemptEnd(state=failed, retried=False, code=final_code, message=final)


def _next(ended: TaskState, *, now: datetime, code: str, message: str, kind: RetryKind) -> AttemptEnd:
    n = ended.attempt
    nxt = ended.with_next_attempt(at=now)
    reason = f"attempt {n + 1} queued after a {kind.value} retry: {message}"
    nxt = nxt.with_info(nxt.info.advance(Phase.QUEUED, reason))
    return AttemptEnd(state=nxt, retried=True, code=code, message=message)


def failure_message(code: str, detail: str, *, retries_left: int) -> str:
    """The message of a user failure that is not an eviction, with what it costs."""
    text = f"{code}: {detail}" if detail else code
    return text + retry_sentence(user_caused=True, retries_left=retries_left)
