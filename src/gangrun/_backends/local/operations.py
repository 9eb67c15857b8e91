"""What a client asks of the local control plane, as functions of the `Controller`: submit, cancel,
delete, evict, deactivate/activate, configure, and a worker's exit that the daemon reports.

Each changes tasks in memory and marks them dirty; the controller's next round (`Controller.tick`)
reconciles, stores and acts on them. `cancel` (and `delete`, which cancels first) runs that round at
once, so the answer a client gets already says what happened.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from gangrun._backends.local import admission
from gangrun._backends.local.controller import Controller
from gangrun._backends.local.gang import NODE_DISRUPTION
from gangrun._backends.local.inject import inject
from gangrun._backends.local.purge import dependents
from gangrun._backends.local.purge import purge_deleted as _purge_deleted
from gangrun._backends.local.resume_check import check_resume_from
from gangrun._backends.local.task import LocalTask
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core.checkpoint_root import refuse_if_depended_on
from gangrun._core.pod_merge import local_ignored
from gangrun._core.priority_boost import BoostPolicy
from gangrun._core.spec import GENERATED_SUFFIX_LEN, parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from gangrun._errors import UsageError

_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the API server's alphabet for generated names: no vowels


def submit(ctl: Controller, doc: dict[str, Any], now: datetime) -> str:
    now = ctl.at(now)
    spec = parse_manifest(doc["manifest"], source=doc.get("source", ""))
    if not spec.name:
        spec = replace(spec, name=_generate(ctl, spec.generate_name))
    name = spec.name
    if name in ctl.broken:
        raise UsageError(f'a task named "{name}" exists but cannot be read ({ctl.broken[name]}); '
                         f"`gangrun delete {name}` removes it")
    existing = ctl.tasks.get(name)
    if existing is not None and existing.deleting:
        raise UsageError(f'task "{name}" is being deleted (its workers are stopping); submit again in a moment')
    if existing is not None:
        if _same_task(existing.doc, doc):
            return name  # the same manifest again (a retried submit): the task it made
        raise UsageError(f'a task named "{name}" already exists (phase {existing.state.phase}) with a '
                         "different manifest; choose another metadata.name or delete it first")
    admission.check_submit(spec, ctl.config)
    check_resume_from(spec, ctl.tasks, ctl.paths)
    task = LocalTask(name=name, uid=str(uuid.uuid4()), seq=ctl.store.next_seq(), doc=doc, spec=spec,
                     state=TaskState.new(now=now))
    pc = spec.priority_class or ctl.config.default_priority_class
    ignored = local_ignored(spec.pod_template)
    task.record(Event(time=now, type=EventType.SUBMITTED, attempt=1, data={"ignoredLocally": ignored},
                      message=f"submitted to queue {spec.queue} (priority class {pc} = "
                              f"{ctl.config.priority_of(pc)})" + (
                                  f"; ignored locally: {', '.join(ignored)}" if ignored else "")))
    ctl.store.insert(task.to_row(), task.events)
    task.events, task.saved = [], task.fingerprint()
    ctl.tasks[name] = task
    ctl.dirty.add(name)
    return name


def _generate(ctl: Controller, prefix: str) -> str:
    """`metadata.generateName`: the prefix and 5 random characters, as the API server makes a name."""
    while True:
        name = prefix + "".join(ctl.rng.choices(_SUFFIX_CHARS, k=GENERATED_SUFFIX_LEN))
        if name not in ctl.tasks and name not in ctl.broken:
            return name


def cancel(ctl: Controller, name: str, now: datetime) -> bool:
    task = ctl.task(name)
    if task.terminal or task.cancel_requested:
        ctl.flush()
        return False
    task.cancel_requested = True
    ctl.flush()
    ctl.dirty.add(name)
    ctl.tick(now)
    return True


def delete(ctl: Controller, name: str, *, force: bool, now: datetime, purge: bool = False) -> bool:
    """Remove an ended task, its timeline and its logs; its checkpoints too with `purge` (kept by
    default: only `spec.checkpoint.resumeFrom` ever loads them again). A running task is refused
    unless `force` (cancel first)."""
    if name in ctl.broken and name not in ctl.tasks:
        ctl.store.delete(name)
        del ctl.broken[name]
        return True
    task = ctl.task(name)
    if not task.terminal and not force:
        raise UsageError(f'task "{name}" is {task.state.phase.value}; cancel it first or use --force')
    if purge and not force:
        users = dependents(ctl.tasks.values(), [ctl.root(task)], ctl.paths, besides=name)
        refuse_if_depended_on(name, users)
    task.deleting, task.purging = True, purge
    cancel(ctl, name, now)
    ctl.reap(task)
    return True


def purge_deleted(ctl: Controller, name: str, *, force: bool) -> list[str]:
    """`delete NAME --purge` of a name no task has (`purge.purge_deleted`)."""
    return _purge_deleted(ctl.store, ctl.paths, ctl.tasks, name, force=force)


def _live_workload(ctl: Controller, name: str) -> tuple[LocalTask, WorkloadTwin]:
    task = ctl.task(name)
    wl = task.workload
    if task.terminal or wl is None or wl.attempt != task.state.attempt or wl.finished:
        raise UsageError(f'task "{name}" has no live workload (phase {task.state.phase})')
    return task, wl


def evict(ctl: Controller, name: str, reason: str, now: datetime) -> None:
    """Inject an eviction (B6), as Kueue or a node would cause it."""
    now = ctl.at(now)
    task, wl = _live_workload(ctl, name)
    if not wl.reserved:
        raise UsageError(f'task "{name}" is not admitted (nothing to evict); phase {task.state.phase}')
    ctl.effects.apply(task, inject(reason, wl, task.gang, nodes=task.spec.nodes,
                                   grace=task.spec.termination_grace, now=now), now)
    ctl.dirty.add(name)


def set_active(ctl: Controller, name: str, active: bool, now: datetime) -> None:
    now = ctl.at(now)
    _, wl = _live_workload(ctl, name)
    if active:
        wl.activate(now=now)
    else:
        wl.deactivate(now=now)
    ctl.dirty.add(name)


def configure(ctl: Controller, *, cpu: str | None, memory: str | None, gpu: int | None,
              queues: list[str] | None = None, priority_classes: dict[str, int] | None = None,
              metrics_port: int | None = None, priority_boost: bool | None = None,
              boost_steps: list[float] | None = None) -> None:
    cfg = ctl.config.with_quota(cpu=cpu, memory=memory, gpu=gpu)
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
    ctl.config = cfg
    ctl.store.put_config(cfg.for_json())
    ctl.dirty.update(ctl.tasks)


def on_exit(ctl: Controller, name: str, attempt: int, rank: int, code: int, now: datetime) -> None:
    now = ctl.at(now)
    task = ctl.tasks.get(name)
    g = task.gang if task is not None else None
    if task is None or g is None or g.attempt != attempt:
        return
    if code != 0 and g.stopping is None:
        lost = g.lost_with_its_node(rank)
        task.record(Event(time=now, type=EventType.WORKER_EXITED, attempt=attempt,
                          message=f"worker rank {rank} " + ("was lost with its node" if lost else "exited") +
                                  f" (exit code {code})",
                          data={"rank": rank, "code": code, **({"cause": NODE_DISRUPTION} if lost else {})}))
    counted = g.restarts_count_towards_max
    ctl.effects.apply(task, g.exited(rank, code, grace=task.spec.termination_grace, now=now), now)
    if g.restarts_count_towards_max > counted:  # the failure policy restarts the gang: its processes, in place
        task.record(Event(time=now, type=EventType.RESTARTING, attempt=attempt, data={"inPlace": True,
                                                                                       "restart": g.restarts},
                          message=f"worker rank {rank} exited with code {code}; the gang restarts in place "
                                  f"(restart {g.restarts}): its workers are processes, started again"))
    ctl.dirty.add(name)


def _same_task(stored: dict[str, Any], doc: dict[str, Any]) -> bool:
    """Whether a submit repeats the stored one (a retry): the same manifest from the same place. The
    environment it brings may differ (another shell); the stored one stays the task's."""
    keys = ("manifest", "source", "cwd")
    return all(stored.get(k) == doc.get(k) for k in keys)
