"""One task as the daemon holds it in memory, its `get` view, and its accounting (B5).

A `TaskRecord` is a store row turned into objects: the spec, the engine's `TaskState`, the Workload
twin and the gang twin of the current attempt, and the accounting dict. The view functions work
on a record alone, so the daemon and a client reading the store without a daemon show the same.

Accounting, all in seconds:
- `queuedSeconds`: from each attempt's gang creation to its first quota reservation;
- `waitingForReadmissionSeconds`: between evictions and readmissions (from the engine's state);
- `gangUpSeconds`: while every worker of the gang was running;
- `workLost`: one entry per stop that threw work away (preemption, other eviction, restart,
  retry, cancel): the time since the newest committed checkpoint of the attempt, or since the
  workers came up if that is later;
- `goodput`: (gangUpSeconds − Σ workLost) / time since submission (until the task ended).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gangrun._backends.local.config import Config, Paths
from gangrun._backends.local.gang import GangTwin
from gangrun._backends.local.store import Row
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core.spec import TaskSpec, parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event
from gangrun._core.view import eviction_accounting, task_view


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@dataclass(kw_only=True)
class TaskRecord:
    name: str
    seq: int
    doc: dict[str, Any]  # {"manifest": raw document, "source": path, "cwd": absolute working dir}
    spec: TaskSpec
    state: TaskState
    workload: WorkloadTwin | None = None
    gang: GangTwin | None = None
    acct: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)  # not yet persisted
    wake_at: float | None = None  # the engine asked to decide again by then
    saved: str = ""  # the row as last written, to skip writes that change nothing

    @classmethod
    def from_row(cls, row: Row) -> TaskRecord:
        spec = parse_manifest(row.spec["manifest"], source=row.spec.get("source", ""))
        rec = cls(name=row.name, seq=row.seq, doc=row.spec, spec=spec, state=TaskState.from_storage(row.state),
                  workload=WorkloadTwin.from_json(row.workload) if row.workload else None,
                  gang=GangTwin.from_json(row.gang) if row.gang else None, acct=row.acct)
        rec.saved = repr(rec.to_row())
        return rec

    def to_row(self) -> Row:
        return Row(name=self.name, seq=self.seq, spec=self.doc, state=self.state.for_storage(),
                   workload=self.workload.for_json() if self.workload else None,
                   gang=self.gang.for_json() if self.gang else None, acct=self.acct)

    @property
    def terminal(self) -> bool:
        return self.state.phase.terminal

    def add(self, event: Event) -> None:
        self.events.append(event)

    # -- accounting ----------------------------------------------------------------------------------

    def note_up(self, now: float) -> None:
        """Open or close a 'whole gang running' period from the gang twin."""
        up = self.gang.up_since if self.gang is not None else None
        since = self.acct.get("upSince")
        if since is not None and up is None:
            self.acct["gangUpSeconds"] = self.acct.get("gangUpSeconds", 0.0) + max(0.0, now - since)
            self.acct["upSince"] = None
        elif up is not None and since is None:
            self.acct["upSince"] = up

    def note_lost(self, cause: str, now: float) -> float | None:
        """Record the work a stop throws away; call it before the gang stops. Returns the seconds."""
        g = self.gang
        if g is None or g.up_since is None:
            return None
        ckpt = self.acct.get("lastCheckpoint") or {}
        base = g.up_since
        if ckpt.get("attempt") == g.attempt and ckpt.get("time", 0) > base:
            base = ckpt["time"]
        lost = round(max(0.0, now - base), 3)
        self.acct.setdefault("workLost", []).append({"attempt": g.attempt, "cause": cause, "seconds": lost,
                                                     "at": utc(now).isoformat()})
        return lost

    def note_queued(self, now: float, *, admitted: bool) -> None:
        if admitted and self.acct.get("queuedSince") is not None:
            self.acct["queuedSeconds"] = self.acct.get("queuedSeconds", 0.0) + max(0.0, now - self.acct["queuedSince"])
            self.acct["queuedSince"] = None
        elif not admitted:
            self.acct["queuedSince"] = now


def accounting(rec: TaskRecord, now: float) -> dict[str, Any]:
    a = rec.acct
    up = a.get("gangUpSeconds", 0.0) + (now - a["upSince"] if a.get("upSince") else 0.0)
    queued = a.get("queuedSeconds", 0.0) + (now - a["queuedSince"] if a.get("queuedSince") else 0.0)
    lost = a.get("workLost", [])
    lost_total = sum(x["seconds"] for x in lost)
    end = a.get("endedAt") or now
    elapsed = max(1e-9, end - a.get("submittedAt", end))
    causes, waited = eviction_accounting(rec.state, now=utc(now))
    return {
        "queuedSeconds": round(queued, 3),
        "waitingForReadmissionSeconds": waited,
        "preemptionsByCause": causes,
        "workLost": lost,
        "workLostSeconds": round(lost_total, 3),
        "gangUpSeconds": round(up, 3),
        "goodput": round(max(0.0, up - lost_total) / elapsed, 4),
        "lastCheckpoint": a.get("lastCheckpoint"),
    }


def view(rec: TaskRecord, config: Config, paths: Paths, now: float) -> dict[str, Any]:
    """The `get -o json` document: the engine's view plus the local backend's facts."""
    g = rec.gang
    extra: dict[str, Any] = {
        "backend": "local",
        "queue": rec.spec.queue,
        "priorityClass": rec.spec.priority_class or config.default_priority_class,
        "priority": config.priority_classes.get(rec.spec.priority_class or config.default_priority_class),
        "nodes": rec.spec.nodes,
        "nprocPerNode": rec.spec.nproc_per_node,
        "worldSize": rec.spec.world_size,
        "workload": rec.workload.summary() if rec.workload else None,
        "gang": None if g is None else {
            "name": g.name, "attempt": g.attempt, "suspended": g.suspended, "restarts": g.restarts,
            "workers": [{"rank": w.rank, "node": w.node, "pid": w.pid, "running": w.running,
                         "exitCode": w.exit_code} for w in g.workers]},
        "checkpointRoot": paths.checkpoint_root(rec.name, rec.spec.checkpoint_uri),
        "logs": str(paths.logs(rec.name)),
        "accounting": accounting(rec, now),
    }
    return task_view(rec.name, rec.state, now=utc(now), extra=extra)


def log_files(paths: Paths, task: str, attempt: int, rank: int | None) -> list[tuple[int, int, Path]]:
    """(restart, rank, path) of an attempt's worker logs, in restart then rank order."""
    out = []
    base = paths.logs(task, attempt)
    for d in base.glob("restart-*"):
        for f in d.glob("rank-*.log"):
            r = int(f.stem.split("-")[1])
            if rank is None or r == rank:
                out.append((int(d.name.split("-")[1]), r, f))
    return sorted(out)
