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
from typing import Any

from gangrun._backends.local import admission
from gangrun._backends.local.admission import Request, Resources
from gangrun._backends.local.config import CLUSTER_QUEUE, CQ_PATH
from gangrun._backends.local.task import LocalTask
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core import elastic, gpus, kueue
from gangrun._core.priority_boost import BoostPolicy, task_boost
from gangrun._core.timeline import Event, EventType


def schedule(tasks: Mapping[str, LocalTask], quota: Resources, *, now: datetime,
             boost: BoostPolicy | None = None) -> set[str]:
    admitted, pending = _requests(tasks.values(), now=now, boost=boost)
    if not pending and not any(a.may_grow for a in admitted):
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
        size = plan.sizes.get(name, wl.full_nodes)
        held[name] = gpus.allocate(int(quota.gpu), held, nodes=size, per_node=t.spec.resources.gpu)
        wl.reserve(now=now, gpus=held[name] if t.spec.resources.gpu else (), nodes=size)
        at = f" on {size} of {wl.full_nodes} nodes (what fits now)" if size < wl.full_nodes else ""
        t.record(Event(time=now, type=EventType.ADMITTED, attempt=wl.attempt,
                       message=f"admitted by ClusterQueue {CLUSTER_QUEUE} (queue {wl.queue}, "
                               f"priority {wl.priority_class} = {wl.priority}){at}",
                       data={"nodes": size, "of": wl.full_nodes}))
        touched.add(name)
    for name, size in plan.grow:
        t = tasks[name]
        wl = t.workload
        assert wl is not None, "grown from its reserved Workload"
        others = {n: a for n, a in held.items() if n != name}
        wl.grow(size, now=now, gpus=gpus.allocate(int(quota.gpu), others, nodes=size, per_node=t.spec.resources.gpu)
                if t.spec.resources.gpu else ())
        held[name] = wl.gpus
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
    return {t.name: task_boost(policy, t.state, t.acct, nodes=t.workload.nodes if t.workload.elastic else t.spec.nodes,
                               now=now,
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
        size = _size(wl, now=now, running=g is not None and g.up and not t.terminal)
        if wl.reserved:
            deleting = g is not None and (g.deleted or g.lost)
            admitted.append(Request(name=t.name, priority=wl.priority, order=wl.order, resources=res,
                                    admitted_at=wl.admitted_at.timestamp() if wl.admitted_at else 0.0,
                                    evicting=wl.evicted is not None or deleting, boost=extra.get(t.name, 0), **size))
        elif (not t.terminal and wl.attempt == t.state.attempt and wl.pending(now)
              and g is not None and not g.live and g.stopping is None and not g.lost):
            pending.append(Request(name=t.name, priority=wl.priority, order=wl.order, resources=res,
                                   boost=extra.get(t.name, 0), **size))
    return admitted, pending


def _size(wl: WorkloadTwin, *, now: datetime, running: bool) -> dict[str, Any]:
    """An elastic gang's part of its request: its size and range, and whether it may grow now."""
    if not wl.elastic:
        return {}
    return {"per_node": Resources.from_json(wl.per_node), "nodes": wl.nodes, "least_nodes": wl.least_nodes,
            "full_nodes": wl.full_nodes,
            "may_grow": running and wl.nodes < wl.full_nodes and wl.evicted is None
                        and elastic.cooldown_over(wl.resized_at, wl.cooldown, now)}


def may_grow_at(tasks: Iterable[LocalTask]) -> list[datetime]:
    """When elastic gangs running small may next grow: the scheduler must look again then."""
    return [wl.resized_at + wl.cooldown for t in tasks if (wl := t.workload) is not None and wl.elastic
            and wl.reserved and wl.nodes < wl.full_nodes and wl.resized_at is not None]
