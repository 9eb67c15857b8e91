"""The Kueue queues an elastic gang is sized from, watched into caches: the edge of `elastic.py`.

A task names a LocalQueue (`spec.queue`), which names its ClusterQueue; `capacity(task, ...)` reads that
ClusterQueue's free nominal quota (`quota.capacity`) and whether another workload waits for it: a
pending Workload in the same ClusterQueue, not one of the task's own, with a priority at least the
gang's. Workloads the controller cannot see (it watches one namespace, the ClusterQueue serves many)
count as waiting when the ClusterQueue's `status.pendingWorkloads` says there are more than it sees,
so a gang never grows into quota someone it cannot see is waiting for.

Without the right to read queues (403) or without Kueue, the capacity is unknown and elastic gangs
run at their full size, as rigid gangs do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from gangrun._backends.kube import adapter, fields, quota
from gangrun._backends.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, KubeApi
from gangrun._backends.kube.informer import Informer
from gangrun._backends.kube.quota import Capacity
from gangrun._core import kueue
from gangrun._core.conditions import find_condition

log = logging.getLogger(__name__)
RBAC_HINT = ("the controller may not read Kueue LocalQueues or ClusterQueues (403); elastic gangs run at their "
             "full size. Grant list/watch on localqueues and clusterqueues.kueue.x-k8s.io (see deploy/rbac.yaml)")


class Queues:
    def __init__(self, api: KubeApi, *, namespace: str | None, on_change: Callable[[dict[str, Any]], None]) -> None:
        self.local = Informer(api, LOCAL_QUEUES, namespace=namespace, on_change=on_change)
        self.cluster = Informer(api, CLUSTER_QUEUES, namespace=None, on_change=on_change)
        self.informers = (self.local, self.cluster)
        self._hinted = False

    def cluster_queue_of(self, namespace: str, local_queue: str) -> str:
        lq = self.local.get((namespace, local_queue))
        name = ((lq or {}).get("spec") or {}).get("clusterQueue")
        return name if isinstance(name, str) else ""

    def capacity(self, namespace: str, local_queue: str, *, workloads: Iterable[dict[str, Any]],
                 own_jobs: set[str], priority: int | None) -> Capacity | None:
        """The free quota of the task's ClusterQueue; `workloads`: those the controller sees, `own_jobs`:
        the UIDs of the task's JobSets (their Workloads are the gang's own), `priority`: the gang's."""
        if self.local.forbidden or self.cluster.forbidden:
            if not self._hinted:
                self._hinted = True
                log.warning(RBAC_HINT)
            return None
        name = self.cluster_queue_of(namespace, local_queue)
        cq = self.cluster.get(("", name)) if name else None
        if cq is None:
            return None
        mine = [w for w in workloads if self.cluster_queue_of(_namespace(w), _queue(w)) == name]
        return quota.capacity(cq, contended=contended(cq, mine, own_jobs=own_jobs, priority=priority))


def contended(cq: dict[str, Any], workloads: Iterable[dict[str, Any]], *, own_jobs: set[str],
              priority: int | None) -> bool:
    """Whether a pending workload of ClusterQueue `cq` (`workloads`: those seen in it), not the gang's own,
    needs quota before the gang may grow: one of equal or higher priority (any, when the gang's is not
    known), or one the controller cannot see (`status.pendingWorkloads` counts more than it sees)."""
    waiting = [w for w in workloads if _pending(w)]
    if _int((cq.get("status") or {}).get("pendingWorkloads")) > len(waiting):
        return True
    return any(priority is None or _int((w.get("spec") or {}).get("priority")) >= priority
               for w in waiting if adapter.workload_job_uid(w) not in own_jobs)


def priority_of(workload: dict[str, Any] | None) -> int | None:
    """A Workload's priority (`spec.priority`), None when it has none to read."""
    v = ((workload or {}).get("spec") or {}).get("priority")
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _pending(w: dict[str, Any]) -> bool:
    """Waiting for quota: active, not finished, no quota reserved."""
    if ((w.get("spec") or {}).get("active")) is False:
        return False
    conds = fields.conditions(w)
    return not any((c := find_condition(conds, t)) is not None and c.is_true
                   for t in (kueue.QUOTA_RESERVED, kueue.FINISHED))


def _namespace(w: dict[str, Any]) -> str:
    v = (w.get("metadata") or {}).get("namespace")
    return v if isinstance(v, str) else ""


def _queue(w: dict[str, Any]) -> str:
    v = (w.get("spec") or {}).get("queueName")
    return v if isinstance(v, str) else ""


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0
