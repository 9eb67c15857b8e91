"""The local control plane's brain: every task in memory, the admission cycle, the operations.

No sockets and no event loop here (that is `daemon.py`): the controller is driven by calls —
an operation from a client, a worker exit, a tick — and keeps SQLite up to date through
`reconcile.persist`. `tick(now)` runs rounds of sync → admission → step until nothing changes.

Recovery: on start the controller loads every row. Workers recorded as running belonged to a dead
daemon: whatever is left of their process groups is killed, and the gang is marked lost, so the
engine sees its gang gone and decides (a system retry; budgets and attempts come from the row).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from gangrun._backends.local import admission, reconcile
from gangrun._backends.local.config import CLUSTER_QUEUE, NAMESPACE, Config, Paths
from gangrun._backends.local.gang import DELETE
from gangrun._backends.local.reconcile import Ctx
from gangrun._backends.local.store import Store
from gangrun._backends.local.tasks import TaskRecord, utc, view
from gangrun._core import kueue
from gangrun._core.engine import cancel
from gangrun._core.spec import parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from gangrun._errors import UsageError

log = logging.getLogger(__name__)

EVICT_REASONS = (kueue.EVICTED_BY_PREEMPTION, kueue.EVICTED_BY_PODS_READY_TIMEOUT, kueue.EVICTED_DUE_TO_NODE_FAILURES)
CQ_PATH = f"/{CLUSTER_QUEUE}"


class Controller:
    def __init__(self, paths: Paths, store: Store, spawn: Any) -> None:
        self.paths, self.store = paths, store
        stored = store.config()
        self.config = Config.from_json(stored) if stored else Config.default()
        if stored is None:
            store.put_config(self.config.for_json())
        self.tasks: dict[str, TaskRecord] = {}
        self.dirty: set[str] = set()
        self.ctx = Ctx(store=store, paths=paths, config=lambda: self.config, spawn=spawn)

    # -- recovery ------------------------------------------------------------------------------------

    def load(self, now: float, kill_leftovers: Any) -> None:
        groups = []
        for row in self.store.rows():
            rec = TaskRecord.from_row(row)
            self.tasks[rec.name] = rec
            g = rec.gang
            if g is not None and g.live:
                groups += [(w.pid, w.started) for w in g.live]
                for w in g.live:
                    w.running = False
                g.lost, g.stopping, g.kill_at, g.up_since = True, "", None, None
                rec.add(Event(time=utc(now), type=EventType.CONTROL_PLANE, attempt=g.attempt,
                              message="the local control plane restarted; the workers of this gang were gone"))
            self.dirty.add(rec.name)
        kill_leftovers(groups)

    # -- operations ----------------------------------------------------------------------------------

    def submit(self, doc: dict[str, Any], now: float) -> str:
        spec = parse_manifest(doc["manifest"], source=doc.get("source", ""))
        if spec.name in self.tasks:
            raise UsageError(f'a task named "{spec.name}" already exists (phase {self.tasks[spec.name].state.phase}); '
                             "choose another metadata.name")
        cfg = self.config
        if spec.queue not in cfg.queues:
            raise UsageError(f'spec.queue: unknown queue "{spec.queue}"; the local control plane has: '
                             f"{', '.join(cfg.queues)}")
        pc = spec.priority_class or cfg.default_priority_class
        if pc not in cfg.priority_classes:
            known = ", ".join(f"{k} ({v})" for k, v in sorted(cfg.priority_classes.items(), key=lambda kv: kv[1]))
            raise UsageError(f'spec.priorityClass: unknown priority class "{pc}"; known: {known}')
        per, need = reconcile.gang_request(spec)
        too_big = need.first_exceeding(cfg.quota)
        if too_big is not None:
            raise UsageError(f"spec.resources.{too_big}: the gang needs {getattr(need, too_big)} {too_big} "
                             f"({spec.nodes} nodes × {getattr(per, too_big)}) but the whole local quota is "
                             f"{getattr(cfg.quota, too_big)}; lower it or raise the quota with "
                             f"`gangrun local up --{too_big} ...`")
        rec = TaskRecord(name=spec.name, seq=self.store.next_seq(), doc=doc, spec=spec,
                         state=TaskState.new(now=utc(now)), acct={"submittedAt": now})
        rec.add(Event(time=utc(now), type=EventType.SUBMITTED, attempt=1,
                      message=f"submitted to queue {spec.queue} (priority class {pc} = {cfg.priority_of(pc)})"))
        self.store.insert(rec.to_row(), rec.events)
        rec.events, rec.saved = [], repr(rec.to_row())
        self.tasks[rec.name] = rec
        self.dirty.add(rec.name)
        return rec.name

    def task(self, name: str) -> TaskRecord:
        rec = self.tasks.get(name)
        if rec is None:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UsageError(f'unknown task "{name}" (known tasks: {known})')
        return rec

    def cancel(self, name: str, now: float) -> bool:
        rec = self.task(name)
        if rec.terminal:
            return False
        d = cancel(rec.state, now=utc(now))
        before = rec.state
        reconcile.record(rec, before, d.state, d.action, now)
        reconcile.persist(rec, self.store)
        reconcile.act(rec, d.action, self.ctx, now)
        self.dirty.add(name)
        return True

    def _live_workload(self, name: str):
        rec = self.task(name)
        wl = rec.workload
        if rec.terminal or wl is None or wl.attempt != rec.state.attempt or wl.finished:
            raise UsageError(f'task "{name}" has no live workload (phase {rec.state.phase})')
        return rec, wl

    def evict(self, name: str, reason: str, now: float) -> None:
        if reason not in EVICT_REASONS:
            raise UsageError(f"unknown eviction reason {reason!r}; use one of {', '.join(EVICT_REASONS)}")
        rec, wl = self._live_workload(name)
        if not wl.reserved:
            raise UsageError(f'task "{name}" is not admitted (nothing to evict); phase {rec.state.phase}')
        dt = utc(now)
        if reason == kueue.EVICTED_BY_PREEMPTION:
            msg = kueue.preemption_message(workload_uid="gangrun-local-evict", job_uid="gangrun-local-evict",
                                           reason=kueue.IN_CLUSTER_QUEUE, preemptor_path=CQ_PATH,
                                           preemptee_path=CQ_PATH)
            wl.evict(reason, msg, now=dt, preempted_reason=kueue.IN_CLUSTER_QUEUE, preemptor="(injected)")
        elif reason == kueue.EVICTED_BY_PODS_READY_TIMEOUT:
            wl.evict(reason, kueue.pods_ready_timeout_message(NAMESPACE, wl.name), now=dt)
        else:
            nodes = ", ".join(f"local-node-{i}" for i in range(rec.spec.nodes))
            wl.evict(reason, kueue.node_failures_message(nodes), now=dt)
        self.dirty.add(name)

    def set_active(self, name: str, active: bool, now: float) -> None:
        _, wl = self._live_workload(name)
        if active:
            wl.activate(now=utc(now))
        else:
            wl.deactivate(now=utc(now))
        self.dirty.add(name)

    def configure(self, *, cpu: str | None, memory: str | None, gpu: int | None,
                  queues: list[str] | None = None, priority_classes: dict[str, int] | None = None) -> None:
        cfg = self.config.with_quota(cpu=cpu, memory=memory, gpu=gpu)
        if queues or priority_classes:
            cfg = replace(cfg, queues=tuple(queues or cfg.queues),
                          priority_classes=dict(priority_classes or cfg.priority_classes))
        self.config = cfg
        self.store.put_config(cfg.for_json())
        self.dirty.update(self.tasks)

    def on_exit(self, name: str, attempt: int, rank: int, code: int, now: float) -> None:
        rec = self.tasks.get(name)
        g = rec.gang if rec is not None else None
        if g is None or g.attempt != attempt:
            return
        if code != 0 and not g.stopping:
            rec.note_lost("WorkerFailed", now)
            rec.add(Event(time=utc(now), type=EventType.WORKER_EXITED, attempt=attempt,
                          message=f"worker rank {rank} exited with code {code}", data={"rank": rank, "code": code}))
        launch = reconcile.launch_for(rec, self.paths) if g.attempt == rec.state.attempt else None
        g.exited(rank, code, launch, self.ctx.spawn, now=utc(now))
        self.dirty.add(name)

    # -- the loop's work -----------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        due = {n for n, r in self.tasks.items() if self._due(r, now)}
        todo = self.dirty | due
        self.dirty = set()
        for _ in range(10):
            if not todo:
                return
            for name in todo:
                self._isolated(name, reconcile.sync, now)
            touched = self._admit(now)
            for name in touched:  # Kueue's job reconciler reacts to admissions and evictions at once
                self._isolated(name, reconcile.sync, now)
            todo |= touched
            changed = set()
            for name in sorted(todo, key=lambda n: self.tasks[n].seq):
                if self._isolated(name, reconcile.step, time.time()):  # after sync's spawns: timeline in order
                    changed.add(name)
            todo = changed | self.dirty
            self.dirty = set()

    def _isolated(self, name: str, fn: Any, now: float) -> Any:
        """Run one task's reconcile step; a bug in it is logged and leaves every other task running."""
        try:
            return fn(self.tasks[name], self.ctx, now)
        except Exception:
            log.exception("gangrun: reconciling task %s failed; the other tasks go on", name)
            return False

    def _due(self, r: TaskRecord, now: float) -> bool:
        g, wl = r.gang, r.workload
        return bool((r.wake_at is not None and r.wake_at <= now) or (g is not None and g.live)
                    or (g is not None and g.kill_at is not None and g.kill_at <= now)
                    or (wl is not None and wl.requeue_at is not None and wl.requeue_at <= now))

    def next_wake(self, now: float) -> float | None:
        wakes = []
        for r in self.tasks.values():
            g, wl = r.gang, r.workload
            wakes += [t for t in (r.wake_at, g.kill_at if g else None, wl.requeue_at if wl else None) if t]
            if g is not None and g.live:
                wakes.append(now + 0.5)  # tail checkpoint events while workers run
        return min(wakes) if wakes else None

    def _admit(self, now: float) -> set[str]:
        admitted, pending = [], []
        for r in self.tasks.values():
            wl, g = r.workload, r.gang
            if wl is None or wl.finished:
                continue
            res = admission.Resources.from_json(wl.resources)
            if wl.reserved:
                deleting = g is not None and (g.stopping == DELETE or g.lost)
                admitted.append(admission.Request(name=r.name, priority=wl.priority, order=wl.order, resources=res,
                                                  admitted_at=wl.admitted_at or 0.0,
                                                  evicting=wl.evicted is not None or deleting))
            elif (not r.terminal and wl.attempt == r.state.attempt and wl.pending(now)
                  and g is not None and not g.live and not g.stopping and not g.lost):
                pending.append(admission.Request(name=r.name, priority=wl.priority, order=wl.order, resources=res))
        if not pending:
            return set()
        plan = admission.plan(self.config.quota, admitted, pending)
        dt = utc(now)
        for victim, preemptor in plan.preempt:
            pr = self.tasks[preemptor]
            msg = kueue.preemption_message(workload_uid=pr.workload.uid, job_uid=pr.gang.name,
                                           reason=kueue.IN_CLUSTER_QUEUE, preemptor_path=CQ_PATH,
                                           preemptee_path=CQ_PATH)
            self.tasks[victim].workload.evict(kueue.EVICTED_BY_PREEMPTION, msg, now=dt,
                                              preempted_reason=kueue.IN_CLUSTER_QUEUE, preemptor=preemptor)
        for name in plan.admit:
            r = self.tasks[name]
            r.workload.reserve(at=now, now=dt)
            if r.acct.get("queuedSince") is not None:
                r.add(Event(time=dt, type=EventType.ADMITTED, attempt=r.workload.attempt,
                            message=f"admitted by ClusterQueue {CLUSTER_QUEUE} (queue {r.workload.queue}, "
                                    f"priority {r.workload.priority_class} = {r.workload.priority})"))
                r.note_queued(now, admitted=True)
        return set(plan.admit) | {v for v, _ in plan.preempt}

    # -- reads ---------------------------------------------------------------------------------------

    def view(self, name: str, now: float) -> dict[str, Any]:
        return view(self.task(name), self.config, self.paths, now)

    def views(self, now: float) -> list[dict[str, Any]]:
        return [view(r, self.config, self.paths, now) for r in sorted(self.tasks.values(), key=lambda r: r.seq)]

    def status(self, now: float) -> dict[str, Any]:
        used = admission.ZERO
        gangs = []
        for r in sorted(self.tasks.values(), key=lambda r: r.seq):
            wl = r.workload
            if wl is None or wl.finished:
                continue
            if wl.reserved:
                used = used + admission.Resources.from_json(wl.resources)
            state = ("Evicted" if wl.evicted and wl.reserved else "Admitted" if wl.reserved
                     else "Inactive" if not wl.active else "Pending")
            gangs.append({"task": r.name, "attempt": wl.attempt, "workload": wl.name, "state": state,
                          "priority": wl.priority, "priorityClass": wl.priority_class, "queue": wl.queue,
                          "resources": wl.resources, "phase": r.state.phase.value,
                          "workers": len(r.gang.live) if r.gang else 0})
        return {"running": True, "clusterQueue": CLUSTER_QUEUE, "quota": self.config.quota.for_json(),
                "used": used.for_json(), "queues": list(self.config.queues),
                "priorityClasses": self.config.priority_classes,
                "defaultPriorityClass": self.config.default_priority_class, "gangs": gangs,
                "admitted": [g["task"] for g in gangs if g["state"] in ("Admitted", "Evicted")],
                "pending": [g["task"] for g in gangs if g["state"] in ("Pending", "Inactive")]}

    def live_workers(self) -> int:
        return sum(len(r.gang.live) for r in self.tasks.values() if r.gang is not None)

    def stop_all(self, now: float) -> None:
        """`local down`: every live gang is stopped; the next daemon finds them lost (a system retry)."""
        for r in self.tasks.values():
            g = r.gang
            if g is not None and g.live:
                g.stop(g.stopping or DELETE, r.spec.termination_grace.total_seconds(),
                       notice=reconcile.notice_writer(r, self.paths, "Shutdown", "the local control plane is stopping"))

    def mark_lost_on_shutdown(self, now: float) -> None:
        for r in self.tasks.values():
            g = r.gang
            if g is not None and g.stopping == DELETE and g.attempt == r.state.attempt and not r.terminal:
                g.stopping, g.lost = "", True
                r.add(Event(time=utc(now), type=EventType.CONTROL_PLANE, attempt=g.attempt,
                            message="the local control plane stopped; the workers of this gang were stopped"))
            reconcile.persist(r, self.store)

