"""One reconcile of one ClusteredTask, as a pure function: objects in, a status patch and actions out.

    reconcile(task, jobset, workloads, pods, *, now, owned_jobsets=()) -> (status | None, [action, ...])

The shell (`controller.py`) reads the objects, writes the returned status ONCE with optimistic
concurrency, and only then carries out the actions in order. Persisting first is what makes a
restart at any moment safe: the attempt number is on the API server before its JobSet exists, and
every action is idempotent and named by (task, attempt) — creating an existing JobSet or deleting a
missing one is success.

A RETRY from the engine is followed in the same reconcile by the CREATE of the next attempt, so the
status written holds the new attempt and the actions are "delete old JobSet, create new JobSet".

`gangrun._core.lifecycle.step` decides, as for the local backend, and says what to do to the gang
and what the workers are told. This module turns that into Kubernetes actions:

* the stop notice (B3): `AnnotatePods` writes `{"cause", "message", "deadline"}` on the live worker
  pods, which read it through a downward-API file at SIGTERM. It comes before any delete the same
  reconcile asks for; for Kueue's own evictions it is written at the Evicted condition, before
  Kueue suspends the JobSet and the Job controller deletes the pods;
* the accounting (B5), folded by the lifecycle step and stored in `status.accounting`, fed by the
  checkpoints workers report (their termination messages and live reports, each new commit also a
  CheckpointCommitted event: `seen_events.py`);
* garbage: the owned JobSets `lifecycle.garbage` says must go, and an elastic gang's replaced ones;
* a node about to go (B9, `_core/maintenance.py`): the step tells every worker `NodeMaintenance`; once
  every live worker carries that notice, written at least `SETTLE` ago (the kubelet's time to refresh
  the notice file), `EvictPods` evicts the workers on that node as `kubectl drain` does. Each gets
  DisruptionTarget, and JobSet restarts the gang for it, charged to nothing, as for any node
  disruption; the new pods are not scheduled on the cordoned or tainted node.

The status returned is built by `status.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from gangrun._backends.kube import adapter, crd, elastic, fields, in_place, reports, seen_events
from gangrun._backends.kube.adapter import WorkloadLookup
from gangrun._backends.kube.elastic import Sizing
from gangrun._backends.kube.nodes import Nodes
from gangrun._backends.kube.quota import Capacity
from gangrun._backends.kube.render import jobset_name, report_url
from gangrun._backends.kube.status import status_patch
from gangrun._backends.kube.stored import load_accounting, load_state, persisted, task_spec
from gangrun._core import elastic as sizes
from gangrun._core import lifecycle, stop_causes
from gangrun._core import worker_env as wenv
from gangrun._core.actions import RecordEvent, RequeueAt
from gangrun._core.engine import ActionKind
from gangrun._core.eviction import NO_EVICTION, classify_eviction
from gangrun._core.observation import Observation, WorkloadRead
from gangrun._core.spec import TaskSpec
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from gangrun._errors import SpecError

INVALID_SPEC = "InvalidSpec"
WARNING_EVENTS = frozenset({EventType.PREEMPTED, EventType.EVICTED, EventType.ATTEMPT_ENDED, EventType.FAILED,
                            EventType.DISRUPTED, EventType.GRACE_TOO_SHORT, EventType.RESUME_FOUND_NOTHING})
LIVE_PHASES = ("Pending", "Running")
SETTLE = timedelta(seconds=1)  # from a NodeMaintenance notice on every worker to the evictions it announces


@dataclass(frozen=True)
class CreateJobSet:
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


@dataclass(frozen=True)
class DeleteJobSet:
    name: str


def event_type(event: Event) -> str:
    """The Kubernetes Event type of a timeline event."""
    return "Warning" if event.type in WARNING_EVENTS else "Normal"


@dataclass(frozen=True)
class AnnotatePods:
    """Write the stop notice on these worker pods (a merge patch of one annotation), and push it to
    their launchers at `urls` (it lands there first: the kubelet projects the annotation later, and
    never once the pod is being deleted)."""

    names: tuple[str, ...]
    notice: str  # the JSON the SDK reads from GANGRUN_STOP_FILE
    urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class EvictPods:
    """Evict these worker pods through the Eviction API: their node is about to go (after the notices)."""

    names: tuple[str, ...]


Action = CreateJobSet | DeleteJobSet | RecordEvent | RequeueAt | AnnotatePods | EvictPods | in_place.OrderRestart


def reconcile(task: dict[str, Any], jobset: dict[str, Any] | None, workloads: WorkloadLookup,
              pods: Iterable[dict[str, Any]] = (), *, now: datetime, owned_jobsets: Sequence[dict[str, Any]] = (),
              capacity: Capacity | None = None,
              live: Mapping[str, str] | None = None,
              nodes: Nodes | None = None,
              rounds: Mapping[str, str] | None = None,
              placeable: int | None = None) -> tuple[dict[str, Any] | None, list[Action]]:
    """Decide one step for `task`. `jobset` is the current JobSet of the current attempt if it exists
    (`elastic.current_jobset`); `capacity`: its ClusterQueue's free quota, which sizes an elastic gang;
    `live`: the reports running workers served (pod uid -> text, `live_reports.py`); `nodes`: the Nodes
    its pods run on (by name), which say whether one is about to go; `rounds`: what the launchers
    `in_place.targets` names said on GET /round (pod name -> text); `placeable`: how many nodes may take
    an elastic gang's workers (`nodes.placeable`), which it shrinks onto when one is lost.

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

    pods = list(pods)
    obs = Observation()
    sz = elastic.load(task, before.attempt)
    cancelled = bool((meta.get("annotations") or {}).get(crd.CANCEL_ANNOTATION)) and not before.phase.terminal
    if jobset is not None and adapter.attempt_of(jobset) != before.attempt:
        jobset = None  # a JobSet of another attempt says nothing about this one
    if not sz.created:
        if jobset is None and not cancelled and not before.phase.terminal:
            # A resize named this JobSet and the controller stopped before creating it: create it now.
            return None, [CreateJobSet(elastic.render(spec, sz, owner_uid=meta.get("uid")))]
        sz = replace(sz, created=True)
    own = adapter.of_jobset(pods, jobset)  # the current JobSet's pods (an elastic gang's earlier JobSets' are going)
    ip = in_place.InPlace.load(task, before.attempt)
    restarting: list[Action] = []
    if not cancelled:
        obs = elastic.observed(adapter.observe(jobset, workloads, own, nodes), sz)
        if sz.growing and obs.gang is not None and not obs.gang.restarting:
            sz = replace(sz, growing="")  # Kueue admitted the larger JobSet
        told = {n: r for n, text in (rounds or {}).items() if (r := in_place.Round.parse(text)) is not None}
        this_round = adapter.current_round(own, adapter.restarts_of(jobset))
        # Not only once the gang was seen up: a worker may fail, or a pod go, before every pod is Ready.
        running = (before.eviction is None and not before.waiting and not before.phase.terminal
                   and classify_eviction(obs.workload, obs.workload_read).kind in NO_EVICTION)
        since = max((e.readmitted_at for e in before.evictions if e.attempt == before.attempt and e.readmitted_at),
                    default=None)
        d = in_place.decide(spec, ip, obs.gang, this_round, told, running=running, now=now, since=since)
        obs, ip, restarting = replace(obs, gang=d.gang), d.state, list(d.actions)
    s = lifecycle.step(spec, before, obs, now=now, cancelled=cancelled)

    # What the backend saw itself (a checkpoint a worker left, the gang admitted) is new by construction;
    # what the lifecycle step says is new only if the state moved (a create repeated until the JobSet
    # shows in the cache says nothing new).
    seen: list[Action] = []
    if persisted(task) is None:
        seen.append(RecordEvent(Event(time=now, type=EventType.SUBMITTED, message=f"task {name} submitted",
                                      attempt=before.attempt)))
    ledger = load_accounting(task)
    commits = [c for c in reports.checkpoints(pods, live) if reports.reports_for(c.attempt, before.attempt)]
    seen += seen_events.checkpoint_events(ledger, commits, now=now)
    seen += restarting
    steps = [t for a, t in reports.first_steps(pods, live) if a in (None, before.attempt)]
    seen += seen_events.first_step_events(ledger, steps, attempt=before.attempt, now=now)
    resumed, said = seen_events.resumed(task, reports.resumes(pods, live), attempt=before.attempt, now=now)
    seen += said
    seen += seen_events.workers_running(ledger, before, adapter.workers_running_at(jobset, own), now=now)
    seen += seen_events.admitted(ledger, before, obs, now=now, size=(sz.nodes, spec.nodes) if spec.elastic else None)
    decided: list[Action] = []
    ordered = any(isinstance(a, in_place.OrderRestart) and not a.recreate for a in restarting)
    for i, part in enumerate(s.parts):
        decided += [RecordEvent(e) for e in part.events]
        if i == 0 and s.notice is not None and not (ordered and s.notice.cause == stop_causes.RESTART):
            decided += _notice(s.notice, own)  # an in-place restart's order carries its notice
            if s.notice.cause == stop_causes.NODE_MAINTENANCE and part.gang is None:
                decided += _move(own, jobset, nodes or {}, spec.termination_grace, now=now)
        if isinstance(part.gang, lifecycle.CreateGang):
            if not (sz.attempt == part.gang.attempt and sz.nodes):
                sz = Sizing(attempt=part.gang.attempt, nodes=elastic.start_size(spec, capacity))  # sized once
            decided.append(CreateJobSet(elastic.render(spec, sz, owner_uid=meta.get("uid"))))
        elif isinstance(part.gang, lifecycle.DeleteGang):
            attempt = part.gang.attempt
            decided.append(DeleteJobSet(jobset_name(spec.name, attempt, sz.generation if sz.attempt == attempt else 0)))
    state = s.state
    if s.decided.action.kind is ActionKind.NONE and not cancelled:
        sz, more = _resize(spec, sz, state, obs, jobset, workloads, own, capacity, now=now, owner_uid=meta.get("uid"),
                           placeable=placeable)
        decided += more
        if more and sz.growing:  # the gang stops to restart larger: say so now, not at the next reconcile
            state = state.with_info(state.info.advance(state.phase, sz.growing))
    decided += _garbage(owned_jobsets, state, name, already={a.name for a in decided if isinstance(a, DeleteJobSet)},
                        current=jobset_name(name, state.attempt, sz.generation if sz.attempt == state.attempt else 0))
    if not cancelled and not sz.growing:
        seen += seen_events.worker_failed(ledger, obs.gang, s.decided.state, attempt=before.attempt, now=now)
    extra = {**elastic.status(spec, sz, state, obs.gang), seen_events.RESUME_RESULT: resumed, **ip.for_storage()}
    if status_patch(task, state, now=now, spec=spec, ledger=ledger, extra=extra) is None:
        decided = [a for a in decided if not isinstance(a, RecordEvent)]
    actions = seen + decided
    # the accounting is the timeline folded, event by event, as on the local backend
    ledger, warnings = lifecycle.fold(ledger, [a.event for a in actions if isinstance(a, RecordEvent)],
                                      grace_seconds=spec.termination_grace.total_seconds())
    actions += [RecordEvent(w) for w in warnings]
    status = status_patch(task, state, now=now, spec=spec, ledger=ledger, extra=extra)
    if status is None:
        actions = [a for a in actions if not isinstance(a, RecordEvent)]
    for wake in (s.wake_at, elastic.grow_at(spec, sz, state, now=now), elastic.shrink_at(spec, obs.gang, now=now)):
        if wake is not None:
            actions.append(RequeueAt(wake))
    return status, actions


def _notice(n: lifecycle.Notice, pods: Sequence[dict[str, Any]]) -> list[Action]:
    """The notice of a stop on each live worker pod that does not carry its cause yet. A pod already
    being deleted is told too: the kubelet projects no annotation of it any more, but its launcher takes
    the push, and the worker reads the cause it missed at SIGTERM when it asks (`ctx.stop_notice`)."""
    cause = n.cause
    notice = json.dumps({"cause": cause, "message": n.message, "deadline": round(n.deadline.timestamp(), 3)},
                        sort_keys=True)
    names, urls = [], []
    for pod in pods:
        md = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") not in LIVE_PHASES or not md.get("name"):
            continue
        if not stop_causes.replaces(_told(md).get("cause"), cause):
            continue  # told already (a new deadline for the same stop would only move it later)
        names.append(md["name"])
        if (url := report_url(pod, wenv.NOTICE_PATH)) is not None:
            urls.append(url)
    return [AnnotatePods(names=tuple(sorted(names)), notice=notice, urls=tuple(sorted(urls)))] if names else []


def _told(md: dict[str, Any]) -> dict[str, Any]:
    """The stop notice a pod's metadata carries ({} for none, or one that is not a JSON object)."""
    try:
        told = json.loads((md.get("annotations") or {}).get(crd.STOP_NOTICE_ANNOTATION) or "{}")
    except ValueError:
        return {}
    return told if isinstance(told, dict) else {}


def _move(pods: Sequence[dict[str, Any]], js: dict[str, Any] | None, nodes: Nodes, grace: timedelta, *,
          now: datetime) -> list[Action]:
    """Evict the workers on nodes about to go once every live worker carries its NodeMaintenance notice,
    `SETTLE` after the last was written (its deadline less the grace period); until then, look again then."""
    movers = adapter.to_move(js, pods, nodes)
    if not movers:
        return []
    written: list[datetime] = []
    for pod in pods:
        md = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") not in LIVE_PHASES or md.get("deletionTimestamp"):
            continue
        told = _told(md)
        deadline = told.get("deadline")
        if told.get("cause") != stop_causes.NODE_MAINTENANCE or not isinstance(deadline, int | float):
            return []  # not told yet: its notice is being written, and that change brings the task back
        written.append(datetime.fromtimestamp(deadline, now.tzinfo) - grace)
    ready = max(written, default=now) + SETTLE
    if now < ready:
        return [RequeueAt(ready)]
    return [EvictPods(names=tuple(sorted(str(p["metadata"]["name"]) for p in movers)))]


def _resize(spec: TaskSpec, sz: Sizing, state: TaskState, obs: Observation, js: dict[str, Any] | None,
            workloads: WorkloadLookup, pods: Sequence[dict[str, Any]], capacity: Capacity | None, *,
            now: datetime, owner_uid: str | None, placeable: int | None) -> tuple[Sizing, list[Action]]:
    """An elastic gang's change of size (`elastic.resize`): a running gang gets the stop notice (cause
    Resize) first, then its JobSet is replaced by one of the new size, in the same attempt."""
    workload = adapter.newest_workload(workloads.items) if workloads.read is WorkloadRead.FOUND else None
    r = elastic.resize(spec, sz, state, obs.gang if js is not None else None, workload=workload, capacity=capacity,
                       now=now, owner_uid=owner_uid, placeable=placeable)
    if r is None:
        return sz, []
    notice = lifecycle.Notice(sizes.RESIZE, r.event.message, now + spec.termination_grace)
    out: list[Action] = _notice(notice, pods) if r.running else []
    return r.sizing, [*out, RecordEvent(r.event), DeleteJobSet(r.replaced), CreateJobSet(r.jobset)]


def _garbage(owned: Sequence[dict[str, Any]], state: TaskState, task: str, *, already: set[str],
             current: str) -> list[Action]:
    """The task's owned JobSets not being deleted yet whose attempt is garbage (`lifecycle.garbage`), and
    those of the current attempt but for its current JobSet (an elastic gang's replaced ones)."""
    going = [js for js in owned if isinstance(md := js.get("metadata"), dict) and not md.get("deletionTimestamp")
             and md.get("name") not in already and fields.labels(js).get(crd.TASK_LABEL) == task]
    attempts = [adapter.attempt_of(js) for js in going]
    ended = lifecycle.garbage(state, [a for a in attempts if a is not None])
    return [DeleteJobSet(js["metadata"]["name"]) for js, attempt in zip(going, attempts, strict=True)
            if attempt is None or attempt in ended or js["metadata"]["name"] != current]


def _invalid(task: dict[str, Any], state: TaskState, problem: str, *,
             now: datetime) -> tuple[dict[str, Any] | None, list[Action]]:
    """A spec the CRD schema let through but gangrun refuses: fail the task, naming the field."""
    if state.phase.terminal:
        return None, []
    failed = state.with_failed(at=now, attempt_code=INVALID_SPEC, attempt_reason=problem, code=INVALID_SPEC,
                               message=problem, reason=f"{INVALID_SPEC}: {problem}")
    event = Event(time=now, type=EventType.FAILED, message=f"{INVALID_SPEC}: {problem}", attempt=state.attempt)
    return status_patch(task, failed, now=now, spec=None), [RecordEvent(event)]
