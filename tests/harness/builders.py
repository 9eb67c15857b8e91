"""Builders for observations and states, so test tables read like the reference tables.

    make_workload().evicted("Preempted", "msg").preempted("InClusterQueue").obj()
    make_gang(2).suspended().obj()
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gangrun._core import jobset, kueue
from gangrun._core.conditions import Condition
from gangrun._core.observation import Disruption, Gang, Maintenance, Workload
from gangrun._core.phases import Phase, PhaseInfo
from gangrun._core.state import TaskState

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
PREEMPTION_MESSAGE = kueue.preemption_message(
    workload_uid="wl-2", job_uid="js-2", reason=kueue.IN_CLUSTER_QUEUE,
    preemptor_path="/team-a", preemptee_path="/team-a")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class WorkloadBuilder:
    def __init__(self, queue: str = "default") -> None:
        self._w = Workload(queue_name=queue)

    def _cond(self, type_: str, status: str, reason: str, message: str = "") -> WorkloadBuilder:
        conds = tuple(c for c in self._w.conditions if c.type != type_)
        self._w = replace(self._w, conditions=conds + (Condition(type=type_, status=status, reason=reason,
                                                                 message=message),))
        return self

    def admitted(self) -> WorkloadBuilder:
        self._cond(kueue.QUOTA_RESERVED, "True", kueue.QUOTA_RESERVED_REASON, kueue.quota_reserved_message("cq"))
        return self._cond(kueue.ADMITTED, "True", kueue.ADMITTED, kueue.MSG_ADMITTED)

    def evicted(self, reason: str, message: str = "") -> WorkloadBuilder:
        return self._cond(kueue.EVICTED, "True", reason, message)

    def not_evicted(self, message: str = "") -> WorkloadBuilder:
        return self._cond(kueue.EVICTED, "False", kueue.QUOTA_RESERVED_REASON, message)

    def preempted(self, reason: str = kueue.IN_CLUSTER_QUEUE) -> WorkloadBuilder:
        return self._cond(kueue.PREEMPTED, "True", reason, PREEMPTION_MESSAGE)

    def preemption(self) -> WorkloadBuilder:
        return self.admitted().evicted(kueue.EVICTED_BY_PREEMPTION, PREEMPTION_MESSAGE).preempted()

    def readmitted(self) -> WorkloadBuilder:
        self.admitted()
        self._cond(kueue.EVICTED, "False", kueue.QUOTA_RESERVED_REASON, kueue.previously(PREEMPTION_MESSAGE))
        return self._cond(kueue.PREEMPTED, "False", kueue.QUOTA_RESERVED_REASON, kueue.previously(PREEMPTION_MESSAGE))

    def quota(self, status: str, reason: str, message: str = "") -> WorkloadBuilder:
        return self._cond(kueue.QUOTA_RESERVED, status, reason, message)

    def inactive(self) -> WorkloadBuilder:
        self._w = replace(self._w, active=False)
        return self

    def obj(self) -> Workload:
        return self._w


class GangBuilder:
    def __init__(self, workers: int = 2) -> None:
        self._g = Gang(expected_workers=workers)

    def suspended(self, message: str = "") -> GangBuilder:
        conds = (Condition(type=jobset.SUSPENDED, reason=jobset.SUSPENDED_JOBS, message=message),) if message else ()
        self._g = replace(self._g, suspended=True, conditions=self._g.conditions + conds, scheduled_workers=0,
                          ready_workers=0, jobs_ready=0)
        return self

    def scheduled(self, k: int, detail: str = "") -> GangBuilder:
        self._g = replace(self._g, scheduled_workers=k, unscheduled_detail=detail)
        return self

    def ready(self, r: int | None = None) -> GangBuilder:
        r = self._g.expected_workers if r is None else r
        all_ready = r >= self._g.expected_workers
        self._g = replace(self._g, scheduled_workers=self._g.expected_workers, ready_workers=r,
                          jobs_ready=1 if all_ready else 0)
        return self

    def restarts(self, n: int, towards_max: int | None = None) -> GangBuilder:
        self._g = replace(self._g, restarts=n, restarts_count_towards_max=n if towards_max is None else towards_max)
        return self

    def restarting(self) -> GangBuilder:
        return self._with(Condition(type=jobset.RESTARTING, reason=jobset.DEFAULT_FAILURE_POLICY,
                                    message=jobset.restarting_message("train-workers-0")))

    def disrupted(self, reason: str = jobset.DISRUPTION_EVICTION_API, message: str = jobset.MSG_EVICTION_API,
                  worker: str = "pod train-1-workers-0-1-abcde", *, restart_attempt: int | None = None) -> GangBuilder:
        """A worker of round `restart_attempt` (default: the current one) lost to a node disruption."""
        r = self._g.restarts if restart_attempt is None else restart_attempt
        self._g = replace(self._g, disruption=Disruption(reason=reason, message=message, worker=worker,
                                                         restart_attempt=r))
        return self

    def node_going(self, node: str = "node-1",
                   why: str = "cordoned: taint node.kubernetes.io/unschedulable:NoSchedule") -> GangBuilder:
        """A node of the current round's workers is about to go (B9)."""
        self._g = replace(self._g, maintenance=Maintenance(node=node, why=why, worker="pod train-1-workers-0-1-abcde"))
        return self

    def restarting_for_disruption(self) -> GangBuilder:
        """JobSet restarts the gang by gangrun's disruption rule, not counting it toward maxRestarts."""
        self._g = replace(self._g, restarts=self._g.restarts + 1, scheduled_workers=0, ready_workers=0, jobs_ready=0,
                          jobs_failed=0)
        return self._with(Condition(type=jobset.RESTARTING, reason=jobset.RESTARTING_REASON_DISRUPTION,
                                    message=jobset.restarting_ignoring_max_message("train-1-workers-0")))

    def worker_failed(self, first_failure: str = "pod train-workers-0-1: exit code 3") -> GangBuilder:
        self._g = replace(self._g, jobs_failed=1, first_failure=first_failure)
        return self

    def pending_failure(self, message: str) -> GangBuilder:
        self._g = replace(self._g, pending_failure=message)
        return self

    def completed(self) -> GangBuilder:
        return self._with(Condition(type=jobset.COMPLETED, reason=jobset.ALL_JOBS_COMPLETED,
                                    message=jobset.MSG_COMPLETED))

    def failed(self, reason: str = jobset.FAILED_JOBS, message: str = "") -> GangBuilder:
        return self._with(Condition(type=jobset.FAILED, reason=reason,
                                    message=message or jobset.failed_jobs_message("train-workers-0")))

    def deleting(self) -> GangBuilder:
        self._g = replace(self._g, deleting=True)
        return self

    def _with(self, cond: Condition) -> GangBuilder:
        self._g = replace(self._g, conditions=self._g.conditions + (cond,))
        return self

    def obj(self) -> Gang:
        return self._g


def make_workload(queue: str = "default") -> WorkloadBuilder:
    return WorkloadBuilder(queue)


def make_gang(workers: int = 2) -> GangBuilder:
    return GangBuilder(workers)


def state_in(phase: Phase, reason: str = "", *, started: bool = False, attempt: int = 1, version: int = 0,
             running_at: datetime | None = None, **kw) -> TaskState:
    """A task state as the engine would have left it, in `phase` of attempt `attempt`."""
    s = TaskState.new(now=T0)
    for _ in range(attempt - 1):
        s = s.with_next_attempt(at=T0)
    s = replace(s, info=PhaseInfo(phase=phase, version=version, reason=reason or phase.value), gang_seen=True, **kw)
    if started:
        s = s.with_running(at=running_at or T0, restart_attempt=s.restart_attempt)
    return s
