"""Why a task's gang waits, read from Kueue: the pending Workload's message and its queue position.

Pure readers of plain dicts (the Workload, and the visibility API's PendingWorkloadsSummary); the
backend fetches them only while a task waits for admission or re-admission. Kueue answers "why is my
job pending" in the Workload's `QuotaReserved=False` condition (e.g. `couldn't assign flavors to pod
set workers: insufficient unused quota for cpu in flavor default, 4 more needed`), and "where is it
in the queue" through its visibility API, when that is enabled.
"""

from __future__ import annotations

from typing import Any

from gangrun._backends.kube.fields import conditions
from gangrun._core import kueue


def pending_message(workload: Any) -> str | None:
    """The Workload's `QuotaReserved=False` message (why Kueue has not admitted it), or None."""
    for c in conditions(workload):
        if c.type == kueue.QUOTA_RESERVED:
            return c.message or None if c.status == "False" else None
    return None


def queue_position(summary: Any, workload_name: str) -> int | None:
    """The 1-based position of `workload_name` among its LocalQueue's pending Workloads, or None."""
    items = summary.get("items") if isinstance(summary, dict) else None
    for item in items if isinstance(items, list) else []:
        md = item.get("metadata") if isinstance(item, dict) else None
        if isinstance(md, dict) and md.get("name") == workload_name:
            position = item.get(kueue.POSITION_IN_LOCAL_QUEUE)
            return position + 1 if isinstance(position, int) and not isinstance(position, bool) else None
    return None
