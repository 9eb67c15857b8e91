"""The local control plane's shell around the pure parts: every task in memory, one round at a time.

    tick(now):  until nothing changes (each step is a function below):
        jobs       Kueue's job reconciler and JobSet's timers move the twins (`jobs.sync`); the SDK's
                   checkpoint events are read
        reconcile  the pure `reconcile(task)` → store state + events in ONE transaction → actions
        admit      the pure `admission.plan` over every Workload → reserve / evict
        jobs       again for the Workloads admission touched, so a gang starts or stops at once

No socket, no selector, no clock read here (that is `daemon.py`): the controller is driven by calls
— an operation from a client, a worker exit, a tick — each with the `now` of the daemon's one clock,
and it starts and signals processes only through the `Processes` it is given.

Recovery (`load`): every row is read (a row that no longer reads is kept aside, named in the error
of the requests that ask for it). Workers recorded as running belonged to a dead daemon and died with
it; a stop that was in progress is finished (a preempted gang keeps its attempt), a gang that was
simply running is lost, which the engine reads as a deletion (a system retry). Every task is then
reconciled BEFORE admission runs, so a lost gang's next attempt competes for quota with its priority
and nothing is admitted, started and preempted again in the same second.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from gangrun._backends.clock import utc
from gangrun._backends.local import admission, jobs
from gangrun._backends.local.admission import Resources
from gangrun._backends.local.config import CLUSTER_QUEUE, NAMESPACE, Config, Paths
from gangrun._backends.local.gang import Effect, GangTwin, Signal, StartRound, StopReason, Worker, WriteNotice
from gangrun._backends.local.reconcile import Action, CreateJobSet, DeleteJobSet, reconcile
from gangrun._backends.local.render import Launch, launch, worker_env
from gangrun._backends.local.store import Store
from gangrun._backends.local.task import LocalTask, view
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._backends.metrics import Metrics
from gangrun._core import kueue
from gangrun._core.actions import RecordEvent, RequeueAt
from gangrun._core.spec import GENERATED_SUFFIX_LEN, TaskSpec, parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from gangrun._errors import GangrunError, SpecError, UsageError

log = logging.getLogger(__name__)

NODE_DISRUPTION = "NodeDisruption"
EVICT_REASONS = (kueue.EVICTED_BY_PREEMPTION, kueue.EVICTED_BY_PODS_READY_TIMEOUT,
                 kueue.EVICTED_DUE_TO_NODE_FAILURES, NODE_DISRUPTION)
DISRUPTION_REASON = "EvictionByEvictionAPI"  # the DisruptionTarget reason of a drained node's pods
CQ_PATH = f"/{CLUSTER_QUEUE}"
ROUNDS_MAX = 50  # rounds of one tick; more means something keeps changing: the rest waits for the next tick
TAIL_EVERY = timedelta(seconds=0.5)  # how often the checkpoint events of running gangs are read
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the API server's alphabet for generated names: no vowels


class Processes(Protocol):
    """How the controller starts and signals workers (the daemon: real processes watched by pidfds)."""

    def start(self, gang: GangTwin, worker: Worker, launch: Launch, env: dict[str, str]) -> tuple[int, int]:
        """Start one worker. Returns (pid, start time). Raises OSError when it cannot start."""
        ...

    def signal(self, pgids: Iterable[int], sig: int) -> None: ...

    def free_port(self) -> int: ...


class Controller:
    def __init__(self, paths: Paths, store: Store, processes: Processes, *,
                 rng: random.Random | None = None) -> None:
        self.paths, self.store, self.procs = paths, store, processes
        self.rng = rng or random.Random()  # the suffixes of generated names
        self.metrics = Metrics()
        stored = store.config()
        self.config = Config.from_json(stored) if stored else Config.default()
        if stored is None:
            store.put_config(self.config.for_json())
        self.tasks: dict[str, LocalTask] = {}
        self.broken: dict[str, str] = {}  # rows that no longer read: name → why
        self.dirty: set[str] = set()
        self.last_now: datetime | None = None
        self.next_tail: datetime | None = None  # when running gangs' checkpoint events are read next

    def _now(self, now: datetime) -> datetime:
        """Never go back in time, even if the wall clock does: the timeline stays in order."""
        if self.last_now is not None and now < self.last_now:
            now = self.last_now
        self.last_now = now
        return now

    # -- recovery ------------------------------------------------------------------------------------

    def load(self, now: datetime, *, kill_leftovers: Any) -> None:
        now = self._now(now)
        for row in self.store.rows():
            try:
                task = LocalTask.from_row(row)
            except (GangrunError, KeyError, ValueError, TypeError, AttributeError) as e:
                self.broken[row.name] = _unreadable(e)
                log.error("gangrun: task %s: %s", row.name, self.broken[row.name])
                continue
            self.tasks[task.name] = task
            self.dirty.add(task.name)
        # The workers of a dead daemon died with it; what they forked is killed before anything starts.
        kill_leftovers([(w.pid, w.started) for t in self.tasks.values() if t.gang for w in t.gang.live])
        down_from = self._last_alive()
        since = f" from {down_from.isoformat(timespec='seconds')}" if down_from else ""
        for task in self.tasks.values():
            g = task.gang
            if g is None or not g.live:
                continue
            data = {"downFrom": down_from.isoformat(), "downTo": now.isoformat()} if g.up and down_from else {}
            self._apply(task, g.workers_gone(now=now), now)
            task.record(Event(time=now, type=EventType.CONTROL_PLANE, attempt=g.attempt, data=data,
                              message=f"the local control plane was down{since} until "
                                      f"{now.isoformat(timespec='seconds')}; the workers of this gang were gone"))
        self._flush()

    def _last_alive(self) -> datetime | None:
        t = self.store.heartbeat()
        return datetime.fromisoformat(t) if t else None

    def heartbeat(self, now: datetime) -> None:
        self.store.put_heartbeat(now.isoformat())

    # -- operations ----------------------------------------------------------------------------------

    def submit(self, doc: dict[str, Any], now: datetime) -> str:
        now = self._now(now)
        spec = parse_manifest(doc["manifest"], source=doc.get("source", ""))
        if not spec.name:
            spec = replace(spec, name=self._generate(spec.generate_name))
        name = spec.name
        if name in self.broken:
            raise UsageError(f'a task named "{name}" exists but cannot be read ({self.broken[name]}); '
                             f"`gangrun delete {name}` removes it")
        existing = self.tasks.get(name)
        if existing is not None and existing.deleting:
            raise UsageError(f'task "{name}" is being deleted (its workers are stopping); submit again in a moment')
        if existing is not None:
            if existing.doc == doc:
                return name  # the same manifest again (a retried submit): the task it made
            raise UsageError(f'a task named "{name}" already exists (phase {existing.state.phase}) with a '
                             "different manifest; choose another metadata.name or delete it first")
        self._check_admissible(spec)
        task = LocalTask(name=name, seq=self.store.next_seq(), doc=doc, spec=spec, state=TaskState.new(now=now))
        pc = spec.priority_class or self.config.default_priority_class
        task.record(Event(time=now, type=EventType.SUBMITTED, attempt=1,
                          message=f"submitted to queue {spec.queue} (priority class {pc} = "
                                  f"{self.config.priority_of(pc)})"))
        self.store.insert(task.to_row(), task.events)
        task.events, task.saved = [], task.fingerprint()
        self.tasks[name] = task
        self.dirty.add(name)
        return name

    def _generate(self, prefix: str) -> str:
        """`metadata.generateName`: the prefix and 5 random characters, as the API server makes a name."""
        while True:
            name = prefix + "".join(self.rng.choices(_SUFFIX_CHARS, k=GENERATED_SUFFIX_LEN))
            if name not in self.tasks and name not in self.broken:
                return name

    def _check_admissible(self, spec: TaskSpec) -> None:
        cfg = self.config
        if spec.queue not in cfg.queues:
            raise SpecError("spec.queue", f'unknown queue "{spec.queue}"; the local control plane has: '
                                          f"{', '.join(cfg.queues)}")
        pc = spec.priority_class or cfg.default_priority_class
        if pc not in cfg.priority_classes:
            known = ", ".join(f"{k} ({v})" for k, v in sorted(cfg.priority_classes.items(), key=lambda kv: kv[1]))
            raise SpecError("spec.priorityClass", f'unknown priority class "{pc}"; known: {known}')
        too_big = admission.too_big(spec, cfg.quota)
        if too_big is not None:
            raise SpecError(f"spec.resources.{too_big[0]}", too_big[1] + "; lower it or raise the quota with "
                                                                        f"`gangrun local up --{too_big[0]} ...`")

    def task(self, name: str) -> LocalTask:
        task = self.tasks.get(name)
        if task is None:
            if name in self.broken:
                raise UsageError(f'task "{name}" cannot be read ({self.broken[name]}); '
                                 f"`gangrun delete {name}` removes it")
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UsageError(f'unknown task "{name}" (known tasks: {known})')
        return task

    def cancel(self, name: str, now: datetime) -> bool:
        task = self.task(name)
        if task.terminal or task.cancel_requested:
            self._flush()
            return False
        task.cancel_requested = True
        self._flush()
        self.dirty.add(name)
        self.tick(now)
        return True

    def delete(self, name: str, *, force: bool, now: datetime) -> bool:
        """Remove an ended task and its records. A running one is refused unless `force` (cancel first)."""
        if name in self.broken and name not in self.tasks:
            self.store.delete(name)
            del self.broken[name]
            return True
        task = self.task(name)
        if not task.terminal and not force:
            raise UsageError(f'task "{name}" is {task.state.phase.value}; cancel it first or use --force')
        task.deleting = True
        self.cancel(name, now)
        self._reap(task)
        return True

    def _reap(self, task: LocalTask) -> bool:
        """Remove a task being deleted once it has ended and none of its workers is left."""
        if not task.deleting or not task.terminal or (task.gang is not None and task.gang.live):
            return False
        self.store.delete(task.name)
        self.tasks.pop(task.name, None)
        self.dirty.discard(task.name)
        return True

    def _live_workload(self, name: str) -> tuple[LocalTask, WorkloadTwin]:
        task = self.task(name)
        wl = task.workload
        if task.terminal or wl is None or wl.attempt != task.state.attempt or wl.finished:
            raise UsageError(f'task "{name}" has no live workload (phase {task.state.phase})')
        return task, wl

    def evict(self, name: str, reason: str, now: datetime) -> None:
        """Inject an eviction (B6), as Kueue or a node would cause it."""
        now = self._now(now)
        if reason not in EVICT_REASONS:
            raise UsageError(f"unknown eviction reason {reason!r}; use one of {', '.join(EVICT_REASONS)}")
        task, wl = self._live_workload(name)
        if not wl.reserved:
            raise UsageError(f'task "{name}" is not admitted (nothing to evict); phase {task.state.phase}')
        if reason == NODE_DISRUPTION:
            g = task.gang
            if g is None or not g.live:
                raise UsageError(f'task "{name}" has no running workers to lose (phase {task.state.phase})')
            node = max(w.node for w in g.live)
            effects = g.disrupt(node, reason=DISRUPTION_REASON,
                                message=f"Eviction API: evicting (node local-node-{node} is being drained)", now=now)
            self._apply(task, effects, now)
        elif reason == kueue.EVICTED_BY_PREEMPTION:
            msg = kueue.preemption_message(workload_uid="gangrun-local-evict", job_uid="gangrun-local-evict",
                                           reason=kueue.IN_CLUSTER_QUEUE, preemptor_path=CQ_PATH,
                                           preemptee_path=CQ_PATH)
            wl.evict(reason, msg, now=now, preempted_reason=kueue.IN_CLUSTER_QUEUE, preemptor="(injected)")
        elif reason == kueue.EVICTED_BY_PODS_READY_TIMEOUT:
            wl.evict(reason, kueue.pods_ready_timeout_message(NAMESPACE, wl.name), now=now)
        else:
            nodes = ", ".join(f"local-node-{i}" for i in range(task.spec.nodes))
            wl.evict(reason, kueue.node_failures_message(nodes), now=now)
        self.dirty.add(name)

    def set_active(self, name: str, active: bool, now: datetime) -> None:
        now = self._now(now)
        _, wl = self._live_workload(name)
        if active:
            wl.activate(now=now)
        else:
            wl.deactivate(now=now)
        self.dirty.add(name)

    def configure(self, *, cpu: str | None, memory: str | None, gpu: int | None,
                  queues: list[str] | None = None, priority_classes: dict[str, int] | None = None,
                  metrics_port: int | None = None) -> None:
        cfg = self.config.with_quota(cpu=cpu, memory=memory, gpu=gpu)
        if metrics_port is not None:
            if not 0 <= metrics_port <= 65535:
                raise UsageError(f"--metrics-port: must be a TCP port from 1 to 65535 (0: off), got {metrics_port}")
            cfg = replace(cfg, metrics_port=metrics_port)
        if queues or priority_classes:
            cfg = replace(cfg, queues=tuple(queues or cfg.queues),
                          priority_classes=dict(priority_classes or cfg.priority_classes))
        self.config = cfg
        self.store.put_config(cfg.for_json())
        self.dirty.update(self.tasks)

    def on_exit(self, name: str, attempt: int, rank: int, code: int, now: datetime) -> None:
        now = self._now(now)
        task = self.tasks.get(name)
        g = task.gang if task is not None else None
        if task is None or g is None or g.attempt != attempt:
            return
        if code != 0 and g.stopping is None:
            task.record(Event(time=now, type=EventType.WORKER_EXITED, attempt=attempt,
                              message=f"worker rank {rank} exited with code {code}",
                              data={"rank": rank, "code": code}))
        self._apply(task, g.exited(rank, code, grace=task.spec.termination_grace, now=now), now)
        self.dirty.add(name)

    # -- the rounds ----------------------------------------------------------------------------------

    def tick(self, now: datetime) -> None:
        now = self._now(now)
        tail = self.next_tail is None or now >= self.next_tail
        if tail:
            self.next_tail = now + TAIL_EVERY
        todo = self.dirty | {n for n, t in self.tasks.items() if self._due(t, now, tail=tail)}
        self.dirty = set()
        for _ in range(ROUNDS_MAX):
            if not todo:
                return
            changed = {n for n in todo if self._isolated(n, self._jobs, now)}
            planned = {n: self._isolated(n, self._reconcile, now) for n in sorted(todo, key=self._seq)}
            self._flush()  # the decisions are stored before anything is done about them
            for n, actions in planned.items():
                if actions is not None:
                    changed.add(n)
                    self._isolated(n, lambda t, at, acts=actions: self._act(t, acts, at), now)
            touched = self._admit(now)
            changed |= {n for n in touched if self._isolated(n, self._jobs, now)}
            self._flush()
            for n in changed:
                self._isolated(n, lambda t, _at: self._reap(t), now)
            todo = (changed | touched | self.dirty) & self.tasks.keys()
            self.dirty = set()
        log.error("gangrun: %d tasks still changing after %d rounds; they go on at the next tick", len(todo),
                  ROUNDS_MAX)
        self.dirty |= todo

    def _seq(self, name: str) -> int:
        t = self.tasks.get(name)
        return t.seq if t is not None else 0

    def _isolated(self, name: str, fn: Any, now: datetime) -> Any:
        """Run one task's step; a bug in it is logged and leaves every other task running."""
        task = self.tasks.get(name)
        if task is None:
            return None
        try:
            return fn(task, now)
        except Exception:
            self.metrics.errors.inc()
            log.exception("gangrun: reconciling task %s failed; the other tasks go on", name)
            return None

    def _jobs(self, task: LocalTask, now: datetime) -> bool:
        before = task.fingerprint()
        g = task.gang
        current = g is not None and g.attempt == task.state.attempt and not task.terminal
        effects = jobs.sync(g, task.workload, current=current, grace=task.spec.termination_grace,
                            backoff=timedelta(seconds=self.config.pods_ready_backoff), now=now)
        self._apply(task, effects, now)
        self._tail_checkpoints(task, now)
        return bool(task.events) or task.fingerprint() != before

    def _reconcile(self, task: LocalTask, now: datetime) -> list[Action] | None:
        """The engine's decision for `task`, adopted in memory. Returns the gang actions to carry out
        once it is stored, or None when nothing changed."""
        state, actions = reconcile(task, now=now)
        if state is not None:
            task.state = state
        task.wake_at = next((a.at for a in actions if isinstance(a, RequeueAt)), None)
        for a in actions:
            if isinstance(a, RecordEvent):
                task.record(a.event)
        gang_actions: list[Action] = [a for a in actions if isinstance(a, CreateJobSet | DeleteJobSet)]
        return gang_actions if state is not None or gang_actions or task.events else None

    def _act(self, task: LocalTask, actions: list[Action], now: datetime) -> None:
        for a in actions:
            if isinstance(a, CreateJobSet):
                self._create(task, a.attempt, now)
            elif isinstance(a, DeleteJobSet):
                self._delete(task, a, now)

    def _flush(self) -> None:
        """Store every task that changed, with its new events, in one transaction."""
        dirty = [t for t in self.tasks.values() if t.dirty]
        self.store.save([(t.to_row(), t.events) for t in dirty])
        for t in dirty:
            for e in t.events:
                self.metrics.count(e)
            t.events, t.saved = [], t.fingerprint()

    def _create(self, task: LocalTask, attempt: int, now: datetime) -> None:
        g = task.gang
        if g is not None and (g.attempt == attempt or g.live):
            return  # exists already, or the old attempt's workers are still stopping
        spec = task.spec
        pc = spec.priority_class or self.config.default_priority_class
        task.gang = GangTwin(task=task.name, attempt=attempt, nodes=spec.nodes, nproc=spec.nproc_per_node,
                             max_restarts=spec.failure_policy.max_restarts)
        task.workload = WorkloadTwin(task=task.name, attempt=attempt, queue=spec.queue,
                                     priority=self.config.priority_of(pc), priority_class=pc,
                                     resources=admission.gang_request(spec)[1].for_json(), order=task.seq)

    def _delete(self, task: LocalTask, a: DeleteJobSet, now: datetime) -> None:
        g = task.gang
        if g is None or g.attempt != a.attempt or g.deleted:
            return
        effects = g.stop(StopReason.DELETE, grace=task.spec.termination_grace, now=now, notice=(a.cause, a.message))
        self._apply(task, effects, now)

    def _due(self, task: LocalTask, now: datetime, *, tail: bool) -> bool:
        g, wl = task.gang, task.workload
        return bool((task.wake_at is not None and task.wake_at <= now) or (tail and g is not None and g.live)
                    or (g is not None and g.kill_at is not None and g.kill_at <= now)
                    or (wl is not None and wl.requeue_at is not None and wl.requeue_at <= now))

    def next_wake(self, now: datetime) -> datetime | None:
        wakes: list[datetime] = []
        for task in self.tasks.values():
            g, wl = task.gang, task.workload
            wakes += [t for t in (task.wake_at, g.kill_at if g else None, wl.requeue_at if wl else None) if t]
            if g is not None and g.live:
                wakes.append(self.next_tail or now)  # read checkpoint events while workers run
        return min(wakes) if wakes else None

    # -- effects on processes and files --------------------------------------------------------------

    def _apply(self, task: LocalTask, effects: list[Effect], now: datetime) -> None:
        for eff in effects:
            if isinstance(eff, StartRound):
                self._start_round(task, now)
            elif isinstance(eff, Signal):
                self.procs.signal(eff.pgids, eff.signal)
            elif isinstance(eff, WriteNotice):
                self._write_notice(task, eff)

    def _start_round(self, task: LocalTask, now: datetime) -> None:
        g = task.gang
        assert g is not None
        run = self.paths.run(task.name, g.attempt)
        run.mkdir(parents=True, exist_ok=True)  # the SDK appends checkpoint events here
        (run / "stop.json").unlink(missing_ok=True)
        spec = launch(task.name, task.spec, g.attempt, cwd=task.doc.get("cwd") or "", paths=self.paths)
        g.port = self.procs.free_port()
        started: dict[int, tuple[int, int]] = {}
        cannot = ""
        for w in g.workers:
            try:
                started[w.rank] = self.procs.start(g, w, spec, worker_env(spec, g, w))
            except OSError as e:  # the command cannot be started at all: a worker that can never start
                cannot = f"rank {w.rank} cannot start {spec.argv[0]!r}: {e.strerror or e}"
                break
            task.record(Event(time=now, type=EventType.WORKER_READY, attempt=g.attempt,
                              message=f"worker rank {w.rank} (node {w.node}) running, pid {started[w.rank][0]}",
                              data={"rank": w.rank, "pid": started[w.rank][0], "restart": g.restarts}))
        self._apply(task, g.round_started(g.port, started, cannot_start=cannot, grace=task.spec.termination_grace,
                                          now=now), now)

    def _write_notice(self, task: LocalTask, n: WriteNotice) -> None:
        """The stop notice (B3), written atomically before the workers get SIGTERM."""
        g = task.gang
        run = self.paths.run(task.name, g.attempt if g else task.state.attempt)
        run.mkdir(parents=True, exist_ok=True)
        tmp = run / f".stop.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"cause": n.cause, "message": n.message, "deadline": n.deadline.timestamp()}))
        os.replace(tmp, run / "stop.json")

    def _tail_checkpoints(self, task: LocalTask, now: datetime) -> None:
        """Turn the SDK's `checkpoint_committed` lines of the gang's attempt into timeline events."""
        g = task.gang
        if g is None:
            return
        f = self.paths.run(task.name, g.attempt) / "events.jsonl"
        try:
            size = f.stat().st_size
        except OSError:
            return
        if size <= g.events_offset:
            return
        with open(f, "rb") as fh:
            fh.seek(g.events_offset)
            data = fh.read(size - g.events_offset)
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        if end == 0:
            return
        g.events_offset += end
        g.touch()
        for line in data[:end].splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if not isinstance(doc, dict) or doc.get("type") != "checkpoint_committed":
                continue
            try:
                committed = utc(float(doc.get("time") or 0))
            except (TypeError, ValueError, OverflowError, OSError):
                committed = now
            step, attempt = doc.get("step"), doc.get("attempt", g.attempt)
            what = f"step {step}" if step is not None else f"seq {doc.get('seq')}"
            # Stamped when it is read, so the timeline stays in order; when it committed is in the data.
            task.record(Event(time=now, type=EventType.CHECKPOINT, attempt=attempt,
                              message=f"checkpoint committed ({what}) by rank {doc.get('rank', 0)}",
                              data={"step": step, "seq": doc.get("seq"), "uri": doc.get("uri"),
                                    "committedAt": min(committed, now).isoformat()}))

    # -- admission -----------------------------------------------------------------------------------

    def _admit(self, now: datetime) -> set[str]:
        admitted, pending = [], []
        for t in self.tasks.values():
            wl, g = t.workload, t.gang
            if wl is None or wl.finished:
                continue
            res = Resources.from_json(wl.resources)
            if wl.reserved:
                deleting = g is not None and (g.deleted or g.lost)
                admitted.append(admission.Request(name=t.name, priority=wl.priority, order=wl.order, resources=res,
                                                  admitted_at=wl.admitted_at.timestamp() if wl.admitted_at else 0.0,
                                                  evicting=wl.evicted is not None or deleting))
            elif (not t.terminal and wl.attempt == t.state.attempt and wl.pending(now)
                  and g is not None and not g.live and g.stopping is None and not g.lost):
                pending.append(admission.Request(name=t.name, priority=wl.priority, order=wl.order, resources=res))
        if not pending:
            return set()
        plan = admission.plan(self.config.quota, admitted, pending)
        touched: set[str] = set()
        for victim, preemptor in plan.preempt:
            pr = self.tasks[preemptor]
            assert pr.workload is not None and pr.gang is not None
            msg = kueue.preemption_message(workload_uid=pr.workload.uid, job_uid=pr.gang.name,
                                           reason=kueue.IN_CLUSTER_QUEUE, preemptor_path=CQ_PATH,
                                           preemptee_path=CQ_PATH)
            wl = self.tasks[victim].workload
            assert wl is not None
            wl.evict(kueue.EVICTED_BY_PREEMPTION, msg, now=now, preempted_reason=kueue.IN_CLUSTER_QUEUE,
                     preemptor=preemptor)
            touched.add(victim)
        for name in plan.admit:
            t = self.tasks[name]
            wl = t.workload
            assert wl is not None
            wl.reserve(now=now)
            t.record(Event(time=now, type=EventType.ADMITTED, attempt=wl.attempt,
                           message=f"admitted by ClusterQueue {CLUSTER_QUEUE} (queue {wl.queue}, "
                                   f"priority {wl.priority_class} = {wl.priority})"))
            touched.add(name)
        for name, why in plan.waiting_reasons.items():
            wl = self.tasks[name].workload
            if wl is not None and wl.waiting(why, now=now):
                touched.add(name)
        return touched

    # -- reads ---------------------------------------------------------------------------------------

    def queue_positions(self) -> dict[str, int]:
        """1-based place of every pending gang in its queue, in the order admission considers them."""
        waiting: dict[str, list[LocalTask]] = {}
        for t in self.tasks.values():
            wl = t.workload
            if wl is not None and not t.terminal and not wl.reserved and not wl.finished and wl.active:
                waiting.setdefault(wl.queue, []).append(t)
        out: dict[str, int] = {}
        for tasks in waiting.values():
            ranked = sorted(tasks, key=lambda t: (-(t.workload.priority if t.workload else 0), t.seq))
            out.update({t.name: i for i, t in enumerate(ranked, start=1)})
        return out

    def view(self, name: str, now: datetime) -> dict[str, Any]:
        return view(self.task(name), self.config, self.paths, now=now,
                    queue_position=self.queue_positions().get(name))

    def views(self, now: datetime) -> list[dict[str, Any]]:
        positions = self.queue_positions()
        return [view(t, self.config, self.paths, now=now, queue_position=positions.get(t.name))
                for t in sorted(self.tasks.values(), key=lambda t: t.seq)]

    def status(self, now: datetime) -> dict[str, Any]:
        used = admission.ZERO
        gangs = []
        positions = self.queue_positions()
        for t in sorted(self.tasks.values(), key=lambda t: t.seq):
            wl = t.workload
            if wl is None or wl.finished:
                continue
            if wl.reserved:
                used = used + Resources.from_json(wl.resources)
            state = ("Evicted" if wl.evicted and wl.reserved else "Admitted" if wl.reserved
                     else "Inactive" if not wl.active else "Pending")
            gangs.append({"task": t.name, "attempt": wl.attempt, "workload": wl.name, "state": state,
                          "priority": wl.priority, "priorityClass": wl.priority_class, "queue": wl.queue,
                          "resources": wl.resources, "phase": t.state.phase.value,
                          "workers": len(t.gang.live) if t.gang else 0, "queuePosition": positions.get(t.name),
                          "pending": wl.pending_message if state == "Pending" else None})
        return {"running": True, "clusterQueue": CLUSTER_QUEUE, "quota": self.config.quota.for_json(),
                "used": used.for_json(), "queues": list(self.config.queues),
                "priorityClasses": self.config.priority_classes,
                "defaultPriorityClass": self.config.default_priority_class, "gangs": gangs,
                "admitted": [g["task"] for g in gangs if g["state"] in ("Admitted", "Evicted")],
                "pending": [g["task"] for g in gangs if g["state"] in ("Pending", "Inactive")],
                "tooBig": self.too_big(), "unreadable": dict(self.broken),
                "metrics": f"http://127.0.0.1:{self.config.metrics_port}/metrics" if self.config.metrics_port else None}

    def too_big(self) -> dict[str, str]:
        """Waiting tasks that can never be admitted under the current quota, and why."""
        out = {}
        for t in self.tasks.values():
            if t.terminal:
                continue
            why = admission.too_big(t.spec, self.config.quota)
            if why is not None:
                out[t.name] = why[1]
        return out

    def render_metrics(self, now: datetime) -> str:
        """The Prometheus exposition: the counters as they ran, the gauges from the tasks' views now."""
        self.metrics.observe_views(self.views(now))
        return self.metrics.render()

    def live_workers(self) -> int:
        return sum(len(t.gang.live) for t in self.tasks.values() if t.gang is not None)

    # -- shutdown ------------------------------------------------------------------------------------

    def stop_all(self, now: datetime) -> None:
        """`local down`: every live gang is stopped; the next daemon finds them lost (a system retry)."""
        now = self._now(now)
        for t in self.tasks.values():
            g = t.gang
            if g is not None and g.live:
                if g.up:
                    t.record(Event(time=now, type=EventType.CONTROL_PLANE, attempt=g.attempt,
                                   data={"downFrom": now.isoformat()},
                                   message="the local control plane is stopping; the workers of this gang are stopped"))
                effects = g.stop(g.stopping or StopReason.DELETE, grace=t.spec.termination_grace, now=now,
                                 notice=("Shutdown", "the local control plane is stopping"))
                self._apply(t, effects, now)
        self._flush()

    def kill_overdue(self, now: datetime) -> None:
        for t in self.tasks.values():
            if t.gang is not None:
                self._apply(t, t.gang.kill_overdue(now=now), now)

    def mark_lost_on_shutdown(self, now: datetime) -> None:
        """After `down`: the gangs stopped for it are lost; everything is persisted."""
        for t in self.tasks.values():
            g = t.gang
            if (g is not None and g.stopping is StopReason.DELETE and g.attempt == t.state.attempt
                    and not t.terminal and not t.cancel_requested):
                g.stopping, g.lost = None, True
                g.touch()
        self._flush()
        self.heartbeat(now)


def _unreadable(e: BaseException) -> str:
    what = str(e) if isinstance(e, GangrunError) else f"{type(e).__name__}: {e}"
    return f"its stored record no longer reads: {what}"
