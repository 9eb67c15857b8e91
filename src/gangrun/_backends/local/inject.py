"""Evictions injected on purpose (B6): what Kueue, or a drained node, would do to an admitted gang.

`gangrun local evict NAME --reason R` writes R into the gang's Workload twin exactly as Kueue writes
it (the engine then classifies it as on a cluster); for `NodeDisruption` it kills one node's workers at
once, as a node lost without warning kills its pods; for `NodeMaintenance` it tells every worker that
one node is about to go (the stop notice), and the gang saves and restarts, charged to nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gangrun._backends.local.config import CQ_PATH, NAMESPACE
from gangrun._backends.local.gang import DISRUPTION_REASON, Effect, GangTwin
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core import kueue, stop_causes
from gangrun._errors import UsageError

NODE_DISRUPTION, NODE_MAINTENANCE = stop_causes.NODE_DISRUPTION, stop_causes.NODE_MAINTENANCE
REASONS = (kueue.EVICTED_BY_PREEMPTION, kueue.EVICTED_BY_PODS_READY_TIMEOUT, kueue.EVICTED_DUE_TO_NODE_FAILURES,
           NODE_DISRUPTION, NODE_MAINTENANCE)


def inject(reason: str, wl: WorkloadTwin, gang: GangTwin | None, *, nodes: int, grace: timedelta,
           now: datetime) -> list[Effect]:
    """Evict the admitted gang of `wl` for `reason`. Raises UsageError for an unknown reason."""
    if reason not in REASONS:
        raise UsageError(f"unknown eviction reason {reason!r}; use one of {', '.join(REASONS)}")
    if reason in (NODE_DISRUPTION, NODE_MAINTENANCE):
        if gang is None or not gang.live:
            raise UsageError(f'task "{wl.task}" has no running workers to lose')
        node = max(w.node for w in gang.live)
        if reason == NODE_MAINTENANCE:
            return gang.drain(node, why="cordoned for maintenance (gangrun local evict)", grace=grace, now=now)
        return gang.disrupt(node, reason=DISRUPTION_REASON,
                            message=f"Eviction API: evicting (node local-node-{node} is being drained)", now=now)
    if reason == kueue.EVICTED_BY_PREEMPTION:
        msg = kueue.preemption_message(workload_uid="gangrun-local-evict", job_uid="gangrun-local-evict",
                                       reason=kueue.IN_CLUSTER_QUEUE, preemptor_path=CQ_PATH, preemptee_path=CQ_PATH)
        wl.evict(reason, msg, now=now, preempted_reason=kueue.IN_CLUSTER_QUEUE, preemptor="(injected)")
    elif reason == kueue.EVICTED_BY_PODS_READY_TIMEOUT:
        wl.evict(reason, kueue.pods_ready_timeout_message(NAMESPACE, wl.name), now=now)
    else:
        wl.evict(reason, kueue.node_failures_message(", ".join(f"local-node-{i}" for i in range(nodes))), now=now)
    return []
