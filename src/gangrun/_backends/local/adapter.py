"""The local twins as the engine sees them: the counterpart of the Kubernetes backend's adapter."""

from __future__ import annotations

from gangrun._backends.local.gang import GangTwin
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core.observation import Observation, observed


def observe(attempt: int, gang: GangTwin | None, workload: WorkloadTwin | None) -> Observation:
    """The observation of `attempt`: its gang unless that is gone (deleted, or lost with a daemon)."""
    g = gang.observe() if gang is not None and gang.attempt == attempt and not gang.lost and not gang.deleted else None
    wl = workload.observed() if workload is not None and workload.attempt == attempt else None
    return observed(g, wl)
