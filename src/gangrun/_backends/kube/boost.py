"""Checkpoint-aware preemption on Kueue: keep each gang's Workload annotated with its priority boost.

    desired(policy, task, spec, workload, now=) -> Boost | None   pure: what the annotation should say
    patch(value) -> the merge patch that says it
    Booster.keep(policy, key, task, spec, lookup, now=)          a sync's last step: write it when it differs

The value is `gangrun._core.priority_boost.task_boost` of the task as its status holds it (its
engine state and accounting): work at risk since the newest checkpoint the workers reported, and
the preemptions it went through. Kueue reads `kueue.x-k8s.io/priority-boost` only with its
`PriorityBoost` feature gate on; the controller writes it only with `gangrun controller
--priority-boost`, and only when the value changes (the boost is quantised, so that is at a
checkpoint or when unsaved work crosses a step, never on every sync).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from gangrun._backends.kube import adapter, fields
from gangrun._backends.kube.adapter import WorkloadLookup
from gangrun._backends.kube.client import WORKLOADS, KubeApi
from gangrun._backends.kube.informer import Informer, Key
from gangrun._backends.kube.stored import load_accounting, load_state, persisted
from gangrun._backends.kube.workqueue import WorkQueue
from gangrun._core import kueue
from gangrun._core.observation import WorkloadRead
from gangrun._core.priority_boost import ANNOTATION, Boost, BoostPolicy, parse_annotation, task_boost
from gangrun._core.spec import TaskSpec
from gangrun._errors import ApiError, NotFound

log = logging.getLogger(__name__)
RBAC_HINT = ("the controller may not patch Kueue Workloads (403); --priority-boost has no effect. Grant "
             "patch on workloads.kueue.x-k8s.io (see deploy/rbac.yaml)")


def desired(policy: BoostPolicy, task: dict[str, Any], spec: TaskSpec, workload: dict[str, Any] | None, *,
            now: datetime) -> Boost | None:
    """The boost `workload` (the newest Workload of the task's current JobSet) should carry; None when it
    needs none: no Workload, a finished one, or a task the controller has not written yet."""
    if workload is None or persisted(task) is None:
        return None
    conds = {c.type: c for c in fields.conditions(workload)}
    finished = conds.get(kueue.FINISHED)
    if finished is not None and finished.is_true:
        return None
    reserved, evicted = conds.get(kueue.QUOTA_RESERVED), conds.get(kueue.EVICTED)
    # Evicted and still holding quota counts as waiting already: its gang is stopping, nothing left at risk.
    return task_boost(policy, load_state(task, now=now), load_accounting(task),
                      admitted=reserved is not None and reserved.is_true and not (evicted and evicted.is_true),
                      nodes=spec.nodes, now=now)


def current(workload: dict[str, Any]) -> int | None:
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    return parse_annotation(annotations.get(ANNOTATION))


def patch(value: int) -> dict[str, Any]:
    return {"metadata": {"annotations": {ANNOTATION: str(value)}}}


class Booster:
    """Keeps each task's Workload annotated with its boost, through the controller's API client, Workload
    cache and work queue."""

    def __init__(self, api: KubeApi, workloads: Informer, queue: WorkQueue[Key]) -> None:
        self.api, self.workloads, self.queue = api, workloads, queue
        self._hinted = False

    def keep(self, policy: BoostPolicy, key: Key, task: dict[str, Any], spec: TaskSpec, lookup: WorkloadLookup, *,
             now: datetime) -> None:
        """Write the task's priority boost onto its Workload when it differs; come back when it would step up."""
        wl = adapter.newest_workload(lookup.items) if lookup.read is WorkloadRead.FOUND else None
        want = desired(policy, task, spec, wl, now=now)
        if wl is None or want is None:
            return
        if current(wl) != want.value:
            name = (wl.get("metadata") or {}).get("name", "")
            try:
                updated = self.api.patch(WORKLOADS, key[0], name, patch(want.value))
            except NotFound:
                return
            except ApiError as e:
                if e.status != 403:
                    raise
                if not self._hinted:
                    self._hinted = True
                    log.warning(RBAC_HINT)
                return
            if isinstance(updated, dict):
                self.workloads.upsert(updated)
        if want.next_change_in is not None:
            self.queue.add_after(key, want.next_change_in)
