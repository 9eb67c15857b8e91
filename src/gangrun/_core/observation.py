"""What a backend observed of one attempt's gang: the engine's only input from the outside world.

The Kubernetes adapter builds it from a JobSet, its pods and its Kueue Workload; the local backend from
its own gang of processes and its Workload twin. Every field has a harmless default, so a partial or
malformed object read from an API becomes a partial observation, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gangrun._core import jobset
from gangrun._core.conditions import Condition, find_condition, is_condition_true
from gangrun._core.elastic import RESIZE


@dataclass(frozen=True, kw_only=True)
class Disruption:
    """A worker lost to a node disruption, not to its own code: on Kubernetes a pod with the condition
    DisruptionTarget (a drain or API-initiated eviction, a spot reclaim, a taint, a kubelet's node-pressure
    eviction, a scheduler preemption); locally a worker killed as a lost node would be.

    `restart_attempt` is the gang's restart round the worker belonged to: while it equals the gang's
    `restarts`, the restart it causes has not happened yet.
    """

    reason: str  # the condition's reason, e.g. EvictionByEvictionAPI
    message: str  # the condition's message, e.g. "Eviction API: evicting"
    worker: str = ""  # which worker, for people: a pod name, or "rank 3"
    restart_attempt: int = 0


@dataclass(frozen=True, kw_only=True)
class Maintenance:
    """A node of the gang's current round is about to go (cordoned, tainted for maintenance or reclaim:
    `gangrun._core.maintenance`): its workers must save and the gang restart elsewhere, charged to nothing."""

    node: str  # the node's name
    why: str  # what says so, naming the taint, e.g. "cordoned: taint node.kubernetes.io/unschedulable:NoSchedule"
    worker: str = ""  # one worker on it, for people: a pod name


@dataclass(frozen=True, kw_only=True)
class Gang:
    """The JobSet (or its local twin) of the current attempt.

    Counts of `jobs_*` follow JobSet's `replicatedJobsStatus` (they count child Jobs, each a whole node
    group); `*_workers` count worker pods of the current restart round.
    """

    suspended: bool = False
    conditions: tuple[Condition, ...] = ()
    restarts: int = 0
    restarts_count_towards_max: int = 0
    resizes: int = 0  # restarts that were an elastic gang's change of size: charged to nothing
    expected_workers: int = 1
    scheduled_workers: int = 0
    ready_workers: int = 0
    jobs_ready: int = 0
    jobs_succeeded: int = 0
    jobs_failed: int = 0
    unscheduled_detail: str = ""  # why workers are not scheduled yet, shown after "K of N workers scheduled"
    unschedulable_since: datetime | None = None  # the scheduler found no node for a worker of this round since
    first_failure: str = ""  # the earliest failed worker of this round: the root cause, not the collateral
    first_failure_at: datetime | None = None  # ... and when it ended (its container's finishedAt), if known
    pending_failure: str = ""  # a worker that can never start (bad image, bad config)
    deleting: bool = False  # someone else is deleting it
    # The newest worker of this attempt lost to a node disruption. A restart for it increments
    # `restarts` but not `restarts_count_towards_max`, as JobSet's RestartJobSetAndIgnoreMaxRestarts does.
    disruption: Disruption | None = None
    # A node running a worker of the current round is about to go (the first such worker's): the gang
    # saves and restarts elsewhere, as for a disruption, but told before its node goes.
    maintenance: Maintenance | None = None

    @property
    def completed(self) -> bool:
        return is_condition_true(self.conditions, jobset.COMPLETED)

    @property
    def failed(self) -> Condition | None:
        cond = find_condition(self.conditions, jobset.FAILED)
        return cond if cond is not None and cond.is_true else None

    @property
    def restarts_exhausted(self) -> bool:
        """JobSet failed it for a worker's failure with no restart left (`ReachedMaxRestarts`, also when
        maxRestarts is 0 and no restart was ever allowed)."""
        cond = self.failed
        return cond is not None and cond.reason == jobset.REACHED_MAX_RESTARTS

    @property
    def restarting(self) -> bool:
        return is_condition_true(self.conditions, jobset.RESTARTING)

    @property
    def resizing(self) -> str:
        """Why an elastic gang is restarting at another size ("" when it is not)."""
        cond = find_condition(self.conditions, jobset.RESTARTING)
        return cond.message if cond is not None and cond.is_true and cond.reason == RESIZE else ""

    @property
    def suspended_message(self) -> str:
        cond = find_condition(self.conditions, jobset.SUSPENDED)
        return cond.message if cond is not None and cond.is_true else ""

    @property
    def restarts_not_counted(self) -> int:
        """Whole-gang restarts the gang did not charge to maxRestarts for node disruptions (resizes are
        charged to nothing and are not disruptions)."""
        return max(0, self.restarts - self.restarts_count_towards_max - self.resizes)

    @property
    def disruption_pending(self) -> bool:
        """A worker of the current round was lost to a disruption and the gang has not restarted yet."""
        return self.disruption is not None and self.disruption.restart_attempt >= self.restarts

    @property
    def has_run(self) -> bool:
        """Whether the whole gang has been up in this attempt, judged from this object alone."""
        return self.restarts > 0 or self.jobs_ready > 0 or self.jobs_succeeded > 0


@dataclass(frozen=True, kw_only=True)
class Workload:
    """The Kueue Workload of the gang (or its local twin)."""

    conditions: tuple[Condition, ...] = ()
    active: bool = True  # spec.active; Kueue's IsActive defaults it to true
    queue_name: str = ""


class WorkloadRead(StrEnum):
    FOUND = "found"
    NOT_FOUND = "not found"
    UNREADABLE = "unreadable"  # forbidden, or the API failed: we do not know


@dataclass(frozen=True, kw_only=True)
class Observation:
    gang: Gang | None = None  # None: the gang of this attempt does not exist
    # With no gang: how it went when its backend knows gangrun itself ended it, completing "the gang of
    # attempt N ..." (the local control plane was stopped); "" = unknown, read as a deletion by someone else.
    gang_gone: str = ""
    workload: Workload | None = None
    workload_read: WorkloadRead = WorkloadRead.NOT_FOUND
    workload_error: str = ""  # why it could not be read, for the log

    def __post_init__(self) -> None:
        if self.workload is not None and self.workload_read is not WorkloadRead.FOUND:
            object.__setattr__(self, "workload_read", WorkloadRead.FOUND)


NOT_FOUND = Observation()


def observed(gang: Gang | None, workload: Workload | None = None, *, unreadable: str = "") -> Observation:
    """Shorthand: an observation of `gang` with `workload`, or with a Workload that could not be read."""
    if unreadable:
        return Observation(gang=gang, workload_read=WorkloadRead.UNREADABLE, workload_error=unreadable)
    return Observation(gang=gang, workload=workload)

