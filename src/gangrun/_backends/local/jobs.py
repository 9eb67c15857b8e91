"""Kueue's job reconciler on the local twins: a Workload's admission and eviction move its gang.

    sync(gang, workload, *, current, grace, backoff, now) -> [effect, ...]

On a cluster, Kueue's jobframework reconciler suspends a JobSet whose Workload is Evicted, releases
the quota once its pods are gone, unsuspends it once the Workload is admitted again and finishes the
Workload when the JobSet ends. Locally this function does the same to the twins, in Kueue's order
(see `workload.py` for W1–W8); it reads no clock and starts no process: the gang's effects are
returned for the shell to carry out.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gangrun._backends.local.gang import Effect, GangTwin
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core import elastic, jobset


def sync(gang: GangTwin | None, workload: WorkloadTwin | None, *, current: bool, grace: timedelta,
         backoff: timedelta, now: datetime) -> list[Effect]:
    """`current`: the gang belongs to the task's current attempt and the task has not ended."""
    if gang is None:
        return []
    effects = gang.kill_overdue(now=now)
    wl = workload
    if wl is not None and current and not gang.lost:
        ev = wl.evicted
        if wl.reserved and ev is not None and not gang.suspended:  # W2: stop the job
            effects += gang.suspend(cause=ev.reason, message=ev.message, grace=grace, now=now)
        elif (wl.reserved and ev is None and gang.suspended and gang.stopping is None
              and not (gang.completed or gang.failed)):  # W8: start the job (at the size admitted)
            effects += gang.resume(now=now, nodes=wl.nodes)
        elif wl.reserved and ev is None and not gang.suspended and wl.nodes != gang.nodes:  # elastic: grown
            why = elastic.resize_why(gang.nodes, wl.nodes, full=wl.full_nodes or wl.nodes, readmitted=False)
            effects += gang.resize(wl.nodes, grace=grace, now=now, message=elastic.resize_message(
                gang.nodes, wl.nodes, why))
        if not gang.suspended:
            wl.pods_ready(gang.up, recovering=gang.restarts > 0, now=now)
    if wl is not None and not wl.finished and not gang.live:
        if gang.completed or gang.failed or gang.deleted or gang.lost:
            message = jobset.MSG_COMPLETED if gang.completed else f"the gang {gang.name} ended or was deleted"
            wl.finish(succeeded=gang.completed, message=message, now=now)
        elif wl.reserved and wl.evicted is not None:  # W6: quota back, requeued as Kueue does
            wl.release(now=now, backoff_base=backoff)
    if wl is not None and not wl.reserved:
        wl.backoff_finished(now=now)
    return effects
