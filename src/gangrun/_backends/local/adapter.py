"""The local twins as the engine sees them: the counterpart of the Kubernetes backend's adapter."""

from __future__ import annotations

from dataclasses import replace

from gangrun._backends.local.gang import GangTwin
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core.observation import Observation, observed


def observe(attempt: int, gang: GangTwin | None, workload: WorkloadTwin | None) -> Observation:
    """The observation of `attempt`: its gang unless that is gone (deleted, or lost with a daemon, which
    the observation names)."""
    mine = gang is not None and gang.attempt == attempt
    g = gang.observe() if gang is not None and mine and not gang.lost and not gang.deleted else None
    wl = workload.observed() if workload is not None and workload.attempt == attempt else None
    obs = observed(g, wl)
    return replace(obs, gang_gone=gang.lost_why) if gang is not None and mine and gang.lost else obs
