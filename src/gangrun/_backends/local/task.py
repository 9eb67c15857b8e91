"""One task as the local control plane holds it: its spec, engine state, accounting and twins.

A `LocalTask` is a store row turned into values: the engine's `TaskState`, the `Accounting` folded
from its timeline, and the Workload twin and gang twin of its newest attempt. It is the local
counterpart of a ClusteredTask object with its status. `record()` is the one place a timeline event
is added, and the one place the accounting changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from gangrun._backends.local.config import Config, Paths
from gangrun._backends.local.gang import GangTwin
from gangrun._backends.local.store import Row
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core.accounting import Accounting
from gangrun._core.spec import TaskSpec, parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event
from gangrun._core.times import time_in, time_out
from gangrun._core.view import eviction_accounting, task_view


@dataclass(kw_only=True)
class LocalTask:
    name: str
    uid: str  # the task's identity, minted at submit: its logs, run files and checkpoints are keyed by it
    seq: int
    doc: dict[str, Any]  # {"manifest": the document as given, "source": its path, "cwd": the working dir}
    spec: TaskSpec
    state: TaskState
    acct: Accounting = field(default_factory=Accounting)
    workload: WorkloadTwin | None = None
    gang: GangTwin | None = None
    cancel_requested: bool = False  # the user asked; the next reconcile carries it out (as the annotation does)
    deleting: bool = False  # `delete --force`: removed once its workers are gone
    purging: bool = False  # `delete --purge`: its checkpoints are removed with it
    wake_at: datetime | None = None  # the engine asked to decide again by then
    events: list[Event] = field(default_factory=list)  # recorded, not yet persisted
    saved: tuple[Any, ...] = ()  # fingerprint() as last persisted

    @classmethod
    def from_row(cls, row: Row) -> LocalTask:
        """Raises SpecError, KeyError, ValueError or TypeError for a row that no longer reads."""
        if row.error:
            raise ValueError(row.error)
        spec = parse_manifest(row.spec["manifest"], source=row.spec.get("source", ""))
        if not spec.name:  # submitted with metadata.generateName: the row holds the name it was given
            spec = replace(spec, name=row.name)
        task = cls(name=row.name, uid=str(row.acct.get("uid") or ""), seq=row.seq, doc=row.spec, spec=spec,
                   state=TaskState.from_storage(row.state),
                   acct=Accounting.from_storage(row.acct.get("accounting")),
                   workload=WorkloadTwin.from_json(row.workload) if row.workload else None,
                   gang=GangTwin.from_json(row.gang) if row.gang else None,
                   cancel_requested=bool(row.acct.get("cancelRequested", False)),
                   deleting=bool(row.acct.get("deleting", False)), purging=bool(row.acct.get("purging", False)),
                   wake_at=time_in(row.acct.get("wakeAt")))
        task.saved = task.fingerprint()
        return task

    def to_row(self) -> Row:
        extra = {"uid": self.uid, "accounting": self.acct.for_storage(), "cancelRequested": self.cancel_requested,
                 "deleting": self.deleting, "purging": self.purging,
                 "wakeAt": time_out(self.wake_at)}
        return Row(name=self.name, seq=self.seq, spec=self.doc, state=self.state.for_storage(),
                   workload=self.workload.for_json() if self.workload else None,
                   gang=self.gang.for_json() if self.gang else None, acct=extra)

    @property
    def terminal(self) -> bool:
        return self.state.phase.terminal

    def record(self, event: Event) -> None:
        self.events.append(event)
        self.acct = self.acct.apply(event)

    def fingerprint(self) -> tuple[Any, ...]:
        """Changes whenever something worth persisting changed (the twins count their own changes)."""
        g, wl = self.gang, self.workload
        return (self.state, self.acct, self.cancel_requested, self.deleting, self.purging, self.wake_at,
                (g.attempt, g.generation) if g else None, (wl.attempt, wl.generation) if wl else None)

    @property
    def dirty(self) -> bool:
        return bool(self.events) or self.fingerprint() != self.saved


def view(task: LocalTask, config: Config, paths: Paths, *, now: datetime,
         queue_position: int | None = None) -> dict[str, Any]:
    """The `get -o json` document: the engine's view plus the local backend's facts."""
    g, wl, spec = task.gang, task.workload, task.spec
    pc = spec.priority_class or config.default_priority_class
    causes, waited = eviction_accounting(task.state, now=now)
    extra: dict[str, Any] = {
        "backend": "local",
        "queue": spec.queue,
        "priorityClass": pc,
        "priority": config.priority_classes.get(pc),
        "nodes": spec.nodes,
        "nprocPerNode": spec.nproc_per_node,
        "worldSize": spec.world_size,
        "queuePosition": queue_position,
        "pending": pending_message(task),
        "workload": wl.summary() if wl else None,
        "gang": None if g is None else {
            "name": g.name, "attempt": g.attempt, "suspended": g.suspended, "restarts": g.restarts,
            "workers": [{"rank": w.rank, "node": w.node, "pid": w.pid, "running": w.running,
                         "exitCode": w.exit_code} for w in g.workers]},
        "uid": task.uid,
        "checkpointRoot": paths.checkpoint_root(task.name, task.uid, spec.checkpoint_uri),
        "resumeFrom": spec.resume_from or None,
        "logs": str(paths.logs(task.name, task.uid)),
        "accounting": {**task.acct.view(now=now), "preemptionsByCause": causes,
                       "waitingForReadmissionSeconds": waited},
    }
    return task_view(task.name, task.state, now=now, extra=extra, policy=spec.policy())


def pending_message(task: LocalTask) -> str | None:
    """Why the current attempt's Workload waits for quota (Kueue's QuotaReserved=False message), or None."""
    wl = task.workload
    if wl is None or task.terminal or wl.reserved or wl.finished or wl.attempt != task.state.attempt:
        return None
    return wl.pending_message or None


def log_files(paths: Paths, task: str, identity: str, attempt: int,
              rank: int | None) -> list[tuple[int, int, Path]]:
    """(restart, rank, path) of an attempt's worker logs, in restart then rank order."""
    out = []
    base = paths.logs(task, identity, attempt)
    for d in base.glob("restart-*"):
        for f in d.glob("rank-*.log"):
            r = int(f.stem.split("-")[1])
            if rank is None or r == rank:
                out.append((int(d.name.split("-")[1]), r, f))
    return sorted(out)
