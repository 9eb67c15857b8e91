"""Who preempted a gang on Kubernetes, named on its timeline as the local backend names it.

Kueue's preemption message names the preemptor only by UIDs (`Preempted to accommodate a workload
(UID: …, JobUID: …) due to …`). The JobUID is the preemptor's job: when it is a JobSet gangrun made,
its task label names the task (`preempted by task urgent`); otherwise the preemptor's Workload names
its owner (`preempted by JobSet other`, `preempted by Job other`). A preemptor that is already gone
from the controller's caches leaves the event as Kueue worded it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from gangrun._backends.kube import adapter, crd, fields
from gangrun._core import kueue
from gangrun._core.actions import RecordEvent
from gangrun._core.conditions import find_condition
from gangrun._core.timeline import EventType

Lookup = Callable[[str], list[dict[str, Any]]]  # objects by UID (JobSets) or by job UID (Workloads)


def preemptor_uid(workloads: Iterable[dict[str, Any]]) -> str:
    """The JobUID of what preempted the gang, from the Workload's Evicted=True/Preempted condition."""
    wl = adapter.newest_workload(list(workloads))
    ev = find_condition(fields.conditions(wl), kueue.EVICTED) if wl is not None else None
    if ev is None or ev.status != "True" or ev.reason != kueue.EVICTED_BY_PREEMPTION:
        return ""
    return kueue.preemptor_job_uid(ev.message)


def describe(job_uid: str, *, jobsets_by_uid: Lookup, workloads_by_job_uid: Lookup) -> tuple[str, str]:
    """(the word for it, its name): ("task", "urgent") for a gangrun task, ("JobSet", "x") or ("Job", "x")
    for another job Kueue admitted, ("", "") when it cannot be told."""
    if not job_uid:
        return "", ""
    for js in jobsets_by_uid(job_uid):
        task = fields.labels(js).get(crd.TASK_LABEL)
        if task:
            return "task", task
    for wl in workloads_by_job_uid(job_uid):
        for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") and ref.get("name"):
                return str(ref["kind"]), str(ref["name"])
        name = (wl.get("metadata") or {}).get("name")
        if name:
            return "Workload", str(name)
    return "", ""


def named(actions: list[Any], kind: str, name: str) -> list[Any]:
    """The actions with each Preempted event naming the preemptor (message and `data["preemptor"]`,
    which the web page draws as "preempted by NAME"); unchanged when it is not known."""
    if not name:
        return actions
    out: list[Any] = []
    for a in actions:
        if isinstance(a, RecordEvent) and a.event.type is EventType.PREEMPTED and "preemptor" not in a.event.data:
            e = a.event
            a = replace(a, event=replace(e, message=f"preempted by {kind} {name}; {e.message}",
                                         data={**e.data, "preemptor": name}))
        out.append(a)
    return out


def name_in(actions: list[Any], workloads: Iterable[dict[str, Any]], *, jobsets_by_uid: Lookup,
            workloads_by_job_uid: Lookup) -> list[Any]:
    """`named(actions, …)` with the preemptor read from the gang's Workloads; looked up only when a
    Preempted event is among the actions."""
    if not any(isinstance(a, RecordEvent) and a.event.type is EventType.PREEMPTED for a in actions):
        return actions
    kind, name = describe(preemptor_uid(workloads), jobsets_by_uid=jobsets_by_uid,
                          workloads_by_job_uid=workloads_by_job_uid)
    return named(actions, kind, name)
