"""Kueue's scheduling cycle on the local twins: who holds quota, who waits, and `admission.plan` applied.

    schedule(tasks, quota, now=) -> names of the tasks whose Workload changed

The plan itself is pure (`admission.py`); this turns the Workload twins into its requests and writes
its answer back as Kueue would: an eviction for every victim (with who preempted it), a quota
reservation for every admitted gang, and for every gang left waiting the reason in its
`QuotaReserved=False/Pending` message. With a boost policy every request carries the gang's priority
boost (checkpoint-aware preemption), as Kueue reads it from the Workload's annotation.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from datetime import datetime

from gangrun._backends.local import admission
from gangrun._backends.local.admission import Request, Resources
from gangrun._backends.local.config import CLUSTER_QUEUE, CQ_PATH
from gangrun._backends.local.task import LocalTask
from gangrun._core import gpus, kueue
from gangrun._core.priority_boost import BoostPolicy, task_boost
from gangrun._core.timeline import Event, EventType


def schedule(tasks: Mapping[str, LocalTask], quota: Resources, *, now: datetime,
             boost: BoostPolicy | None = None) -> set[str]:
    admitted, pending = _requests(tasks.values(), now=now, boost=boost)
    if not pending:
        return set()
    plan = admission.plan(quota, admitted, pending)
    touched: set[str] = set()
    for victim, preemptor in plan.preempt:
        pr, wl = tasks[preemptor], tasks[victim].workload
        assert pr.workload is not None and pr.gang is not None and wl is not None, "both are in the plan"
        msg = kueue.preemption_message(workload_uid=pr.workload.uid, job_uid=pr.gang.name,
                                       reason=kueue.IN_CLUSTER_QUEUE, preemptor_path=CQ_PATH, preemptee_path=CQ_PATH)
        wl.evict(kueue.EVICTED_BY_PREEMPTION, msg, now=now, preempted_reason=kueue.IN_CLUSTER_QUEUE,
                 preemptor=preemptor)
        touched.add(victim)
    held: dict[Hashable, gpus.Assignment] = {
        n: t.workload.gpus for n, t in tasks.items() if t.workload is not None and t.workload.reserved}
    for name in plan.admit:
        t = tasks[name]
        wl = t.workload
        assert wl is not None, "admitted from its pending Workload"
        # Admission kept the gang within the GPU quota, so its GPUs are free (disjoint from every holder's).
        held[name] = gpus.allocate(int(quota.gpu), held, nodes=t.spec.nodes, per_node=t.spec.resources.gpu)
        wl.reserve(now=now, gpus=held[name] if t.spec.resources.gpu else ())
        t.record(Event(time=now, type=EventType.ADMITTED, attempt=wl.attempt,
                       message=f"admitted by ClusterQueue {CLUSTER_QUEUE} (queue {wl.queue}, "
                               f"priority {wl.priority_class} = {wl.priority})"))
        touched.add(name)
    for name, why in plan.waiting_reasons.items():
        wl = tasks[name].workload
        if wl is not None and wl.waiting(why, now=now):
            touched.add(name)
    return touched


def boosts(tasks: Iterable[LocalTask], policy: BoostPolicy | None, *, now: datetime) -> dict[str, int]:
    """The priority boost of every Workload that competes (holds quota or waits for it); {} when off."""
    if policy is None:
        return {}
    return {t.name: task_boost(policy, t.state, t.acct, nodes=t.spec.nodes, now=now,
                               admitted=t.workload.reserved and t.workload.evicted is None).value
            for t in tasks if t.workload is not None and not t.workload.finished}


def _requests(tasks: Iterable[LocalTask], *, now: datetime,
              boost: BoostPolicy | None) -> tuple[list[Request], list[Request]]:
    """(holding quota, waiting for it): every Workload that is not finished."""
    tasks = list(tasks)
    extra = boosts(tasks, boost, now=now)
    admitted, pending = [], []
    for t in tasks:
        wl, g = t.workload, t.gang
        if wl is None or wl.finished:
            continue
        res = Resources.from_json(wl.resources)
        if wl.reserved:
            deleting = g is not None and (g.deleted or g.lost)
            admitted.append(Request(name=t.name, priority=wl.priority, order=wl.order, resources=res,
                                    admitted_at=wl.admitted_at.timestamp() if wl.admitted_at else 0.0,
                                    evicting=wl.evicted is not None or deleting, boost=extra.get(t.name, 0)))
        elif (not t.terminal and wl.attempt == t.state.attempt and wl.pending(now)
              and g is not None and not g.live and g.stopping is None and not g.lost):
            pending.append(Request(name=t.name, priority=wl.priority, order=wl.order, resources=res,
                                   boost=extra.get(t.name, 0)))
    return admitted, pending
