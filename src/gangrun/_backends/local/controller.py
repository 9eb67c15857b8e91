"""The local control plane's shell around the pure parts: every task in memory, one round at a time.

    tick(now):  until nothing changes (each step is a function below):
        jobs       Kueue's job reconciler and JobSet's timers move the twins (`jobs.sync`); the SDK's
                   checkpoint events are read
        reconcile  the pure `reconcile(task)` → store state + events in ONE transaction → actions
        admit      Kueue's scheduler (`scheduler.schedule`, on the pure `admission.plan`) → reserve / evict
        jobs       again for the Workloads admission touched, so a gang starts or stops at once

No socket, no selector, no clock read here (that is `daemon.py`): the controller is driven by calls
— an operation from a client, a worker exit, a tick — each with the `now` of the daemon's one clock,
and it starts and signals processes only through the `Processes` it is given (`effects.py`).

Recovery (`load`, see `recovery.py`) marks every task dirty, so the first round reconciles them all
BEFORE admission runs: a lost gang's next attempt competes for quota with its priority, and nothing
is admitted, started and preempted again in the same second.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from gangrun._backends.local import admission, jobs, recovery
from gangrun._backends.local.config import Config, Paths
from gangrun._backends.local.effects import Effects, Processes, remove_files
from gangrun._backends.local.gang import NODE_DISRUPTION, GangTwin, StopReason
from gangrun._backends.local.inject import inject
from gangrun._backends.local.purge import dependents, purge_deleted
from gangrun._backends.local.reconcile import Action, CreateJobSet, DeleteJobSet, reconcile
from gangrun._backends.local.resume_check import check_resume_from
from gangrun._backends.local.scheduler import boosts, may_grow_at, schedule
from gangrun._backends.local.status import queue_positions, status
from gangrun._backends.local.store import Store
from gangrun._backends.local.task import LocalTask, unreadable_view, view
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._backends.metrics import Metrics
from gangrun._core import elastic
from gangrun._core.actions import RecordEvent, RequeueAt
from gangrun._core.checkpoint_root import refuse_if_depended_on
from gangrun._core.pod_merge import local_ignored
from gangrun._core.priority_boost import BoostPolicy
from gangrun._core.spec import GENERATED_SUFFIX_LEN, parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from gangrun._core.view_types import ListedView, TaskView
from gangrun._errors import UsageError

log = logging.getLogger(__name__)

ROUNDS_MAX = 50  # rounds of one tick; more means something keeps changing: the rest waits for the next tick
TAIL_EVERY = timedelta(seconds=0.5)  # how often the checkpoint events of running gangs are read
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the API server's alphabet for generated names: no vowels


class Controller:
    def __init__(self, paths: Paths, store: Store, processes: Processes, *,
                 rng: random.Random | None = None) -> None:
        self.paths, self.store = paths, store
        self.effects = Effects(paths, processes)
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
        self.scheduled: tuple[Any, ...] = ()  # the Workloads and quota the last scheduling cycle saw

    def _now(self, now: datetime) -> datetime:
        """Never go back in time, even if the wall clock does: the timeline stays in order."""
        if self.last_now is not None and now < self.last_now:
            now = self.last_now
        self.last_now = now
        return now

    # -- recovery ------------------------------------------------------------------------------------

    def load(self, now: datetime, *, kill_leftovers: recovery.KillLeftovers) -> None:
        now = self._now(now)
        self.tasks, self.broken = recovery.load(self.store, self.effects, now=now, kill_leftovers=kill_leftovers)
        self.dirty.update(self.tasks)
        self._flush()

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
            if _same_task(existing.doc, doc):
                return name  # the same manifest again (a retried submit): the task it made
            raise UsageError(f'a task named "{name}" already exists (phase {existing.state.phase}) with a '
                             "different manifest; choose another metadata.name or delete it first")
        admission.check_submit(spec, self.config)
        check_resume_from(spec, self.tasks, self.paths)
        task = LocalTask(name=name, uid=str(uuid.uuid4()), seq=self.store.next_seq(), doc=doc, spec=spec,
                         state=TaskState.new(now=now))
        pc = spec.priority_class or self.config.default_priority_class
        ignored = local_ignored(spec.pod_template)
        task.record(Event(time=now, type=EventType.SUBMITTED, attempt=1, data={"ignoredLocally": ignored},
                          message=f"submitted to queue {spec.queue} (priority class {pc} = "
                                  f"{self.config.priority_of(pc)})" + (
                                      f"; ignored locally: {', '.join(ignored)}" if ignored else "")))
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

    def delete(self, name: str, *, force: bool, now: datetime, purge: bool = False) -> bool:
        """Remove an ended task, its timeline and its logs; its checkpoints too with `purge` (kept by
        default: only `spec.checkpoint.resumeFrom` ever loads them again). A running task is refused
        unless `force` (cancel first)."""
        if name in self.broken and name not in self.tasks:
            self.store.delete(name)
            del self.broken[name]
            return True
        task = self.task(name)
        if not task.terminal and not force:
            raise UsageError(f'task "{name}" is {task.state.phase.value}; cancel it first or use --force')
        if purge and not force:
            users = dependents(self.tasks.values(), [self._root(task)], self.paths, besides=name)
            refuse_if_depended_on(name, users)
        task.deleting, task.purging = True, purge
        self.cancel(name, now)
        self._reap(task)
        return True

    def _reap(self, task: LocalTask) -> bool:
        """Remove a task being deleted once it has ended and none of its workers is left."""
        if not task.deleting or not task.terminal or (task.gang is not None and task.gang.live):
            return False
        self.store.delete(task.name, kept_root="" if task.purging else self._root(task))
        self.tasks.pop(task.name, None)
        self.dirty.discard(task.name)
        remove_files(self.paths, task)
        return True

    def _root(self, task: LocalTask) -> str:
        return self.paths.checkpoint_root(task.name, task.uid, task.spec.checkpoint_uri)

    def purge_deleted(self, name: str, *, force: bool) -> list[str]:
        """`delete NAME --purge` of a name no task has (`purge.purge_deleted`)."""
        return purge_deleted(self.store, self.paths, self.tasks, name, force=force)

    def _live_workload(self, name: str) -> tuple[LocalTask, WorkloadTwin]:
        task = self.task(name)
        wl = task.workload
        if task.terminal or wl is None or wl.attempt != task.state.attempt or wl.finished:
            raise UsageError(f'task "{name}" has no live workload (phase {task.state.phase})')
        return task, wl

    def evict(self, name: str, reason: str, now: datetime) -> None:
        """Inject an eviction (B6), as Kueue or a node would cause it."""
        now = self._now(now)
        task, wl = self._live_workload(name)
        if not wl.reserved:
            raise UsageError(f'task "{name}" is not admitted (nothing to evict); phase {task.state.phase}')
        self.effects.apply(task, inject(reason, wl, task.gang, nodes=task.spec.nodes,
                                               grace=task.spec.termination_grace, now=now), now)
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
                  metrics_port: int | None = None, priority_boost: bool | None = None,
                  boost_steps: list[float] | None = None) -> None:
        cfg = self.config.with_quota(cpu=cpu, memory=memory, gpu=gpu)
        if priority_boost is not None:
            cfg = replace(cfg, priority_boost=priority_boost)
        if boost_steps is not None:
            BoostPolicy(steps=tuple(boost_steps))  # raises UsageError naming --boost-steps
            cfg = replace(cfg, boost_steps=tuple(float(x) for x in boost_steps))
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
            lost = g.lost_with_its_node(rank)
            task.record(Event(time=now, type=EventType.WORKER_EXITED, attempt=attempt,
                              message=f"worker rank {rank} " + ("was lost with its node" if lost else "exited") +
                                      f" (exit code {code})",
                              data={"rank": rank, "code": code, **({"cause": NODE_DISRUPTION} if lost else {})}))
        self.effects.apply(task, g.exited(rank, code, grace=task.spec.termination_grace, now=now), now)
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
            touched = self._schedule(now)
            changed |= {n for n in touched if self._isolated(n, self._jobs, now)}
            self._flush()
            for n in changed:
                self._isolated(n, lambda t, _at: self._reap(t), now)
            todo = (changed | touched | self.dirty) & self.tasks.keys()
            self.dirty = set()
        log.error("gangrun: %d tasks still changing after %d rounds; they go on at the next tick", len(todo),
                  ROUNDS_MAX)
        self.dirty |= todo

    def _schedule(self, now: datetime) -> set[str]:
        """Kueue's scheduling cycle, skipped when nothing it reads changed since the last one (a running
        gang's periodic tick would otherwise re-plan a queue of hundreds for nothing)."""
        inputs = self._schedule_inputs(now)
        if inputs == self.scheduled:
            return set()
        touched = schedule(self.tasks, self.config.quota, now=now, boost=self.config.boost_policy())
        self.scheduled = inputs
        return touched

    def _schedule_inputs(self, now: datetime) -> tuple[Any, ...]:
        """Everything `schedule` reads, by version: the quota, when elastic gangs may grow, each task's
        attempt and twins, and the boosts (quantised: they change at a commit or when unsaved work
        crosses a step)."""
        return (self.config.quota, tuple(may_grow_at(self.tasks.values())), tuple(
            (n, t.state.attempt, t.terminal, t.workload.generation if t.workload else -1,
             (t.gang.attempt, t.gang.generation) if t.gang else None) for n, t in self.tasks.items()),
            boosts(self.tasks.values(), self.config.boost_policy(), now=now))

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
        size, suspended = (g.size, g.suspended) if g is not None else (0, False)
        effects = jobs.sync(g, task.workload, current=current, grace=task.spec.termination_grace,
                            backoff=timedelta(seconds=self.config.pods_ready_backoff), now=now)
        if g is not None and g.size != size:
            self._resized(task, g, size, readmitted=suspended, now=now)
        self.effects.apply(task, effects, now)
        self.effects.read_checkpoints(task, now)
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

    def _resized(self, task: LocalTask, g: GangTwin, old: int, *, readmitted: bool, now: datetime) -> None:
        """The timeline's `Resized` event: an elastic gang's size changed, from → to and why."""
        why = elastic.resize_why(old, g.size, full=task.spec.nodes, readmitted=readmitted)
        task.record(Event(time=now, type=EventType.RESIZED, attempt=g.attempt,
                          message=elastic.resize_message(old, g.size, why),
                          data={"from": old, "to": g.size, "of": task.spec.nodes}))

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
                             max_restarts=spec.failure_policy.max_restarts,
                             restart_on_disruption=spec.failure_policy.restart_on_disruption)
        per_node, whole = admission.gang_request(spec)
        task.workload = WorkloadTwin(task=task.name, attempt=attempt, queue=spec.queue,
                                     priority=self.config.priority_of(pc), priority_class=pc,
                                     resources=whole.for_json(), order=task.seq, per_node=per_node.for_json(),
                                     nodes=spec.nodes, least_nodes=spec.least_nodes, full_nodes=spec.nodes,
                                     cooldown=spec.resize_cooldown)

    def _delete(self, task: LocalTask, a: DeleteJobSet, now: datetime) -> None:
        g = task.gang
        if g is None or g.attempt != a.attempt or g.deleted:
            return
        effects = g.stop(StopReason.DELETE, grace=task.spec.termination_grace, now=now, notice=(a.cause, a.message))
        self.effects.apply(task, effects, now)

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
        wakes += may_grow_at(self.tasks.values())
        return min(wakes) if wakes else None

    # -- reads ---------------------------------------------------------------------------------------

    def _in_order(self) -> list[LocalTask]:
        return sorted(self.tasks.values(), key=lambda t: t.seq)

    def view(self, name: str, now: datetime) -> TaskView:
        return view(self.task(name), self.config, self.paths, now=now,
                    queue_position=self._positions(now).get(name))

    def views(self, now: datetime) -> list[ListedView]:
        """Every task's view, then one for each stored task that no longer reads (never left out)."""
        return [*self.readable_views(now), *(unreadable_view(name, why) for name, why in self.broken.items())]

    def readable_views(self, now: datetime) -> list[TaskView]:
        positions = self._positions(now)
        return [view(t, self.config, self.paths, now=now, queue_position=positions.get(t.name))
                for t in self._in_order()]

    def _positions(self, now: datetime) -> dict[str, int]:
        return queue_positions(self.tasks.values(), boosts(self.tasks.values(), self.config.boost_policy(), now=now))

    def status(self, now: datetime) -> dict[str, Any]:
        return status(self._in_order(), self.config, broken=self.broken, now=now)

    def render_metrics(self, now: datetime) -> str:
        """The Prometheus exposition: the counters as they ran, the gauges from the tasks' views now."""
        self.metrics.observe_views(self.readable_views(now))
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
                self.effects.apply(t, effects, now)
        self._flush()

    def kill_overdue(self, now: datetime) -> None:
        for t in self.tasks.values():
            if t.gang is not None:
                self.effects.apply(t, t.gang.kill_overdue(now=now), now)

    def mark_lost_on_shutdown(self, now: datetime) -> None:
        """After `down`: the gangs stopped for it are lost; everything is persisted."""
        for t in self.tasks.values():
            g = t.gang
            if (g is not None and g.stopping is StopReason.DELETE and g.attempt == t.state.attempt
                    and not t.terminal and not t.cancel_requested):
                g.stopping, g.lost, g.lost_why = None, True, recovery.STOPPED_BY_DOWN
                g.touch()
        self._flush()
        self.heartbeat(now)



def _same_task(stored: dict[str, Any], doc: dict[str, Any]) -> bool:
    """Whether a submit repeats the stored one (a retry): the same manifest from the same place. The
    environment it brings may differ (another shell); the stored one stays the task's."""
    keys = ("manifest", "source", "cwd")
    return all(stored.get(k) == doc.get(k) for k in keys)
