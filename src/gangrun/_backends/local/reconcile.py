"""One reconcile of one local task, as a pure function: the task and its twins in, a state and actions out.

    reconcile(task, *, now) -> (state | None, [action, ...])

`gangrun._core.lifecycle.step` decides, as for the Kubernetes backend; this module turns its gang
intents into the local twins' actions, names the preemptor (known locally) and finds the garbage. The
shell (`controller.py`) stores the returned state and the recorded events in ONE transaction, and only
then carries out the actions in order. Every action is idempotent and named by (task, attempt):
creating the gang of an attempt that has one, or deleting a gang already deleted, does nothing.

A RETRY from the engine is followed in the same reconcile by the CREATE of the next attempt, so the
state stored holds the new attempt and the actions are "delete old gang, create new gang". One gang
runs at a time: while the workers of the old attempt's gang are still stopping (a worker using its
grace period), the new gang is not created and its `GangCreated` is not recorded; the reconcile after
the last old worker exits creates it. Until then a round with the same twins decides the same thing
and so changes nothing, records nothing and asks for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from gangrun._backends.local import adapter
from gangrun._backends.local.task import LocalTask
from gangrun._core import lifecycle, stop_causes
from gangrun._core.actions import RecordEvent, RequeueAt
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType


@dataclass(frozen=True)
class CreateJobSet:
    """Create the gang twin (suspended) and the Workload twin of `attempt`."""

    attempt: int


@dataclass(frozen=True)
class DeleteJobSet:
    """Stop every worker of `attempt`'s gang for good, telling them `cause` and `message`."""

    attempt: int
    cause: str
    message: str


Action = CreateJobSet | DeleteJobSet | RecordEvent | RequeueAt


def reconcile(task: LocalTask, *, now: datetime) -> tuple[TaskState | None, list[Action]]:
    """Decide one step for `task`. Returns the new state (None when unchanged) and the actions."""
    g = task.gang
    obs = adapter.observe(task.state.attempt, g, task.workload)
    s = lifecycle.step(task.spec, task.state, obs, now=now, cancelled=task.cancel_requested)
    actions: list[Action] = []
    for part in s.parts:
        events: list[Event] = list(part.events)
        carry: list[Action] = []
        if isinstance(part.gang, lifecycle.CreateGang):
            if _old_gang_stopping(task, part.gang.attempt):  # created, and said so, once the old workers are gone
                events = [e for e in events if e.type is not EventType.GANG_CREATED]
            else:
                carry = [CreateJobSet(part.gang.attempt)]
        elif isinstance(part.gang, lifecycle.DeleteGang):
            carry = [DeleteJobSet(part.gang.attempt, part.gang.notice.cause, part.gang.notice.message)]
        actions += [RecordEvent(_with_preemptor(e, task)) for e in events]
        actions += carry
    actions += _garbage(task, s.state, already={a.attempt for a in actions if isinstance(a, DeleteJobSet)})
    if s.wake_at is not None:
        actions.append(RequeueAt(s.wake_at))
    return (s.state if s.changed else None), actions


def _old_gang_stopping(task: LocalTask, attempt: int) -> bool:
    """Whether an earlier attempt's gang still has workers (stopping): the next gang waits for them."""
    g = task.gang
    return g is not None and g.attempt < attempt and bool(g.live)


def _garbage(task: LocalTask, state: TaskState, *, already: set[int]) -> list[Action]:
    """The delete of the task's gang when it is garbage (`lifecycle.garbage`) and not deleted yet."""
    g = task.gang
    if g is None or g.deleted:
        return []
    return [DeleteJobSet(attempt, stop_causes.ATTEMPT_ENDED, state.info.reason)
            for attempt in lifecycle.garbage(state, [g.attempt], already=already)]


def _with_preemptor(e: Event, task: LocalTask) -> Event:
    """Locally we know who preempted whom: say so on the timeline."""
    wl = task.workload
    if e.type is not EventType.PREEMPTED or wl is None or not wl.preempted_by:
        return e
    return replace(e, message=f"preempted by task {wl.preempted_by}; {e.message}",
                   data={**e.data, "preemptor": wl.preempted_by})
