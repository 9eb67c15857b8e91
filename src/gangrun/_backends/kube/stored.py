"""What a ClusteredTask read from the API holds: its spec, typed, and what the controller stored in its
status (the engine state and the accounting), for every reader of a task on the cluster.

    task_spec(task) -> TaskSpec          the one loader of a task's spec (SpecError when gangrun refuses it)
    spec_or_none(task) -> TaskSpec | None  the same, None for a spec gangrun refuses
    persisted(task) -> status | None     the status the controller wrote; None for a task it has not seen
    load_state / load_accounting         the state and the accounting stored there, or fresh ones
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gangrun._backends.kube import crd
from gangrun._backends.kube.render import check_renderable
from gangrun._core.accounting import Accounting
from gangrun._core.spec import TaskSpec, parse_manifest
from gangrun._core.state import TaskState
from gangrun._errors import SpecError

# metadata keys parse_manifest knows; the API server adds others (finalizers, ownerReferences, ...).
_MANIFEST_METADATA = ("name", "namespace", "labels", "annotations")


def task_spec(task: dict[str, Any]) -> TaskSpec:
    """The TaskSpec of a ClusteredTask object read from the API, one a JobSet can be rendered from.
    Raises SpecError."""
    meta = m if isinstance(m := task.get("metadata"), dict) else {}
    doc = {"apiVersion": crd.API_VERSION, "kind": crd.KIND, "spec": task.get("spec"),
           "metadata": {k: meta[k] for k in _MANIFEST_METADATA if k in meta}}
    spec = parse_manifest(doc)
    check_renderable(spec)
    return spec


def spec_or_none(task: dict[str, Any]) -> TaskSpec | None:
    """The TaskSpec, or None for a spec gangrun refuses (the controller fails such a task: InvalidSpec)."""
    try:
        return task_spec(task)
    except SpecError:
        return None


def persisted(task: dict[str, Any]) -> dict[str, Any] | None:
    """The status the controller wrote, or None for a task it has not seen yet."""
    status = task.get("status")
    return status if isinstance(status, dict) and status.get("phase") else None


def load_state(task: dict[str, Any], *, now: datetime) -> TaskState:
    """The persisted state, or a fresh one (attempt 1) for a task the controller has not seen."""
    status = persisted(task)
    return TaskState.from_storage(status) if status is not None else TaskState.new(now=now)


def load_accounting(task: dict[str, Any]) -> Accounting:
    """The accounting folded from the task's timeline so far (empty for a task not seen yet)."""
    stored = (persisted(task) or {}).get("accounting")
    return Accounting.from_storage(stored if isinstance(stored, dict) else None)
