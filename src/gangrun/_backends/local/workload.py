"""The Workload twin: one per attempt's gang, with Kueue's conditions written in Kueue's order.

Only `gangrun._core.kueue` spells the strings; this module only sequences them. One preemption, as
the daemon carries it out (Kueue's own order, from its jobframework reconciler):

    W1  evict()          Evicted=True/Preempted + Preempted=True/InClusterQueue; quota still reserved
    W2  (gang.suspend)   the gang twin is suspended and its workers get SIGTERM
    W6  release()        once no worker is left: Requeued=True/Preempted, QuotaReserved=False/Pending,
                         Admitted=False/NoReservation — the quota is free again
    W7  reserve()        readmission: QuotaReserved=True, Evicted/Preempted=False/QuotaReserved
                         "Previously: ...", Admitted=True
    W8  (gang.resume)    the same attempt's workers start again, same restartAttempt

Every transition takes `now` and returns whether it changed anything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gangrun._backends.local.admission import Resources
from gangrun._backends.local.config import CLUSTER_QUEUE
from gangrun._core import kueue
from gangrun._core.conditions import FALSE, TRUE, Condition, find_condition, set_condition
from gangrun._core.observation import Workload
from gangrun._core.times import time_in, time_out
from gangrun._core.view_types import WorkloadView

REQUEUE_ON = (kueue.EVICTED_BY_PREEMPTION, kueue.EVICTED_DUE_TO_NODE_FAILURES)  # Kueue's reconciler rule
BACKOFF_MAX = timedelta(seconds=60)


def workload_name(task: str, attempt: int) -> str:
    """Kueue names a JobSet's Workload `jobset-<name>-<sha1[:5]>`; the local gang of attempt N is `<task>-a<N>`."""
    gang = f"{task}-a{attempt}"
    digest = hashlib.sha1(f"JobSet\njobset.x-k8s.io\n{gang}\n{gang}".encode()).hexdigest()[:5]
    return f"jobset-{gang}-{digest}"


@dataclass(kw_only=True)
class WorkloadTwin:
    task: str
    attempt: int
    queue: str
    priority: int
    priority_class: str
    resources: dict[str, str]  # the whole gang's request at `nodes` (admission.Resources.for_json)
    order: int  # submission order
    # The gang's size: `nodes` is what it asks for (pending: its full size) or holds (reserved). An
    # elastic gang (least_nodes < full_nodes) may be admitted smaller and grow back; `resized_at` is its
    # newest change of size, from which its resize cooldown counts.
    per_node: dict[str, str] = field(default_factory=dict)
    nodes: int = 1
    least_nodes: int = 1
    full_nodes: int = 1
    resized_at: datetime | None = None
    cooldown: timedelta = timedelta(minutes=5)  # spec.resizeCooldown
    active: bool = True
    conditions: list[Condition] = field(default_factory=list)
    admitted_at: datetime | None = None  # the quota reservation; None = no reservation
    requeue_at: datetime | None = None  # PodsReadyTimeout backoff
    requeue_count: int = 0
    preempted_by: str = ""  # the task whose admission evicted this one (for the timeline)
    evictions: dict[str, int] = field(default_factory=dict)  # schedulingStats.evictions by reason
    finished: bool = False  # Finished=True: the gang is done or deleted; it never competes again
    gpus: tuple[tuple[int, ...], ...] = ()  # per node, the GPU indices its quota reservation holds
    generation: int = field(default=0, compare=False)  # bumped by every change: the shell persists on a bump

    @property
    def name(self) -> str:
        return workload_name(self.task, self.attempt)

    @property
    def uid(self) -> str:
        return self.name  # locally the name is unique per (task, attempt): it doubles as the UID

    @property
    def reserved(self) -> bool:
        return self.admitted_at is not None

    @property
    def evicted(self) -> Condition | None:
        cond = find_condition(self.conditions, kueue.EVICTED)
        return cond if cond is not None and cond.is_true else None

    @property
    def pending_message(self) -> str:
        """QuotaReserved=False's message: why Kueue has not admitted it (or the eviction it is back from)."""
        cond = find_condition(self.conditions, kueue.QUOTA_RESERVED)
        return cond.message if cond is not None and not cond.is_true else ""

    def pending(self, now: datetime) -> bool:
        """Whether it competes for quota: active, no reservation, not backing off."""
        return (self.active and not self.reserved and not self.finished
                and (self.requeue_at is None or self.requeue_at <= now))

    # -- transitions ---------------------------------------------------------------------------------

    @property
    def elastic(self) -> bool:
        return self.least_nodes < self.full_nodes

    def _size(self, nodes: int, now: datetime) -> None:
        if nodes != self.nodes:
            self.nodes, self.resized_at = nodes, now
            self.resources = Resources.from_json(self.per_node or self.resources).scaled(nodes).for_json()
            self.generation += 1

    def reserve(self, *, now: datetime, gpus: tuple[tuple[int, ...], ...] = (), nodes: int | None = None) -> bool:
        """W7 (and first admission): quota reserved and admitted; old eviction flips to 'Previously'.
        `gpus`: the GPUs of the machine its nodes may use (`gangrun._core.gpus`); `nodes`: an elastic
        gang's admitted size, when below its full size."""
        self._size(nodes or self.full_nodes, now)
        self.admitted_at, self.gpus = now, gpus
        for type_ in (kueue.EVICTED, kueue.PREEMPTED):
            old = find_condition(self.conditions, type_)
            if old is not None and old.is_true:
                self._set(type_, FALSE, kueue.QUOTA_RESERVED_REASON, kueue.previously(old.message), now)
        self._set(kueue.QUOTA_RESERVED, TRUE, kueue.QUOTA_RESERVED_REASON,
                  kueue.quota_reserved_message(CLUSTER_QUEUE), now)
        self._set(kueue.ADMITTED, TRUE, kueue.ADMITTED, kueue.MSG_ADMITTED, now)
        self.preempted_by = ""
        return True

    def evict(self, reason: str, message: str, *, now: datetime, preempted_reason: str = "",
              preemptor: str = "") -> bool:
        """W1: Evicted=True (with Preempted=True in the same write for a preemption). Quota stays."""
        current = self.evicted
        if current is not None and current.reason == reason:
            return False
        self._set(kueue.EVICTED, TRUE, reason, message, now)
        if preempted_reason:
            self._set(kueue.PREEMPTED, TRUE, preempted_reason, message, now)
            self.preempted_by = preemptor
        self.evictions[reason] = self.evictions.get(reason, 0) + 1
        return True

    def release(self, *, now: datetime, backoff_base: timedelta) -> bool:
        """W6: the gang has no worker left; give the quota back and requeue as Kueue does."""
        ev = self.evicted
        if not self.reserved or ev is None:
            return False
        requeue = ev.reason in REQUEUE_ON
        self._set(kueue.REQUEUED, TRUE if requeue else FALSE, ev.reason, ev.message, now)
        self._set(kueue.QUOTA_RESERVED, FALSE, kueue.PENDING, ev.message, now)
        self._set(kueue.ADMITTED, FALSE, kueue.NO_RESERVATION, kueue.MSG_NO_RESERVATION, now)
        self._set(kueue.PODS_READY, FALSE, kueue.PODS_READY_WAIT_FOR_START, kueue.MSG_PODS_NOT_READY, now)
        self.admitted_at, self.gpus = None, ()
        self._size(self.full_nodes, now)  # pending again: it asks for its full size
        if ev.reason == kueue.EVICTED_BY_PODS_READY_TIMEOUT:
            self.requeue_count += 1
            self.requeue_at = now + min(BACKOFF_MAX, backoff_base * 2 ** (self.requeue_count - 1))
        return True

    def grow(self, nodes: int, *, now: datetime, gpus: tuple[tuple[int, ...], ...] = ()) -> bool:
        """An admitted elastic gang running small takes more of the quota: its reservation grows now, its
        gang restarts at the new size (it stops at a checkpoint first)."""
        if not self.reserved or nodes <= self.nodes:
            return False
        self._size(nodes, now)
        self.gpus = gpus
        return True

    def backoff_finished(self, *, now: datetime) -> bool:
        if self.requeue_at is None or self.requeue_at > now:
            return False
        self.requeue_at = None
        self._set(kueue.REQUEUED, TRUE, kueue.BACKOFF_FINISHED, kueue.MSG_BACKOFF_FINISHED, now)
        return True

    def deactivate(self, *, now: datetime) -> bool:
        """spec.active=false: evicted with reason Deactivated; not admitted again until activated."""
        if not self.active:
            return False
        self.active = False
        self.generation += 1
        self.requeue_at = None  # Kueue resets requeueState on deactivation
        ev = self.evicted
        if ev is None or not kueue.is_deactivation_reason(ev.reason):
            self.evict(kueue.DEACTIVATED, kueue.MSG_DEACTIVATED, now=now)
        if not self.reserved:  # nothing to release: the requeue verdict is written now
            self._set(kueue.REQUEUED, FALSE, kueue.DEACTIVATED, kueue.MSG_DEACTIVATED, now)
        return True

    def activate(self, *, now: datetime) -> bool:
        if self.active:
            return False
        self.active = True
        self.requeue_at = None
        self._set(kueue.REQUEUED, TRUE, kueue.REACTIVATED, kueue.MSG_REACTIVATED, now)
        return True

    def finish(self, *, succeeded: bool, message: str, now: datetime) -> bool:
        """Finished=True (the gang ended or was deleted): the quota goes back, it never competes again."""
        if self.finished:
            return False
        self.finished, self.admitted_at, self.requeue_at, self.gpus = True, None, None, ()
        reason = kueue.FINISHED_SUCCEEDED if succeeded else kueue.FINISHED_FAILED
        self._set(kueue.FINISHED, TRUE, reason, message, now)
        return True

    def waiting(self, message: str, *, now: datetime) -> bool:
        """Not admitted, and why (QuotaReserved=False/Pending): shown as the gang's pending reason."""
        if self.reserved or self.finished:
            return False
        return self._set(kueue.QUOTA_RESERVED, FALSE, kueue.PENDING, message, now)

    def pods_ready(self, ready: bool, *, recovering: bool, now: datetime) -> bool:
        if ready:
            reason = kueue.PODS_READY_RECOVERED if recovering else kueue.PODS_READY_STARTED
            return self._set(kueue.PODS_READY, TRUE, reason, kueue.MSG_PODS_READY, now)
        if recovering:
            return self._set(kueue.PODS_READY, FALSE, kueue.PODS_READY_WAIT_FOR_RECOVERY,
                             kueue.MSG_PODS_WAIT_FOR_RECOVERY, now)
        return self._set(kueue.PODS_READY, FALSE, kueue.PODS_READY_WAIT_FOR_START, kueue.MSG_PODS_NOT_READY, now)

    def _set(self, type_: str, status: str, reason: str, message: str, now: datetime) -> bool:
        changed = set_condition(self.conditions, Condition(type=type_, status=status, reason=reason, message=message),
                                now=now)
        self.generation += changed
        return changed

    # -- views ------------------------------------------------------------------------------------------

    def observed(self) -> Workload:
        return Workload(conditions=tuple(self.conditions), active=self.active, queue_name=self.queue)

    def for_json(self) -> dict[str, Any]:
        return {"task": self.task, "attempt": self.attempt, "queue": self.queue, "priority": self.priority,
                "priorityClass": self.priority_class, "resources": self.resources, "order": self.order,
                "active": self.active, "admittedAt": time_out(self.admitted_at), "requeueAt": time_out(self.requeue_at),
                "requeueCount": self.requeue_count, "preemptedBy": self.preempted_by, "evictions": self.evictions,
                "finished": self.finished, "gpus": [list(n) for n in self.gpus],
                "perNode": self.per_node, "nodes": self.nodes, "leastNodes": self.least_nodes,
                "fullNodes": self.full_nodes, "resizedAt": time_out(self.resized_at),
                "cooldownSeconds": self.cooldown.total_seconds(),
                "conditions": [c.for_json() for c in self.conditions]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkloadTwin:
        return cls(task=d["task"], attempt=d["attempt"], queue=d["queue"], priority=d["priority"],
                   priority_class=d["priorityClass"], resources=d["resources"], order=d["order"],
                   active=d["active"], admitted_at=time_in(d.get("admittedAt")), requeue_at=time_in(d.get("requeueAt")),
                   requeue_count=d.get("requeueCount", 0), preempted_by=d.get("preemptedBy", ""),
                   evictions=d.get("evictions", {}), finished=d.get("finished", False),
                   gpus=tuple(tuple(int(g) for g in n) for n in d.get("gpus", [])),
                   # A Workload stored before elastic gangs: one unit of its whole request.
                   per_node=d["perNode"] if "perNode" in d else d["resources"], nodes=int(d.get("nodes", 1)),
                   least_nodes=int(d.get("leastNodes", 1)), full_nodes=int(d.get("fullNodes", 1)),
                   resized_at=time_in(d.get("resizedAt")),
                   cooldown=timedelta(seconds=float(d.get("cooldownSeconds", 300))),
                   conditions=[Condition.from_json(c) for c in d.get("conditions", [])])

    def summary(self) -> WorkloadView:
        """What `get` shows of it: name, admitted/active, and the conditions Kueue-style."""
        admitted = find_condition(self.conditions, kueue.ADMITTED)
        return {"name": self.name, "queue": self.queue, "clusterQueue": CLUSTER_QUEUE, "priority": self.priority,
                "active": self.active, "admitted": bool(admitted and admitted.is_true),
                "conditions": [c.for_json() for c in self.conditions]}

