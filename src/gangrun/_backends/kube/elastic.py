"""Elastic gangs on Kubernetes: which size an attempt's JobSet asks for, and when it is replaced.

Kueue admits a JobSet whole or not at all, so an elastic gang changes size by replacing its JobSet
(and so its Workload) with one of another size, inside the same attempt and charged to no budget.
The rules are `gangrun._core.elastic`'s, fed with the ClusterQueue's free nominal quota (`quota.py`):

* **start**: an attempt's first JobSet asks for the full size when that fits, or when no smaller size
  down to `minNodes` does (then Kueue decides: it waits, or preempts); else for the largest that fits;
* **shrink**: a gang waiting for Kueue with its quota released (preempted with resumeAfterPreemption,
  or not admitted yet) whose size does not fit is replaced by the largest size that fits now;
* **grow**: a gang running small, once `resizeCooldown` has passed since its last resize and no pending
  workload of equal or higher priority waits in its ClusterQueue, is given the stop notice (cause
  `Resize`), and its JobSet is replaced by the largest size the free quota plus its own allows;
* **shrink onto the nodes left**: a running gang holding its quota whose worker the scheduler has found
  no node for during `UNPLACEABLE_FOR` (its node was lost, and anti-affinity or the node's resources
  keep it off the others) is stopped the same way and replaced by one of the workers that were placed,
  when that is at least `minNodes` (fewer: it waits, as a rigid gang does). Quota says nothing of lost
  nodes, so it grows back only once more nodes may take its workers than when it shrank (`placeable`,
  from the nodes' cordons and taints: a lost node comes back Ready, or a node is added).

`status.elastic` (a `Sizing`) holds the attempt's current JobSet: its generation (its name), size,
when it was last resized, a grow still waiting for Kueue, and the whole-gang restarts its earlier
JobSets made, so that the engine sees one gang across the replacements (`observed`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from gangrun._backends.kube import fields, quota
from gangrun._backends.kube.quota import Capacity
from gangrun._backends.kube.render import jobset_name, render_jobset
from gangrun._core import elastic, jobset, kueue
from gangrun._core.conditions import Condition, find_condition
from gangrun._core.observation import Gang, Observation, Workload
from gangrun._core.spec import TaskSpec
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from gangrun._core.times import time_out

READMITTED_SMALLER = elastic.READMITTED_SMALLER  # the words of both backends, defined once
WAITING_SMALLER = "its size does not fit; it runs on what fits now"
WAITING_LARGER = "waiting: a larger size fits now"
PENDING_PREEMPTION = "Pending the preemption of"  # Kueue's QuotaReserved message while it makes room
GROWN = elastic.GROWN
# A worker the scheduler finds no node for during this long shrinks a running elastic gang onto the nodes left:
# longer than a node's taints take to change as it comes and goes, shorter than a lost node stays lost.
UNPLACEABLE_FOR = timedelta(seconds=30)
NODES_LEFT = f"a worker found no node for {UNPLACEABLE_FOR.seconds} s; it runs on the nodes left"


@dataclass(frozen=True, kw_only=True)
class Sizing:
    """An elastic gang's JobSets inside one attempt (`status.elastic`)."""

    attempt: int = 1
    generation: int = 0  # the current JobSet's: 0 for the attempt's first (`jobset_name`)
    nodes: int = 0  # its size; 0 before the attempt's first JobSet was sized
    resized_at: datetime | None = None
    growing: str = ""  # why a running gang is resized (grown, or shrunk onto the nodes left), while the new
    # JobSet waits for Kueue to admit it
    created: bool = True  # False from the resize that named it until the JobSet is seen
    restarts: int = 0  # whole-gang restarts of the attempt's earlier JobSets, plus one per resize while running
    counted: int = 0  # ... of them counted toward maxRestarts
    resizes: int = 0  # resizes of a running gang: restarts charged to nothing
    shrunk_on: int = 0  # the nodes that could take its workers when it shrank onto the nodes left (0: it did not)

    def for_storage(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "generation": self.generation, "nodes": self.nodes,
                "resizedAt": time_out(self.resized_at), "growing": self.growing, "created": self.created,
                "restarts": self.restarts, "counted": self.counted, "resizes": self.resizes,
                "shrunkOn": self.shrunk_on}

    @classmethod
    def from_storage(cls, d: Any, attempt: int) -> Sizing:
        """The stored Sizing of `attempt`, or a fresh one when the status holds another attempt's (or none)."""
        if not isinstance(d, dict) or d.get("attempt") != attempt:
            return cls(attempt=attempt)

        def num(k: str) -> int:
            v = d.get(k)
            return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

        return cls(attempt=attempt, generation=num("generation"), nodes=num("nodes"),
                   resized_at=fields.parse_time(d.get("resizedAt")), growing=str(d.get("growing") or ""),
                   created=d.get("created") is not False, restarts=num("restarts"), counted=num("counted"),
                   resizes=num("resizes"), shrunk_on=num("shrunkOn"))


@dataclass(frozen=True, kw_only=True)
class Placed:
    """Where the running gang's workers stand with the nodes: how many are placed on one, since when the
    scheduler finds no node for one (None: every worker is placed, or waits for something else), and how
    many nodes may take its workers (`nodes.placeable`)."""

    scheduled: int
    placeable: int
    unplaceable_since: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Resize:
    to: int
    why: str
    running: bool  # a running gang stops at a checkpoint; otherwise it was waiting and nothing runs
    shrunk_on: int = 0  # a shrink onto the nodes left: the nodes that could take its workers then


@dataclass(frozen=True, kw_only=True)
class Replacement:
    """A resize carried out: the new Sizing, the Resized event, the JobSet replaced and its successor."""

    sizing: Sizing
    event: Event
    replaced: str
    jobset: dict[str, Any]
    running: bool


def load(task: dict[str, Any], attempt: int) -> Sizing:
    status = task.get("status")
    return Sizing.from_storage(status.get("elastic") if isinstance(status, dict) else None, attempt)


def shrunk_onto_nodes_left(task: dict[str, Any]) -> bool:
    """Whether the task's gang, as its status says, runs on the nodes left after one was lost: any news of a
    node may let it grow back."""
    status = task.get("status")
    stored = status.get("elastic") if isinstance(status, dict) else None
    attempt = stored.get("attempt") if isinstance(stored, dict) else None
    return isinstance(attempt, int) and Sizing.from_storage(stored, attempt).shrunk_on > 0


def current_jobset(task: dict[str, Any], attempt: int) -> str:
    """The name of the current JobSet of `attempt` (a resized elastic gang's is not the attempt's first)."""
    name = str((task.get("metadata") or {}).get("name") or "")
    return jobset_name(name, attempt, load(task, attempt).generation)


def start_size(spec: TaskSpec, capacity: Capacity | None) -> int:
    """The size of an attempt's first JobSet (the full size for a rigid gang, or when the quota is unknown)."""
    if not spec.elastic or capacity is None:
        return spec.nodes
    need = quota.per_node(spec)
    return elastic.start_size(least=spec.least_nodes, most=spec.nodes, fits=lambda n: capacity.fits(need, n))


def plan(spec: TaskSpec, sz: Sizing, state: TaskState, *, suspended: bool, workload: dict[str, Any] | None,
         capacity: Capacity | None, now: datetime, placed: Placed | None = None) -> Resize | None:
    """Whether the current JobSet should be replaced by one of another size now, and why. Pure."""
    if not spec.elastic or capacity is None or state.phase.terminal or not sz.created or sz.growing or not sz.nodes:
        return None
    need = quota.per_node(spec)
    reserved, pending = _reserved(workload), workload is not None and not _finished(workload)
    if not suspended and reserved and placed is not None and (left := _nodes_left(spec, sz, placed, now)):
        return Resize(to=left, why=NODES_LEFT, running=True, shrunk_on=placed.placeable)
    if suspended:  # waiting for Kueue: a new size costs nothing, no worker runs
        if reserved or not pending or _preempting(workload):
            # Its quota is not released yet, Kueue has not seen it, or Kueue is making room for it.
            return None
        target = elastic.start_size(least=spec.least_nodes, most=spec.nodes, fits=lambda n: capacity.fits(need, n))
        if target == sz.nodes or not capacity.fits(need, target):
            return None
        why = (READMITTED_SMALLER if state.eviction is not None else WAITING_SMALLER) if target < sz.nodes \
            else WAITING_LARGER
        return Resize(to=target, why=why, running=False)
    if (not state.started or state.eviction is not None or not reserved or sz.nodes >= spec.nodes
            or capacity.contended or not elastic.cooldown_over(sz.resized_at, spec.resize_cooldown, now)
            or (sz.shrunk_on and (placed is None or placed.placeable <= sz.shrunk_on))):
        return None
    more = elastic.largest_size(least=sz.nodes + 1, most=spec.nodes,
                                fits=lambda n: capacity.fits(need, n, held=sz.nodes))
    return Resize(to=more, why=GROWN, running=True) if more is not None else None


def _nodes_left(spec: TaskSpec, sz: Sizing, placed: Placed, now: datetime) -> int:
    """The size to shrink to onto the nodes left (0: none): the workers placed, when a worker of the running
    gang, holding its quota, found no node during UNPLACEABLE_FOR and they are at least minNodes."""
    since = placed.unplaceable_since
    if since is None or now < since + UNPLACEABLE_FOR:
        return 0
    return placed.scheduled if spec.least_nodes <= placed.scheduled < sz.nodes else 0


def resized(sz: Sizing, r: Resize, gang: Gang | None, *, now: datetime) -> Sizing:
    """The Sizing once the current JobSet is replaced as `r` says; `gang` is as `observed` saw it (its
    restarts include the earlier JobSets'). A resize of a running gang (a grow, a shrink onto the nodes left)
    is a whole-gang restart of the gang (charged to nothing); a shrink of a waiting gang is not (it resumes
    from its eviction)."""
    restarts = gang.restarts if gang is not None else sz.restarts
    counted = gang.restarts_count_towards_max if gang is not None else sz.counted
    return replace(sz, generation=sz.generation + 1, nodes=r.to, resized_at=now, created=False,
                   growing=elastic.resize_message(sz.nodes, r.to, r.why) if r.running else "",
                   restarts=restarts + int(r.running), counted=counted, resizes=sz.resizes + int(r.running),
                   shrunk_on=r.shrunk_on)


def resize(spec: TaskSpec, sz: Sizing, state: TaskState, gang: Gang | None, *, workload: dict[str, Any] | None,
           capacity: Capacity | None, now: datetime, owner_uid: str | None,
           placeable: int | None = None) -> Replacement | None:
    """The replacement of the current JobSet (`gang`, as `observed` saw it) that `plan` asks for, if any.
    `placeable`: how many nodes may take its workers now (None: unknown)."""
    if gang is None or sz.attempt != state.attempt:
        return None
    placed = None if placeable is None else Placed(scheduled=gang.scheduled_workers, placeable=placeable,
                                                   unplaceable_since=gang.unschedulable_since)
    r = plan(spec, sz, state, suspended=gang.suspended, workload=workload, capacity=capacity, now=now, placed=placed)
    if r is None:
        return None
    new = resized(sz, r, gang, now=now)
    event = Event(time=now, type=EventType.RESIZED, attempt=state.attempt,
                  message=elastic.resize_message(sz.nodes, r.to, r.why), data={"from": sz.nodes, "to": r.to,
                                                                               "of": spec.nodes})
    return Replacement(sizing=new, event=event, replaced=jobset_name(spec.name, sz.attempt, sz.generation),
                       jobset=render(spec, new, owner_uid=owner_uid), running=r.running)


def grow_at(spec: TaskSpec, sz: Sizing, state: TaskState, *, now: datetime) -> datetime | None:
    """When a gang running small may next grow, if its cooldown has not passed yet: the controller looks
    again then (no change of the ClusterQueue may come to wake it)."""
    if not spec.elastic or not sz.nodes or sz.nodes >= spec.nodes or sz.resized_at is None or state.phase.terminal:
        return None
    at = sz.resized_at + spec.resize_cooldown
    return at if at > now else None


def shrink_at(spec: TaskSpec, gang: Gang | None, *, now: datetime) -> datetime | None:
    """When a worker of an elastic gang the scheduler finds no node for will have waited UNPLACEABLE_FOR:
    the controller looks again then."""
    if not spec.elastic or gang is None or gang.unschedulable_since is None:
        return None
    at = gang.unschedulable_since + UNPLACEABLE_FOR
    return at if at > now else None


def render(spec: TaskSpec, sz: Sizing, *, owner_uid: str | None) -> dict[str, Any]:
    """The JobSet of the attempt's current generation, at its size."""
    return render_jobset(spec, attempt=sz.attempt, owner_uid=owner_uid, nodes=sz.nodes or None,
                         generation=sz.generation, restarts_used=sz.counted)


def status(spec: TaskSpec, sz: Sizing, state: TaskState, gang: Gang | None) -> dict[str, Any]:
    """What the task's status says of its size: `runningNodes`, and an elastic gang's `elastic` (its Sizing,
    which names its current JobSet)."""
    current = sz if sz.attempt == state.attempt else Sizing(attempt=state.attempt)
    out: dict[str, Any] = {"runningNodes": running_nodes(current, spec, state, gang)}
    if spec.elastic:
        out["elastic"] = current.for_storage()
    return out


def observed(obs: Observation, sz: Sizing) -> Observation:
    """The engine's observation of an elastic gang's current JobSet, as one gang across its replacements:
    its restart counts continue the earlier JobSets', a grow waiting for Kueue is a restart in progress
    (not a suspension), and a replacement whose Workload Kueue has not made yet waits as its
    predecessor did (not an unexplained suspension)."""
    gang = obs.gang
    if gang is None or sz.generation == 0:
        return obs
    gang = replace(gang, restarts=gang.restarts + sz.restarts, restarts_count_towards_max=(
        gang.restarts_count_towards_max + sz.counted), resizes=gang.resizes + sz.resizes)
    if sz.growing and gang.suspended:
        cond = Condition(type=jobset.RESTARTING, status="True", reason=elastic.RESIZE, message=sz.growing)
        gang = replace(gang, suspended=False, conditions=(*gang.conditions, cond))
    if obs.workload is None and gang.suspended and not obs.workload_error:
        return replace(obs, gang=gang, workload=Workload())
    return replace(obs, gang=gang)


def running_nodes(sz: Sizing, spec: TaskSpec, state: TaskState, gang: Gang | None) -> int:
    """The nodes the gang runs on now: its size while it is up, else 0 (also while it stops to grow, until
    the larger JobSet is up)."""
    if gang is None or gang.suspended or gang.restarting or state.eviction is not None or not state.started \
            or state.phase.terminal or sz.growing:
        return 0
    return sz.nodes or spec.nodes


def _reserved(workload: dict[str, Any] | None) -> bool:
    cond = find_condition(fields.conditions(workload), kueue.QUOTA_RESERVED)
    return cond is not None and cond.is_true


def _preempting(workload: dict[str, Any] | None) -> bool:
    """Kueue holds the Workload back while the workloads it preempts for it go ("Pending the preemption of
    N workload(s)")."""
    cond = find_condition(fields.conditions(workload), kueue.QUOTA_RESERVED)
    return cond is not None and not cond.is_true and PENDING_PREEMPTION in cond.message


def _finished(workload: dict[str, Any]) -> bool:
    cond = find_condition(fields.conditions(workload), kueue.FINISHED)
    return cond is not None and cond.is_true
