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

from gangrun._backends.local import gang_storage
from gangrun._backends.local.config import Config, Paths
from gangrun._backends.local.gang import GangTwin
from gangrun._backends.local.store import Row
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core import lifecycle
from gangrun._core.accounting import Accounting
from gangrun._core.spec import TaskSpec, parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from gangrun._core.times import time_in, time_out
from gangrun._core.view import accounting_view, eviction_accounting, spec_view, state_view
from gangrun._core.view_types import LocalView, ResumeFromResult, UnreadableView
from gangrun._core.worker_reports import resume_result
from gangrun._errors import GangrunError


@dataclass(kw_only=True)
class LocalTask:
    name: str
    uid: str  # the task's identity, minted at submit: its logs, run files and checkpoints are keyed by it
    seq: int
    # {"manifest": the document as given, "source": its path, "cwd": the working dir, "env": the submitter's
    # environment, "executable": the command's argv[0] resolved on its PATH} (no "env": an older gangrun's task)
    doc: dict[str, Any]
    spec: TaskSpec
    state: TaskState
    acct: Accounting = field(default_factory=Accounting)
    workload: WorkloadTwin | None = None
    gang: GangTwin | None = None
    cancel_requested: bool = False  # the user asked; the next reconcile carries it out (as the annotation does)
    deleting: bool = False  # `delete --force`: removed once its workers are gone
    purging: bool = False  # `delete --purge`: its checkpoints are removed with it
    wake_at: datetime | None = None  # the engine asked to decide again by then
    # What spec.checkpoint.resumeFrom gave the newest load that used it: {"found", "uri", "step"}; None: not yet.
    resumed: ResumeFromResult | None = None
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
                   gang=gang_storage.load(row.gang) if row.gang else None,
                   cancel_requested=bool(row.acct.get("cancelRequested", False)),
                   deleting=bool(row.acct.get("deleting", False)), purging=bool(row.acct.get("purging", False)),
                   wake_at=time_in(row.acct.get("wakeAt")), resumed=row.acct.get("resumed"))
        task.saved = task.fingerprint()
        return task

    def to_row(self) -> Row:
        extra = {"uid": self.uid, "accounting": self.acct.for_storage(), "cancelRequested": self.cancel_requested,
                 "deleting": self.deleting, "purging": self.purging,
                 "wakeAt": time_out(self.wake_at), "resumed": self.resumed}
        return Row(name=self.name, seq=self.seq, spec=self.doc, state=self.state.for_storage(),
                   workload=self.workload.for_json() if self.workload else None,
                   gang=gang_storage.dump(self.gang) if self.gang else None, acct=extra)

    @property
    def terminal(self) -> bool:
        return self.state.phase.terminal

    def record(self, event: Event) -> None:
        self.events.append(event)
        self.acct, warnings = lifecycle.fold(self.acct, [event], grace_seconds=self.grace_seconds)
        self.events += warnings
        if event.type in (EventType.RESUMED_FROM, EventType.RESUME_FOUND_NOTHING):
            self.resumed = resume_result(event)

    @property
    def grace_seconds(self) -> float:
        """How long the workers have between SIGTERM and SIGKILL (the local stop deadline)."""
        return self.spec.termination_grace.total_seconds()

    def fingerprint(self) -> tuple[Any, ...]:
        """Changes whenever something worth persisting changed (the twins count their own changes)."""
        g, wl = self.gang, self.workload
        return (self.state, self.acct, self.cancel_requested, self.deleting, self.purging, self.wake_at, self.resumed,
                (g.attempt, g.generation) if g else None, (wl.attempt, wl.generation) if wl else None)

    @property
    def dirty(self) -> bool:
        return bool(self.events) or self.fingerprint() != self.saved


def view(task: LocalTask, config: Config, paths: Paths, *, now: datetime,
         queue_position: int | None = None) -> LocalView:
    """The `get -o json` document: the engine's view plus the local backend's facts."""
    g, wl, spec = task.gang, task.workload, task.spec
    causes, waited = eviction_accounting(task.state, now=now)
    shown = spec_view(spec, default_priority_class=config.default_priority_class)
    return {
        **state_view(task.name, task.state, now=now, policy=spec.policy()),
        "backend": "local",
        **shown,
        "priority": None if (cls := shown["priorityClass"]) is None else config.priority_classes.get(cls),
        "runningNodes": len({w.node for w in g.live}) if g is not None and g.attempt == task.state.attempt else 0,
        "queuePosition": queue_position,
        "pending": pending_message(task),
        "workload": wl.summary() if wl else None,
        "gang": None if g is None else {
            "name": g.name, "attempt": g.attempt, "suspended": g.suspended, "restarts": g.restarts,
            "nodes": g.size, "resizes": g.resizes,
            "workers": [{"rank": w.rank, "node": w.node, "pid": w.pid, "running": w.running,
                         "exitCode": w.exit_code} for w in g.workers]},
        "executable": task.doc.get("executable"),
        "uid": task.uid,
        "checkpointRoot": paths.checkpoint_root(task.name, task.uid, spec.checkpoint_uri),
        "resumeFromResult": task.resumed,
        "logs": str(paths.logs(task.name, task.uid)),
        "accounting": accounting_view(task.acct, grace_seconds=task.grace_seconds, now=now,
                                      preemptions=causes, waited=waited),
    }


UNREADABLE = "Unreadable"  # the phase shown for a stored task whose record no longer reads
NO_LONGER_READS = "its stored record no longer reads: "


def read_rows(rows: list[Row]) -> tuple[list[LocalTask], dict[str, str]]:
    """The rows as tasks, in order, and the rows that no longer read (name → why): never dropped silently."""
    tasks: list[LocalTask] = []
    broken: dict[str, str] = {}
    for row in rows:
        try:
            tasks.append(LocalTask.from_row(row))
        except (GangrunError, KeyError, ValueError, TypeError, AttributeError) as e:
            broken[row.name] = NO_LONGER_READS + (
                str(e) if isinstance(e, GangrunError) else f"{type(e).__name__}: {e}")
    return tasks, broken


def unreadable_view(name: str, why: str) -> UnreadableView:
    """A task whose record no longer reads, as the task list shows it: its name, why, and the way out."""
    return {"name": name, "backend": "local", "phase": UNREADABLE, "phaseVersion": 0, "attempt": 0,
            "reason": f"{why.removeprefix(NO_LONGER_READS)}; `gangrun delete {name}` removes it", "unreadable": why,
            "attempts": []}


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
