"""Why Kueue took a gang back, and what that costs: one classifier for both backends.

`classify_eviction` is pure and reads only the Workload (or its absence). The shell `match`es on the
returned `EvictionKind`; nobody else compares Kueue's reason strings (those live in `kueue.py`).

    kind                  Kueue Evicted reason                        retry class
    PREEMPTED             Preempted                                   user (waits with resumeAfterPreemption)
    MAX_EXECUTION_TIME    DeactivatedDueToMaximumExecutionTimeExceeded user (the user's own limit)
    DEACTIVATED           Deactivated*, InactiveWorkload, spec.active=false (beats a stale Preempted, S6)
                                                                      system
    OTHER                 PodsReadyTimeout, NodeFailures, ClusterQueueStopped, AdmissionCheck, ...
                                                                      system
    UNKNOWN               no Workload, or it could not be read        system
    NOT_YET               Workload found, Evicted not True yet (S7)   none: wait for the next observation
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gangrun._core import kueue
from gangrun._core.conditions import find_condition
from gangrun._core.observation import Workload, WorkloadRead

SOURCE = "kueue"


class EvictionKind(StrEnum):
    PREEMPTED = "Preempted"
    MAX_EXECUTION_TIME = "MaxExecutionTime"
    DEACTIVATED = "Deactivated"
    OTHER = "Other"
    UNKNOWN = "Unknown"
    NOT_YET = "NotYet"


USER_CAUSED = frozenset({EvictionKind.PREEMPTED, EvictionKind.MAX_EXECUTION_TIME})
WAITS_FOR_READMISSION = frozenset({EvictionKind.PREEMPTED})  # only a preemption keeps the attempt (S5)


@dataclass(frozen=True, kw_only=True)
class Eviction:
    kind: EvictionKind
    reason: str = ""  # Kueue's Evicted reason; "" when unknown
    detail: str = ""  # the Preempted condition's reason, e.g. InClusterQueue
    message: str = ""

    @property
    def user_caused(self) -> bool:
        return self.kind in USER_CAUSED

    @property
    def waits_for_readmission(self) -> bool:
        return self.kind in WAITS_FOR_READMISSION

    def summary(self) -> str:
        """`gang evicted by kueue (Preempted, InClusterQueue): <message>`, without the retry sentence."""
        text = f"gang evicted by {SOURCE}"
        if self.reason and self.detail:
            text += f" ({self.reason}, {self.detail})"
        elif self.reason:
            text += f" ({self.reason})"
        if self.message.strip():
            text += f": {self.message.strip()}"
        return text

    def describe(self, *, retries_left: int) -> str:
        """The summary plus what the eviction costs. `retries_left` counts user retries before this one."""
        return self.summary() + retry_sentence(user_caused=self.user_caused, retries_left=retries_left)


def retry_sentence(*, user_caused: bool, retries_left: int) -> str:
    if not user_caused:
        return "; this does not count against the task's retries"
    if retries_left <= 0:
        return "; this counts against the task's retries and none are left, so the task fails"
    if retries_left == 1:
        return "; this uses the task's last retry"
    return f"; this uses one of the task's retries ({retries_left - 1} left after it)"


def classify_eviction(workload: Workload | None, read: WorkloadRead = WorkloadRead.FOUND) -> Eviction:
    """Classify why the gang was taken back, from its Workload alone.

    A deactivated Workload is a deactivation even when its Evicted reason still says `Preempted` (S6):
    Kueue will not readmit it until someone activates it again.
    """
    if workload is None or read is not WorkloadRead.FOUND:
        return Eviction(kind=EvictionKind.UNKNOWN)
    evicted = find_condition(workload.conditions, kueue.EVICTED)
    if not workload.active:
        if evicted is not None and evicted.is_true and kueue.is_deactivation_reason(evicted.reason):
            return Eviction(kind=_deactivation_kind(evicted.reason), reason=evicted.reason,
                            message=evicted.message)
        return Eviction(kind=EvictionKind.DEACTIVATED, reason=kueue.DEACTIVATED, message=kueue.MSG_DEACTIVATED)
    if evicted is None or not evicted.is_true:
        return Eviction(kind=EvictionKind.NOT_YET)
    reason, message = evicted.reason, evicted.message
    if reason == kueue.EVICTED_BY_PREEMPTION:
        preempted = find_condition(workload.conditions, kueue.PREEMPTED)
        detail = preempted.reason if preempted is not None and preempted.is_true else ""
        return Eviction(kind=EvictionKind.PREEMPTED, reason=reason, detail=detail, message=message)
    if kueue.is_deactivation_reason(reason):
        return Eviction(kind=_deactivation_kind(reason), reason=reason, message=message)
    return Eviction(kind=EvictionKind.OTHER, reason=reason, message=message)


def _deactivation_kind(reason: str) -> EvictionKind:
    if reason == kueue.DEACTIVATED_DUE_TO_MAX_EXEC_TIME:
        return EvictionKind.MAX_EXECUTION_TIME
    return EvictionKind.DEACTIVATED


def local_queue_missing(workload: Workload | None) -> str | None:
    """The queue name when Kueue says the gang's LocalQueue does not exist, else None.

    Only the exact message for the Workload's own queue counts; "is inactive" or another queue's
    name keep the gang waiting.
    """
    if workload is None:
        return None
    cond = find_condition(workload.conditions, kueue.QUOTA_RESERVED)
    if cond is None or cond.status != "False" or cond.reason != kueue.INADMISSIBLE:
        return None
    if workload.queue_name and cond.message == kueue.local_queue_missing_message(workload.queue_name):
        return workload.queue_name
    return None


def pending_message(workload: Workload | None) -> str:
    """Why Kueue has not admitted the gang (QuotaReserved=False's message), or "" when it does not say."""
    if workload is None:
        return ""
    cond = find_condition(workload.conditions, kueue.QUOTA_RESERVED)
    return cond.message if cond is not None and cond.status == "False" else ""
