"""Worker pods that went away still saying something a sync needs, kept from their DELETED event until
the task's status holds it: a worker's newest checkpoint or first step in its termination message, a
DisruptionTarget condition. Without them a pod deleted between two syncs would take its news along.

    Tombstones.keep(key, pod)     a pod gone, if it says something
    Tombstones.of(key)            pod name -> its last state, for the task's next sync
    Tombstones.forget(key, task)  drop what the task's status now holds

Shared by the informer's thread and the sync workers, behind one lock.
"""

from __future__ import annotations

import threading
from typing import Any

from gangrun._backends.kube import adapter, fields, reports, seen_events
from gangrun._backends.kube.informer import Key, key_of
from gangrun._backends.kube.stored import load_accounting
from gangrun._core.phases import TERMINAL


class Tombstones:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[Key, dict[str, dict[str, Any]]] = {}  # task -> pod name -> its last state

    def __len__(self) -> int:
        """The tasks with pods kept."""
        with self._lock:
            return len(self._pods)

    def keep(self, key: Key, pod: dict[str, Any]) -> None:
        if _worth_keeping(pod):
            with self._lock:
                self._pods.setdefault(key, {})[key_of(pod)[1]] = pod

    def of(self, key: Key) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._pods.get(key, {}))

    def forget(self, key: Key, task: dict[str, Any]) -> None:
        """Drop the pods whose news the task's status now holds, and those of attempts it has left."""
        status = s if isinstance(s := task.get("status"), dict) else {}
        with self._lock:
            kept = {n: p for n, p in self._pods.get(key, {}).items() if not _told(p, status)}
            if kept:
                self._pods[key] = kept
            else:
                self._pods.pop(key, None)


def _worth_keeping(pod: dict[str, Any]) -> bool:
    """Whether a deleted pod still says something a sync needs: a checkpoint, a first step after a load,
    or a node disruption."""
    return (bool(reports.checkpoints([pod])) or bool(reports.first_steps([pod]))
            or adapter.disruption({}, [pod]) is not None)


def _told(pod: dict[str, Any], status: dict[str, Any]) -> bool:
    """Whether the status already holds what a deleted pod said (or the task has left its attempt).

    A disruption is in the status only once the gang restarted for it, which may be several syncs
    after its pod went; a checkpoint once the accounting has it (or a newer one); a first step once
    it would change nothing.
    """
    attempt, current = adapter.attempt_of(pod), status.get("attempt", 1)
    if not isinstance(attempt, int) or attempt > current or status.get("phase") in TERMINAL:
        return True
    if attempt < current:  # an ended attempt's worker: only its newest checkpoint still matters
        return _commits_told(pod, status)
    d = adapter.disruption({}, [pod])
    if d is not None and not any(isinstance(r, dict) and r.get("worker") == d.worker
                                 for r in status.get("disruptions") or []):
        return False
    steps = [s for _, s in reports.first_steps([pod])]
    if steps and seen_events.first_step_events(load_accounting({"status": status}), steps, attempt=current,
                                   now=max(s["time"] for s in steps)):
        return False
    return _commits_told(pod, status)


def _commits_told(pod: dict[str, Any], status: dict[str, Any]) -> bool:
    commits = reports.checkpoints([pod])
    newest = fields.parse_time(((status.get("accounting") or {}).get("lastCheckpoint") or {}).get("at"))
    return not commits or (newest is not None and all(c.at <= newest for c in commits))
