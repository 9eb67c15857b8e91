"""JobSet + pods + Kueue Workload (plain dicts from the API) → the engine's `Observation`.

Total functions: a partial, malformed or unexpected object becomes a partial observation, never an
exception, because one odd object must not stop the controller from driving every other task (a
malformed or non-list `status.conditions` counts as not found).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gangrun._backends.kube import crd
from gangrun._backends.kube.fields import as_int, as_list, as_str, conditions, get, labels, parse_time
from gangrun._backends.kube.nodes import Nodes, about_to_go, node_name
from gangrun._backends.kube.render import CONTAINER, REPLICATED_JOB
from gangrun._core import jobset, kueue
from gangrun._core.conditions import find_condition
from gangrun._core.observation import Disruption, Gang, Maintenance, Observation, Workload, WorkloadRead

UNSCHEDULABLE = "Unschedulable"  # a pod's PodScheduled=False reason when no node fits it

# Waiting reasons that no amount of waiting fixes (a bad image name, a broken pod config).
FATAL_WAITING_REASONS = frozenset({"InvalidImageName", "CreateContainerConfigError", "ErrImageNeverPull",
                                   "CreateContainerError"})


@dataclass(frozen=True, kw_only=True)
class WorkloadLookup:
    """What reading the Workloads of a JobSet gave: the candidates, or why none could be read."""

    read: WorkloadRead = WorkloadRead.NOT_FOUND
    items: tuple[dict[str, Any], ...] = ()
    error: str = ""

    @classmethod
    def found(cls, items: Iterable[Any]) -> WorkloadLookup:
        kept = tuple(i for i in items if isinstance(i, dict))
        return cls(read=WorkloadRead.FOUND if kept else WorkloadRead.NOT_FOUND, items=kept)

    @classmethod
    def unreadable(cls, error: str) -> WorkloadLookup:
        return cls(read=WorkloadRead.UNREADABLE, error=error)


def belongs_to(obj: Any, task_uid: str) -> bool:
    """Whether a JobSet or pod labelled with a task's name is that task's, and not an earlier task's of
    the same name still being deleted: gangrun labels both with the task's uid (and owns the JobSet
    by reference). An object that names no task uid (made before the label existed) is taken as the
    task's, as it always was."""
    if not task_uid:
        return True
    named = labels(obj).get(crd.TASK_UID_LABEL)
    if named:
        return named == task_uid
    refs = [r for r in as_list(get(obj, "metadata", "ownerReferences"))
            if isinstance(r, dict) and r.get("kind") == crd.KIND]
    return not refs or any(r.get("uid") == task_uid for r in refs)


def attempt_of(obj: Any) -> int | None:
    """The gangrun attempt a JobSet or pod belongs to, from its label; None when absent or bad."""
    v = labels(obj).get(crd.ATTEMPT_LABEL, "")
    return int(v) if v.isdigit() else None


# -- Workload ---------------------------------------------------------------------------------------


def newest_workload(items: Sequence[Any]) -> dict[str, Any] | None:
    """The newest Workload by creationTimestamp (ties: the later one listed), as Flyte's kueue.go picks."""
    best, best_at = None, None
    for item in items:
        if not isinstance(item, dict):
            continue
        at = parse_time(get(item, "metadata", "creationTimestamp"))
        if best is None or (at is not None and (best_at is None or at >= best_at)):
            best, best_at = item, at
    return best


def to_workload(obj: Any) -> Workload | None:
    if not isinstance(obj, dict):
        return None
    active = get(obj, "spec", "active")
    return Workload(conditions=conditions(obj), active=active is not False,
                    queue_name=as_str(get(obj, "spec", "queueName")))


# -- JobSet + pods -----------------------------------------------------------------------------------


def _replicated_job(obj: Any) -> dict[str, Any]:
    for rj in as_list(get(obj, "spec", "replicatedJobs")):
        if isinstance(rj, dict) and rj.get("name") == REPLICATED_JOB:
            return rj
    return {}


def _replicated_status(obj: Any) -> dict[str, Any]:
    for rs in as_list(get(obj, "status", "replicatedJobsStatus")):
        if isinstance(rs, dict) and rs.get("name") == REPLICATED_JOB:
            return rs
    return {}


def expected_workers(obj: Any, default: int = 1) -> int:
    rj = _replicated_job(obj)
    parallelism = as_int(get(rj, "template", "spec", "parallelism"), default)
    return max(as_int(rj.get("replicas"), 1), 0) * parallelism if rj else default


def of_jobset(pods: Iterable[Any], js: Any) -> list[dict[str, Any]]:
    """The pods of JobSet `js` by JobSet's name label (all of them when `js` is unknown; a pod naming no
    JobSet counts as its): an elastic gang's earlier JobSets of the same attempt have pods going."""
    name = as_str(get(js, "metadata", "name"))
    pods = [p for p in pods if isinstance(p, dict)]
    return pods if not name else [p for p in pods if labels(p).get(jobset.JOBSET_NAME_KEY, name) == name]


def pod_ready(pod: Any) -> bool:
    """Whether a pod has the condition Ready=True."""
    return any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
               for c in as_list(get(pod, "status", "conditions")))


def restarts_of(obj: Any) -> int:
    """A JobSet's own whole-gang restarts (status.restarts); 0 for none or no JobSet."""
    return max(as_int(get(obj, "status", "restarts")), 0) if isinstance(obj, dict) else 0


def current_round(pods: Iterable[Any], restarts: int) -> list[dict[str, Any]]:
    """Pods of the current whole-gang restart round (pods without the label are kept, as Flyte does)."""
    out = []
    for p in pods:
        if not isinstance(p, dict):
            continue
        v = labels(p).get(jobset.RESTART_ATTEMPT_KEY)
        if v is None or as_int(v, -1) == restarts:
            out.append(p)
    return out


def _terminated(pod: dict[str, Any]) -> tuple[datetime | None, str] | None:
    """(finishedAt, description) of a failed worker container, or None."""
    for cs in as_list(get(pod, "status", "containerStatuses")):
        term = get(cs, "state", "terminated") if isinstance(cs, dict) else None
        if isinstance(term, dict) and as_int(term.get("exitCode")) != 0:
            reason = as_str(term.get("reason")) or "Error"
            code = as_int(term.get("exitCode"))
            desc = f"pod {as_str(get(pod, 'metadata', 'name'))} exited with code {code} ({reason})"
            if as_str(term.get("message")):
                desc += f": {term['message'][:200]}"
            return parse_time(term.get("finishedAt")), desc
    if get(pod, "status", "phase") == "Failed":
        return parse_time(get(pod, "metadata", "creationTimestamp")), (
            f"pod {as_str(get(pod, 'metadata', 'name'))} failed: {as_str(get(pod, 'status', 'reason')) or 'Failed'}")
    return None


def _fatal_waiting(pod: dict[str, Any]) -> str:
    for cs in as_list(get(pod, "status", "containerStatuses")):
        waiting = get(cs, "state", "waiting") if isinstance(cs, dict) else None
        if isinstance(waiting, dict) and waiting.get("reason") in FATAL_WAITING_REASONS:
            name = as_str(get(pod, "metadata", "name"))
            return f"pod {name}: {waiting['reason']}: {as_str(waiting.get('message'))[:200]}".rstrip(": ")
    return ""


def _unscheduled(pod: dict[str, Any]) -> tuple[str, datetime | None] | None:
    """Why the pod is not scheduled (its PodScheduled=False condition), and since when the scheduler finds no
    node for it (reason Unschedulable; None for another reason), or None when it says nothing."""
    for c in as_list(get(pod, "status", "conditions")):
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False":
            reason = as_str(c.get("reason"))
            since = parse_time(c.get("lastTransitionTime")) if reason == UNSCHEDULABLE else None
            return f"{reason}: {as_str(c.get('message'))}".strip(": "), since
    return None


def _restart_of(pod: Any) -> int:
    return as_int(labels(pod).get(jobset.RESTART_ATTEMPT_KEY), 0)


# -- nodes about to go (B9) ----------------------------------------------------------------------------


def _on_a_node(pod: Any) -> bool:
    return get(pod, "status", "phase") in ("Pending", "Running") and bool(node_name(pod))


def maintenance_of(obj: Any, pods: Iterable[Any], nodes: Nodes) -> Maintenance | None:
    """The first worker of the JobSet's current round (by pod name) whose node is about to go, going or not."""
    restarts = max(as_int(get(obj, "status", "restarts")), 0)
    for pod in sorted(current_round(pods, restarts), key=lambda p: as_str(get(p, "metadata", "name"))):
        why = about_to_go(pod, nodes) if _on_a_node(pod) else ""
        if why:
            return Maintenance(node=node_name(pod), why=why, worker=f"pod {as_str(get(pod, 'metadata', 'name'))}")
    return None


def to_move(obj: Any, pods: Iterable[Any], nodes: Nodes) -> list[dict[str, Any]]:
    """The live workers of the JobSet's current round on nodes about to go, not being deleted yet: those
    the controller evicts once every worker has its NodeMaintenance notice."""
    restarts = max(as_int(get(obj, "status", "restarts")), 0)
    return [p for p in current_round(pods, restarts)
            if _on_a_node(p) and not get(p, "metadata", "deletionTimestamp") and about_to_go(p, nodes)]


def disruption(obj: Any, pods: Iterable[Any], nodes: Nodes | None = None) -> Disruption | None:
    """The newest worker of the attempt lost to a node disruption: a pod whose DisruptionTarget
    condition is True (pods of earlier rounds too: JobSet deletes them as it restarts), or else the
    JobSet restarting by gangrun's disruption rule, when the pod was gone before it was seen. A pod on
    a node about to go says so after the condition's message, as the local backend's drain does."""
    best: tuple[int, datetime, Disruption] | None = None
    for pod in pods:
        if not isinstance(pod, dict):
            continue
        cond = find_condition(conditions(pod), jobset.DISRUPTION_TARGET)
        if cond is None or not cond.is_true:
            continue
        why = about_to_go(pod, nodes) if nodes else ""
        message = f"{cond.message} ({node_name(pod)}: {why})" if why else cond.message
        found = Disruption(reason=cond.reason or jobset.DISRUPTION_TARGET, message=message,
                           worker=f"pod {as_str(get(pod, 'metadata', 'name'))}", restart_attempt=_restart_of(pod))
        key = (found.restart_attempt, cond.last_transition or datetime.min.replace(tzinfo=UTC))
        if best is None or key >= best[:2]:
            best = (*key, found)
    if best is not None:
        return best[2]
    restarting = find_condition(conditions(obj), jobset.RESTARTING)
    if restarting is not None and restarting.is_true and restarting.reason == jobset.RESTARTING_REASON_DISRUPTION:
        return Disruption(reason=jobset.DISRUPTION_TARGET, message=restarting.message,
                          restart_attempt=max(as_int(get(obj, "status", "restarts")) - 1, 0))
    return None


def _worker_statuses(pod: Any) -> list[dict[str, Any]]:
    """The status of a pod's worker container (one, or none yet)."""
    return [cs for cs in as_list(get(pod, "status", "containerStatuses"))
            if isinstance(cs, dict) and cs.get("name") == CONTAINER]


def termination_messages(pod: Any) -> list[str]:
    """The termination messages a pod's worker container left: of its current state, then of its last."""
    return [m for cs in _worker_statuses(pod) for state in ("state", "lastState")
            if isinstance(m := get(cs, state, "terminated", "message"), str) and m]


def workers_running_at(obj: Any, pods: Iterable[Any]) -> datetime | None:
    """When every worker of the JobSet's current round was running: the newest container `startedAt`
    among them; None while one is not running (or the JobSet is suspended)."""
    if not isinstance(obj, dict) or is_suspended(obj):
        return None
    restarts = max(as_int(get(obj, "status", "restarts")), 0)
    started: list[datetime] = []
    for pod in current_round(pods, restarts):
        if get(pod, "metadata", "deletionTimestamp") or get(pod, "status", "phase") != "Running":
            continue
        for cs in _worker_statuses(pod):
            t = parse_time(get(cs, "state", "running", "startedAt"))
            if t is not None:
                started.append(t)
    expected = expected_workers(obj)
    return max(started) if started and len(started) >= expected else None


def is_suspended(obj: Any) -> bool:
    """Whether a JobSet is suspended: by its spec, or by its `Suspended` condition when the spec says nothing.

    An explicit `suspend: false` is Kueue's admission and wins over a `Suspended=True` condition: that
    is the JobSet controller's report, which catches up later (seconds, minutes when a thousand gangs
    are readmitted at once), and the gang is resuming from the moment Kueue lets it go.
    """
    suspend = get(obj, "spec", "suspend")
    if isinstance(suspend, bool):
        return suspend
    return any(c.type == jobset.SUSPENDED and c.is_true for c in conditions(obj))


def to_gang(obj: Any, pods: Iterable[Any] = (), nodes: Nodes | None = None) -> Gang | None:
    """The Gang of a JobSet object and its pods, on `nodes` (those of its pods the controller knows);
    None when `obj` is not a mapping."""
    if not isinstance(obj, dict):
        return None
    pods = list(pods)
    restarts = max(as_int(get(obj, "status", "restarts")), 0)
    rs = _replicated_status(obj)
    expected = expected_workers(obj)
    scheduled = ready = 0
    unscheduled = pending_failure = ""
    stuck: list[datetime] = []
    failures: list[tuple[datetime | None, str]] = []
    for pod in current_round(pods, restarts):
        if get(pod, "metadata", "deletionTimestamp"):
            continue  # terminating pods are collateral of a restart or an eviction, not this round's workers
        phase = get(pod, "status", "phase")
        term = _terminated(pod)
        if term is not None:
            failures.append(term)
        if phase in ("Pending", "Running") and get(pod, "spec", "nodeName"):
            scheduled += 1
            if pod_ready(pod):
                ready += 1
        elif phase == "Pending" and (why := _unscheduled(pod)) is not None:
            unscheduled = unscheduled or why[0]
            stuck += [why[1]] if why[1] is not None else []
        if phase == "Pending" and not pending_failure:
            pending_failure = _fatal_waiting(pod)
    failures.sort(key=lambda f: (f[0] is None, f[0] or datetime.max))
    return Gang(
        suspended=is_suspended(obj),
        conditions=conditions(obj),
        restarts=restarts,
        restarts_count_towards_max=max(as_int(get(obj, "status", "restartsCountTowardsMax")), 0),
        expected_workers=expected,
        scheduled_workers=scheduled,
        ready_workers=ready,
        jobs_ready=max(as_int(rs.get("ready")), 0),
        jobs_succeeded=max(as_int(rs.get("succeeded")), 0),
        jobs_failed=max(as_int(rs.get("failed")), 0),
        unscheduled_detail=unscheduled,
        unschedulable_since=min(stuck, default=None),
        first_failure=failures[0][1] if failures else "",
        first_failure_at=failures[0][0] if failures else None,
        pending_failure=pending_failure,
        deleting=bool(get(obj, "metadata", "deletionTimestamp")),
        disruption=disruption(obj, pods, nodes),
        maintenance=maintenance_of(obj, pods, nodes) if nodes else None,
    )


def observe(jobset_obj: Any, lookup: WorkloadLookup, pods: Iterable[Any] = (),
            nodes: Nodes | None = None) -> Observation:
    """The engine's observation of one attempt. A missing JobSet is `Observation()` (no gang)."""
    gang = to_gang(jobset_obj, pods, nodes)
    if gang is None:
        return Observation()
    if lookup.read is WorkloadRead.UNREADABLE:
        return Observation(gang=gang, workload_read=WorkloadRead.UNREADABLE, workload_error=lookup.error)
    workload = to_workload(newest_workload(lookup.items))
    if workload is None:
        return Observation(gang=gang, workload_read=WorkloadRead.NOT_FOUND)
    return Observation(gang=gang, workload=workload)


def uid(obj: Any) -> str:
    """`metadata.uid` ("" when absent): a JobSet's is what its Workload's job-uid label names."""
    return as_str(get(obj, "metadata", "uid"))


def workload_job_uid(obj: Any) -> str:
    return labels(obj).get(kueue.JOB_UID_LABEL, "")
