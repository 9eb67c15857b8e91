"""One reconcile of one ClusteredTask, as a pure function: objects in, a status patch and actions out.

    reconcile(task, jobset, workloads, pods, *, now, owned_jobsets=()) -> (status | None, [action, ...])

The shell (`controller.py`) reads the objects, writes the returned status ONCE with optimistic
concurrency, and only then carries out the actions in order. Persisting first is what makes a
restart at any moment safe: the attempt number is on the API server before its JobSet exists, and
every action is idempotent and named by (task, attempt) — creating an existing JobSet or deleting a
missing one is success.

A RETRY from the engine is followed in the same reconcile by the CREATE of the next attempt, so the
status written holds the new attempt and the actions are "delete old JobSet, create new JobSet".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gangrun._backends.kube import adapter, crd
from gangrun._backends.kube.adapter import WorkloadLookup
from gangrun._backends.kube.render import check_renderable, jobset_name, render_jobset
from gangrun._core.conditions import Condition, set_condition
from gangrun._core.engine import ActionKind, Decision, cancel, decide
from gangrun._core.observation import Observation
from gangrun._core.phases import Phase
from gangrun._core.spec import TaskSpec, parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType, transition_events
from gangrun._errors import SpecError

INVALID_SPEC = "InvalidSpec"
WARNING_EVENTS = frozenset({EventType.PREEMPTED, EventType.EVICTED, EventType.ATTEMPT_ENDED, EventType.FAILED})
# metadata keys parse_manifest knows; the API server adds others (finalizers, ownerReferences, ...).
_MANIFEST_METADATA = ("name", "namespace", "labels", "annotations")


@dataclass(frozen=True)
class CreateJobSet:
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


@dataclass(frozen=True)
class DeleteJobSet:
    name: str


@dataclass(frozen=True)
class RecordEvent:
    event: Event

    @property
    def type(self) -> str:  # the Kubernetes Event type
        return "Warning" if self.event.type in WARNING_EVENTS else "Normal"


@dataclass(frozen=True)
class RequeueAt:
    at: datetime


Action = CreateJobSet | DeleteJobSet | RecordEvent | RequeueAt


def task_spec(task: dict[str, Any]) -> TaskSpec:
    """The TaskSpec of a ClusteredTask object read from the API, one a JobSet can be rendered from.
    Raises SpecError."""
    meta = m if isinstance(m := task.get("metadata"), dict) else {}
    doc = {"apiVersion": crd.API_VERSION, "kind": crd.KIND, "spec": task.get("spec"),
           "metadata": {k: meta[k] for k in _MANIFEST_METADATA if k in meta}}
    spec = parse_manifest(doc)
    check_renderable(spec)
    return spec


def _persisted(task: dict[str, Any]) -> dict[str, Any] | None:
    """The status the controller wrote, or None for a task it has not seen yet."""
    status = task.get("status")
    return status if isinstance(status, dict) and status.get("phase") else None


def load_state(task: dict[str, Any], *, now: datetime) -> TaskState:
    """The persisted state, or a fresh one (attempt 1) for a task the controller has not seen."""
    status = _persisted(task)
    return TaskState.from_storage(status) if status is not None else TaskState.new(now=now)


def reconcile(task: dict[str, Any], jobset: dict[str, Any] | None, workloads: WorkloadLookup,
              pods: Iterable[dict[str, Any]] = (), *, now: datetime,
              owned_jobsets: Sequence[dict[str, Any]] = ()) -> tuple[dict[str, Any] | None, list[Action]]:
    """Decide one step for `task`. `jobset` is the JobSet of the current attempt if it exists.

    Returns the new `.status` (None when nothing changed) and the actions to take after writing it.
    """
    meta = task.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        # Deleted in the foreground: the garbage collector is removing its JobSets, which must not
        # read as lost gangs to replace. The task and its status go when they are gone.
        return None, []
    name = meta.get("name", "")
    before = load_state(task, now=now)
    try:
        spec = task_spec(task)
    except SpecError as e:
        return _invalid(task, before, str(e), now=now)
    namespace = meta.get("namespace") or spec.namespace
    spec = replace(spec, namespace=namespace)

    if (meta.get("annotations") or {}).get(crd.CANCEL_ANNOTATION) and not before.phase.terminal:
        decisions = [cancel(before, now=now, reason="cancelled by the user")]
    else:
        if jobset is not None and adapter.attempt_of(jobset) != before.attempt:
            jobset = None  # a JobSet of another attempt says nothing about this one
        obs = adapter.observe(jobset, workloads, pods)
        decisions = [decide(spec.policy(), before, obs, now=now)]
        if decisions[-1].action.kind is ActionKind.RETRY:
            # The next attempt's gang does not exist yet: decide again so its CREATE is in this reconcile.
            decisions.append(decide(spec.policy(), decisions[-1].state, Observation(), now=now))

    actions: list[Action] = []
    if _persisted(task) is None:
        actions.append(RecordEvent(Event(time=now, type=EventType.SUBMITTED, message=f"task {name} submitted",
                                         attempt=before.attempt)))
    state = before
    for d in decisions:
        actions += [RecordEvent(e) for e in transition_events(state, d.state, d.action, now=now)]
        actions += _carry_out(d, spec, owner_uid=meta.get("uid"))
        state = d.state
    actions += _garbage(owned_jobsets, state, name, already={a.name for a in actions if isinstance(a, DeleteJobSet)})
    status = _status_patch(task, state, now=now)
    if status is None:
        # Events describe transitions; an unchanged state (e.g. a create repeated until the JobSet
        # shows in the cache) must not repeat them.
        actions = [a for a in actions if not isinstance(a, RecordEvent)]
    wake = decisions[-1].wake_at
    if wake is not None:
        actions.append(RequeueAt(wake))
    return status, actions


def _carry_out(d: Decision, spec: TaskSpec, *, owner_uid: str | None) -> list[Action]:
    kind, attempt = d.action.kind, d.action.attempt
    if kind is ActionKind.CREATE_GANG:
        return [CreateJobSet(render_jobset(spec, attempt=attempt, owner_uid=owner_uid))]
    if kind in (ActionKind.RETRY, ActionKind.FAIL, ActionKind.ABORT):
        return [DeleteJobSet(jobset_name(spec.name, attempt))]
    return []  # NONE, or SUCCEED: the gang stays for its logs


def _garbage(owned: Sequence[dict[str, Any]], state: TaskState, task: str, *, already: set[str]) -> list[Action]:
    """Owned JobSets that are not the current attempt's (all of them once the task failed or aborted)."""
    keep_current = state.phase not in (Phase.FAILED, Phase.ABORTED)
    out: list[Action] = []
    for js in owned:
        md = js.get("metadata") if isinstance(js, dict) else None
        if not isinstance(md, dict) or md.get("deletionTimestamp") or md.get("name") in already:
            continue
        if adapter.labels(js).get(crd.TASK_LABEL) != task:
            continue
        if keep_current and adapter.attempt_of(js) == state.attempt:
            continue
        out.append(DeleteJobSet(md["name"]))
        already.add(md["name"])
    return out


def _invalid(task: dict[str, Any], state: TaskState, problem: str, *,
             now: datetime) -> tuple[dict[str, Any] | None, list[Action]]:
    """A spec the CRD schema let through but gangrun refuses: fail the task, naming the field."""
    if state.phase.terminal:
        return None, []
    failed = state.with_failed(at=now, attempt_code=INVALID_SPEC, attempt_reason=problem, code=INVALID_SPEC,
                               message=problem, reason=f"{INVALID_SPEC}: {problem}")
    event = Event(time=now, type=EventType.FAILED, message=f"{INVALID_SPEC}: {problem}", attempt=state.attempt)
    return _status_patch(task, failed, now=now), [RecordEvent(event)]


# -- status -------------------------------------------------------------------------------------------


def _conditions(state: TaskState, old: Any, *, now: datetime) -> list[dict[str, Any]]:
    conds = [c for c in adapter.conditions({"status": {"conditions": old}})]
    phase = state.phase
    eviction = state.eviction
    waiting = eviction is not None
    wanted = [
        Condition(type="Running", status=str(phase is Phase.RUNNING and not waiting),
                  reason="WaitingForReadmission" if phase is Phase.RUNNING and waiting else phase.value,
                  message=state.info.reason),
        Condition(type="Evicted", status=str(waiting),
                  reason=(eviction.reason or eviction.kind.value) if eviction is not None else "NotEvicted",
                  message=eviction.message if eviction is not None else ""),
        Condition(type="Finished", status=str(phase.terminal), reason=phase.value if phase.terminal else "NotFinished",
                  message=(state.message or state.info.reason) if phase.terminal else ""),
    ]
    for c in wanted:
        set_condition(conds, c, now=now)
    return [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
             "lastTransitionTime": adapter.format_time(c.last_transition or now)} for c in conds]


def _status_patch(task: dict[str, Any], state: TaskState, *, now: datetime) -> dict[str, Any] | None:
    old = s if isinstance(s := task.get("status"), dict) else {}
    name = (task.get("metadata") or {}).get("name", "")
    new = {**state.for_storage(), "jobSet": jobset_name(name, state.attempt) if name else "",
           "observedGeneration": (task.get("metadata") or {}).get("generation", 0),
           "conditions": _conditions(state, old.get("conditions"), now=now)}
    if _without_nulls(new) == _without_nulls(old):
        return None
    return new


def _without_nulls(v: Any) -> Any:
    # A merge patch deletes keys set to null at every depth of an object (the eviction's unset
    # `readmittedAt` too), so the stored status lacks them: compare with no null anywhere.
    if isinstance(v, dict):
        return {k: _without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_without_nulls(x) for x in v]
    return v
