"""The local control plane's shell around the pure parts: every task in memory, one round at a time.

    tick(now):  until nothing changes (each step is a function below):
        jobs       Kueue's job reconciler and JobSet's timers move the twins (`jobs.sync`); the SDK's
                   checkpoint events are read
        reconcile  the pure `reconcile(task)` → store state + events in ONE transaction → actions
        admit      Kueue's scheduler (`scheduler.schedule`, on the pure `admission.plan`) → reserve / evict
        jobs       again for the Workloads admission touched, so a gang starts or stops at once

No socket, no selector, no clock read here (that is `daemon.py`): the controller is driven by calls
— an operation from a client, a worker exit, a tick — each with the `now` of the daemon's one clock,
and it starts and signals processes only through the `Processes` it is given (`effects.py`). What a
client asks is in `operations.py`, what it reads in `reads.py`, and `local down` in `shutdown.py`:
functions of this controller, which holds the tasks and runs the rounds.

Recovery (`load`, see `recovery.py`) marks every task dirty, so the first round reconciles them all
BEFORE admission runs: a lost gang's next attempt competes for quota with its priority, and nothing
is admitted, started and preempted again in the same second.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta
from typing import Any

from gangrun._backends.local import admission, jobs, recovery
from gangrun._backends.local.config import Config, Paths
from gangrun._backends.local.effects import Effects, Processes, remove_files
from gangrun._backends.local.gang import GangTwin, StopReason
from gangrun._backends.local.reconcile import Action, CreateJobSet, DeleteJobSet, reconcile
from gangrun._backends.local.scheduler import boosts, may_grow_at, schedule
from gangrun._backends.local.store import Store
from gangrun._backends.local.task import LocalTask
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._backends.metrics import Metrics
from gangrun._core import elastic
from gangrun._core.actions import RecordEvent, RequeueAt
from gangrun._core.timeline import Event, EventType
from gangrun._errors import UsageError

log = logging.getLogger(__name__)

ROUNDS_MAX = 50  # rounds of one tick; more means something keeps changing: the rest waits for the next tick
TAIL_EVERY = timedelta(seconds=0.5)  # how often the checkpoint events of running gangs are read


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

    def at(self, now: datetime) -> datetime:
        """Never go back in time, even if the wall clock does: the timeline stays in order."""
        if self.last_now is not None and now < self.last_now:
            now = self.last_now
        self.last_now = now
        return now

    # -- recovery ------------------------------------------------------------------------------------

    def load(self, now: datetime, *, kill_leftovers: recovery.KillLeftovers) -> None:
        now = self.at(now)
        self.tasks, self.broken = recovery.load(self.store, self.effects, now=now, kill_leftovers=kill_leftovers)
        self.dirty.update(self.tasks)
        self.flush()

    def heartbeat(self, now: datetime) -> None:
        self.store.put_heartbeat(now.isoformat())

    # -- the tasks -----------------------------------------------------------------------------------

    def task(self, name: str) -> LocalTask:
        task = self.tasks.get(name)
        if task is None:
            if name in self.broken:
                raise UsageError(f'task "{name}" cannot be read ({self.broken[name]}); '
                                 f"`gangrun delete {name}` removes it")
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UsageError(f'unknown task "{name}" (known tasks: {known})')
        return task

    def reap(self, task: LocalTask) -> bool:
        """Remove a task being deleted once it has ended and none of its workers is left."""
        if not task.deleting or not task.terminal or (task.gang is not None and task.gang.live):
            return False
        self.store.delete(task.name, kept_root="" if task.purging else self.root(task))
        self.tasks.pop(task.name, None)
        self.dirty.discard(task.name)
        remove_files(self.paths, task)
        return True

    def root(self, task: LocalTask) -> str:
        return self.paths.checkpoint_root(task.name, task.uid, task.spec.checkpoint_uri)

    # -- the rounds ----------------------------------------------------------------------------------

    def tick(self, now: datetime) -> None:
        now = self.at(now)
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
            self.flush()  # the decisions are stored before anything is done about them
            for n, actions in planned.items():
                if actions is not None:
                    changed.add(n)
                    self._isolated(n, lambda t, at, acts=actions: self._act(t, acts, at), now)
            touched = self._schedule(now)
            changed |= {n for n in touched if self._isolated(n, self._jobs, now)}
            self.flush()
            for n in changed:
                self._isolated(n, lambda t, _at: self.reap(t), now)
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

    def flush(self) -> None:
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
