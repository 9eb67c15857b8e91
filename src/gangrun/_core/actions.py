"""Actions both backends' pure reconciles return besides their gang's create and delete.

Each backend names its own `CreateJobSet`/`DeleteJobSet` (a JobSet object on Kubernetes, a process
gang locally); these two mean the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gangrun._core.timeline import Event


@dataclass(frozen=True)
class RecordEvent:
    """Append `event` to the task's timeline (and fold it into its accounting)."""

    event: Event


@dataclass(frozen=True)
class RequeueAt:
    """Reconcile the task again by `at` even if nothing is observed (the engine's `wake_at`)."""

    at: datetime
