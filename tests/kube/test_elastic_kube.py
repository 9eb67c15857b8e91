"""Elastic gangs on Kubernetes, as pure functions: the ClusterQueue's free quota, the size decision, and
one reconcile at a time through start small → preempted → resumed smaller → grown back.

Every node of these gangs asks for 4 CPU; the ClusterQueue has 16 (four nodes' worth).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from gangrun._backends.kube import elastic, quota
from gangrun._backends.kube.adapter import WorkloadLookup
from gangrun._backends.kube.elastic import Sizing
from gangrun._backends.kube.queues import contended
from gangrun._backends.kube.quota import Capacity
from gangrun._backends.kube.reconcile import (
    AnnotatePods,
    CreateJobSet,
    DeleteJobSet,
    RecordEvent,
    RequeueAt,
    reconcile,
)
from gangrun._core import elastic as core
from gangrun._core.eviction import Eviction, EvictionKind
from gangrun._core.phases import Phase
from gangrun._core.state import TaskState
from gangrun._core.timeline import EventType
from tests.harness.kube_builders import (
    PREEMPTION_MESSAGE,
    at,
    jobset_obj,
    pod_obj,
    task_obj,
    task_spec,
    ts,
    workload_obj,
)

CPU = {"cpu": Decimal(4), "memory": Decimal(2**30), "pods": Decimal(1)}
ELASTIC = {"nodes": 4, "minNodes": 2, "resizeCooldown": "30s", "resources": {"cpu": "4", "memory": "1Gi"},
           "failurePolicy": {"resumeAfterPreemption": True}}


def cluster_queue(*, reserved: int = 0, used: int | None = None, pending: int = 0, cpu: int = 16,
                  covered: tuple[str, ...] = ("cpu", "memory")) -> dict[str, Any]:
    """A Kueue v1beta2 ClusterQueue with `cpu` CPU of nominal quota, `reserved` of them held."""
    resources = [{"name": "cpu", "nominalQuota": str(cpu)}, {"name": "memory", "nominalQuota": "64Gi"}]
    if "pods" in covered:
        resources.append({"name": "pods", "nominalQuota": "3"})
    usage = [{"name": "default", "resources": [{"name": "cpu", "total": str(reserved)},
                                               {"name": "memory", "total": f"{reserved // 4}Gi"}]}]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
            "spec": {"resourceGroups": [{"coveredResources": list(covered), "flavors": [
                {"name": "default", "resources": resources}]}]},
            "status": {"flavorsReservation": usage, "pendingWorkloads": pending,
                       "flavorsUsage": [{"name": "default", "resources": [
                           {"name": "cpu", "total": str(reserved if used is None else used)}]}]}}


def free(cpu: int, *, contended: bool = False) -> Capacity:
    """A 16-CPU ClusterQueue with `cpu` of it free."""
    cap = quota.capacity(cluster_queue(reserved=16 - cpu), contended=contended)
    assert cap is not None
    return cap


# -- the ClusterQueue's free nominal quota ---------------------------------------------------------------


@pytest.mark.parametrize(("cq", "nodes", "held", "fits"), [
    (cluster_queue(), 4, 0, True),
    (cluster_queue(reserved=8), 4, 0, False),
    (cluster_queue(reserved=8), 2, 0, True),
    (cluster_queue(reserved=8), 3, 0, False),
    (cluster_queue(reserved=8), 4, 2, True),  # its own 2 running nodes' quota comes back first
    (cluster_queue(reserved=4, used=12), 2, 0, False),  # usage says more than reservation: the larger counts
    (cluster_queue(covered=("cpu", "memory", "pods")), 4, 0, False),  # 3 pods of quota
    (cluster_queue(covered=("cpu", "memory", "pods")), 3, 0, True),
    (cluster_queue(covered=("memory",)), 1, 0, False),  # no group covers cpu: Kueue admits none of it
])
def test_a_gang_fits_when_one_flavor_has_its_nodes_requests_free(cq: dict, nodes: int, held: int, fits: bool) -> None:
    cap = quota.capacity(cq)
    assert cap is not None and cap.fits(CPU, nodes, held=held) is fits


@pytest.mark.parametrize("cq", [None, "cq", {"spec": None}, {"kind": "ClusterQueue"}])
def test_what_is_not_a_cluster_queue_has_no_capacity(cq: Any) -> None:
    assert quota.capacity(cq) is None


def test_a_malformed_cluster_queue_reads_as_nothing_free_never_an_exception() -> None:
    cq = cluster_queue()
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    cq["status"]["flavorsReservation"] = "none"
    cap = quota.capacity(cq)
    assert cap is not None and not cap.fits(CPU, 1)


def waiting(priority: int, *, job: str = "other", reserved: bool = False) -> dict:
    wl = workload_obj(job).admitted() if reserved else workload_obj(job).pending("insufficient unused quota")
    return wl.set("spec.priority", priority).obj()


@pytest.mark.parametrize(("case", "pending", "workloads", "want"), [
    ("nobody waits", 0, [], False),
    ("a lower priority waits", 1, [waiting(50)], False),
    ("an equal priority waits", 1, [waiting(100)], True),
    ("a higher priority waits", 1, [waiting(1000)], True),
    ("an admitted one holds quota, waits for nothing", 0, [waiting(1000, reserved=True)], False),
    ("the gang's own Workload waits (its grow)", 1, [waiting(100, job="mine")], False),
    ("the queue counts one the controller cannot see", 2, [waiting(50)], True),
])
def test_a_gang_grows_only_into_quota_no_equal_or_higher_priority_workload_waits_for(
        case: str, pending: int, workloads: list[dict], want: bool) -> None:
    assert contended(cluster_queue(pending=pending), workloads, own_jobs={"mine"}, priority=100) is want, case


# -- the size of an attempt's first JobSet ---------------------------------------------------------------


@pytest.mark.parametrize(("room", "want"), [(4, 4), (3, 3), (2, 2), (1, 4), (0, 4)])
def test_a_gang_starts_on_its_full_size_or_on_the_largest_that_fits(room: int, want: int) -> None:
    assert core.start_size(least=2, most=4, fits=lambda n: n <= room) == want
    assert elastic.start_size(task_spec(**ELASTIC), free(4 * room)) == want


def test_a_rigid_gang_or_an_unknown_quota_starts_at_full_size() -> None:
    assert elastic.start_size(task_spec(nodes=4, resources={"cpu": "4"}), free(8)) == 4
    assert elastic.start_size(task_spec(**ELASTIC), None) == 4


# -- when the current JobSet is replaced -------------------------------------------------------------------

T = at(100)
RUNNING = TaskState.new(now=at(0)).with_running(at=at(1), restart_attempt=0)
WAITING = RUNNING.with_eviction_seen(Eviction(kind=EvictionKind.PREEMPTED, reason="Preempted",
                                              message=PREEMPTION_MESSAGE), at=at(50))
ADMITTED = workload_obj("js").admitted().obj()
PENDING = workload_obj("js").pending("couldn't assign flavors to pod set workers: insufficient unused quota").obj()
MAKING_ROOM = workload_obj("js").pending("Pending the preemption of 1 workload(s)").obj()


@pytest.mark.parametrize(("case", "sz", "state", "suspended", "workload", "capacity", "want"), [
    ("preempted at 4, 2 fit now: shrink", Sizing(nodes=4), WAITING, True, PENDING, free(8), (2, False)),
    ("preempted at 4, all 4 fit: Kueue readmits it", Sizing(nodes=4), WAITING, True, PENDING, free(16), None),
    ("preempted, nothing fits: it waits", Sizing(nodes=4), WAITING, True, PENDING, free(4), None),
    ("preempted, quota not released yet", Sizing(nodes=4), WAITING, True, ADMITTED, free(8), None),
    ("Kueue preempts others to make room for it", Sizing(nodes=4), RUNNING, True, MAKING_ROOM, free(8), None),
    ("no Workload yet", Sizing(nodes=4), WAITING, True, None, free(8), None),
    ("waiting at 2, all 4 fit: wait at 4", Sizing(nodes=2), WAITING, True, PENDING, free(16), (4, False)),
    ("running at 2, 2 more fit: grow", Sizing(nodes=2), RUNNING, False, ADMITTED, free(8), (4, True)),
    ("running at 2, 1 more fits: grow to 3", Sizing(nodes=2), RUNNING, False, ADMITTED, free(4), (3, True)),
    ("running at 2, nothing free", Sizing(nodes=2), RUNNING, False, ADMITTED, free(0), None),
    ("running at 2, someone of equal or higher priority waits", Sizing(nodes=2), RUNNING, False, ADMITTED,
     free(8, contended=True), None),
    ("running at 2, resized 10 s ago (cooldown 30 s)", Sizing(nodes=2, resized_at=T - timedelta(seconds=10)),
     RUNNING, False, ADMITTED, free(8), None),
    ("running at 2, resized 30 s ago", Sizing(nodes=2, resized_at=T - timedelta(seconds=30)), RUNNING, False,
     ADMITTED, free(8), (4, True)),
    ("growing already", Sizing(nodes=4, growing="growing"), RUNNING, True, PENDING, free(0), None),
    ("running at full size", Sizing(nodes=4), RUNNING, False, ADMITTED, free(16), None),
    ("quota unknown", Sizing(nodes=2), RUNNING, False, ADMITTED, None, None),
])
def test_when_an_elastic_gang_changes_size(case: str, sz: Sizing, state: TaskState, suspended: bool,
                                           workload: dict | None, capacity: Capacity | None,
                                           want: tuple[int, bool] | None) -> None:
    r = elastic.plan(task_spec(**ELASTIC), sz, state, suspended=suspended, workload=workload, capacity=capacity, now=T)
    assert (None if r is None else (r.to, r.running)) == want, case


STUCK = T - elastic.UNPLACEABLE_FOR  # a worker the scheduler has found no node for since then


@pytest.mark.parametrize(("case", "sz", "placed", "workload", "want"), [
    ("running at 4, a worker found no node for 30 s, 3 placed: onto the 3", Sizing(nodes=4),
     elastic.Placed(scheduled=3, placeable=3, unplaceable_since=STUCK), ADMITTED, (3, True)),
    ("... for 29 s: it waits", Sizing(nodes=4),
     elastic.Placed(scheduled=3, placeable=3, unplaceable_since=STUCK + timedelta(seconds=1)), ADMITTED, None),
    ("... 1 placed, fewer than minNodes 2: it waits as a rigid gang does", Sizing(nodes=4),
     elastic.Placed(scheduled=1, placeable=1, unplaceable_since=STUCK), ADMITTED, None),
    ("... its quota taken back by Kueue: a preemption, not a lost node", Sizing(nodes=4),
     elastic.Placed(scheduled=3, placeable=3, unplaceable_since=STUCK), PENDING, None),
    ("every worker placed", Sizing(nodes=4), elastic.Placed(scheduled=4, placeable=4), ADMITTED, None),
    ("shrunk onto 3 nodes that could take it, 3 still: no grow, the cooldown over and quota free",
     Sizing(nodes=3, shrunk_on=3), elastic.Placed(scheduled=3, placeable=3), ADMITTED, None),
    ("... a fourth node may take a worker again: grow", Sizing(nodes=3, shrunk_on=3),
     elastic.Placed(scheduled=3, placeable=4), ADMITTED, (4, True)),
    ("... the nodes unknown: no grow", Sizing(nodes=3, shrunk_on=3), None, ADMITTED, None),
])
def test_a_running_elastic_gang_shrinks_onto_the_nodes_left_and_grows_back_once_a_node_may_take_it(
        case: str, sz: Sizing, placed: elastic.Placed | None, workload: dict, want: tuple[int, bool] | None) -> None:
    r = elastic.plan(task_spec(**ELASTIC), sz, RUNNING, suspended=False, workload=workload, capacity=free(16),
                     now=T, placed=placed)
    assert (None if r is None else (r.to, r.running)) == want, case


def test_a_rigid_gang_never_changes_size() -> None:
    spec = task_spec(nodes=4, resources={"cpu": "4"}, failurePolicy={"resumeAfterPreemption": True})
    assert elastic.plan(spec, Sizing(nodes=4), WAITING, suspended=True, workload=PENDING, capacity=free(8),
                        now=T) is None


# -- one reconcile at a time ---------------------------------------------------------------------------------


class Task:
    """A ClusteredTask whose status is written back after each reconcile, like the shell does."""

    def __init__(self) -> None:
        self.obj = task_obj(**ELASTIC)
        self.spec = task_spec(**ELASTIC)

    def step(self, js: dict | None, wl: dict | None, pods: list | None = None, *, t: float,
             capacity: Capacity | None, placeable: int | None = None) -> list:
        lookup = WorkloadLookup.found([wl]) if wl is not None else WorkloadLookup()
        status, actions = reconcile(self.obj, js, lookup, pods or [], now=at(t), capacity=capacity,
                                    placeable=placeable)
        if status is not None:
            self.obj["status"] = status
        return actions

    @property
    def status(self) -> dict:
        return self.obj["status"]


def created(actions: list) -> dict:
    (body,) = [a.body for a in actions if isinstance(a, CreateJobSet)]
    return body


def gang(body: dict, uid: str) -> Any:
    """The JobSet the controller created, as the API server returns it."""
    js = jobset_obj(uid=uid)
    obj = js.obj()
    obj.update(spec=body["spec"], metadata={**obj["metadata"], **body["metadata"], "uid": uid})
    return type(js)(obj)


def size(body: dict) -> tuple[int, str]:
    job = body["spec"]["replicatedJobs"][0]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in job["template"]["spec"]["containers"][0]["env"]}
    return job["parallelism"], env["WORLD_SIZE"]


def resized(actions: list) -> list[dict]:
    return [a.event.data for a in actions if isinstance(a, RecordEvent) and a.event.type is EventType.RESIZED]


def test_an_elastic_gang_starts_on_what_fits_shrinks_when_preempted_and_grows_back_in_one_attempt() -> None:
    task = Task()
    first = created(task.step(None, None, t=0, capacity=free(16)))
    assert size(first) == (4, "4") and first["metadata"]["name"] == "train-1"

    # Running at 4; then Kueue preempts it for a high-priority 2-node job and releases its quota.
    js = gang(first, "js-1").admitted().jobs(ready=1, active=1).obj()
    pods = [pod_obj("train-1", i) for i in range(4)]
    task.step(js, workload_obj("js-1").admitted().obj(), pods, t=1, capacity=free(0))
    assert task.status["runningNodes"] == 4
    evicted = workload_obj("js-1").admitted().evicted("Preempted", PREEMPTION_MESSAGE).preempted()
    task.step(js, evicted.obj(), pods, t=2, capacity=free(0))
    suspended = gang(first, "js-1").suspended().jobs(suspended=1).obj()
    requeued = evicted.pending("couldn't assign flavors to pod set workers: insufficient unused quota").obj()
    actions = task.step(suspended, requeued, t=3, capacity=free(8))

    # Shrink: the suspended JobSet is replaced by one of 2 nodes, in the same attempt, no retry used.
    assert resized(actions) == [{"from": 4, "to": 2, "of": 4}]
    assert [a.name for a in actions if isinstance(a, DeleteJobSet)] == ["train-1"]
    second = created(actions)
    assert size(second) == (2, "2") and second["metadata"]["name"] == "train-1-r1"
    s = task.status
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["jobSet"]) == (1, 0, 0, "train-1-r1")
    assert not any(isinstance(a, AnnotatePods) for a in actions)  # nothing ran: no notice

    # Its Workload does not exist yet: it waits for re-admission, as its predecessor did.
    small = gang(second, "js-2")
    task.step(small.suspended().obj(), None, t=4, capacity=free(8))
    assert task.status["attempt"] == 1 and task.status["eviction"] and task.status["runningNodes"] == 0
    js = gang(second, "js-2").admitted().jobs(ready=1, active=1).obj()
    pods = [pod_obj("train-1-r1", i) for i in range(2)]
    actions = task.step(js, workload_obj("js-2").admitted().obj(), pods, t=5, capacity=free(0))
    assert EventType.READMITTED in [a.event.type for a in actions if isinstance(a, RecordEvent)]
    assert task.status["runningNodes"] == 2 and not task.status.get("eviction")

    # The high job ends; within the cooldown (30 s from the shrink at t=3) the gang stays at 2.
    actions = task.step(js, workload_obj("js-2").admitted().obj(), pods, t=20, capacity=free(8))
    assert not resized(actions) and at(33) in [a.at for a in actions if isinstance(a, RequeueAt)]  # then it looks again
    actions = task.step(js, workload_obj("js-2").admitted().obj(), pods, t=40, capacity=free(8))

    # Grow: the workers get the stop notice (cause Resize), then the JobSet is replaced by one of 4.
    assert resized(actions) == [{"from": 2, "to": 4, "of": 4}]
    (notice,) = [a for a in actions if isinstance(a, AnnotatePods)]
    assert notice.names == tuple(p["metadata"]["name"] for p in pods)
    assert json.loads(notice.notice)["cause"] == core.RESIZE
    kinds = [type(a).__name__ for a in actions if not isinstance(a, RecordEvent)]
    assert kinds == ["AnnotatePods", "DeleteJobSet", "CreateJobSet"]
    third = created(actions)
    assert size(third) == (4, "4") and third["metadata"]["name"] == "train-1-r2"
    # The status written with the decision says the gang is growing, and runs on no nodes until the
    # larger JobSet is up (not "running" on 4 while the 2 stop).
    assert task.status["reason"].startswith("growing the gang from 2 to 4") and task.status["runningNodes"] == 0

    # While Kueue has not admitted the larger JobSet the gang is restarting, not suspended or evicted.
    pending = workload_obj("js-3").pending("insufficient unused quota").obj()
    task.step(gang(third, "js-3").suspended().obj(), pending, t=41, capacity=free(8))
    s = task.status
    assert s["phase"] == "Running" and s["reason"].startswith("growing the gang") and not s.get("eviction")
    js = gang(third, "js-3").admitted().jobs(ready=1, active=1).obj()
    actions = task.step(js, workload_obj("js-3").admitted().obj(), [pod_obj("train-1-r2", i) for i in range(4)],
                        t=45, capacity=free(0))
    assert EventType.RESTARTED in [a.event.type for a in actions if isinstance(a, RecordEvent)]
    s = task.status
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["runningNodes"]) == (1, 0, 0, 4)
    assert s["elastic"]["generation"] == 2 and s["elastic"]["nodes"] == 4 and not s["elastic"]["growing"]
    assert s["accounting"]["size"] == 1.0  # node-seconds at full size again


def test_an_elastic_gang_starts_small_when_only_part_of_it_fits() -> None:
    task = Task()
    body = created(task.step(None, None, t=0, capacity=free(8)))
    assert size(body) == (2, "2") and task.status["elastic"]["nodes"] == 2
    again = created(task.step(None, None, t=1, capacity=free(16)))  # repeated until seen: sized once
    assert size(again) == (2, "2")
    js = gang(body, "js-1").admitted().jobs(ready=1, active=1).obj()
    actions = task.step(js, workload_obj("js-1").admitted().obj(), [pod_obj("train-1", i) for i in range(2)], t=2,
                        capacity=free(0))
    (admitted,) = [a.event for a in actions if isinstance(a, RecordEvent) and a.event.type is EventType.ADMITTED]
    assert admitted.data == {"nodes": 2, "of": 4} and admitted.message.endswith("on 2 of 4 nodes (what fits now)")
    assert task.status["accounting"]["size"] == 0.5 and task.status["runningNodes"] == 2


def running_status(sz: Sizing) -> dict:
    """The status of a task whose gang has run in attempt 1, now on the JobSet `sz` names."""
    state = replace(RUNNING.with_info(RUNNING.info.advance(Phase.RUNNING, "running")), gang_seen=True)
    return {**state.for_storage(), "elastic": sz.for_storage()}


def test_a_replacement_named_but_not_created_before_a_crash_is_created_by_the_next_reconcile() -> None:
    task = Task()
    task.obj["status"] = running_status(Sizing(generation=1, nodes=2, created=False))
    (action,) = task.step(None, None, t=5, capacity=free(8))
    assert isinstance(action, CreateJobSet) and action.name == "train-1-r1" and size(action.body) == (2, "2")


def test_garbage_of_an_earlier_jobset_of_the_same_attempt_is_deleted() -> None:
    task = Task()
    task.obj["status"] = running_status(Sizing(generation=1, nodes=2))
    spec = task_spec(**ELASTIC)
    old = jobset_obj(spec, uid="js-1").admitted().obj()
    current = gang(elastic.render(spec, Sizing(generation=1, nodes=2), owner_uid="task-uid"), "js-2").admitted()
    status, actions = reconcile(task.obj, current.obj(), WorkloadLookup.found([workload_obj("js-2").admitted().obj()]),
                                [], now=at(6), owned_jobsets=[old, current.obj()], capacity=free(0))
    assert [a.name for a in actions if isinstance(a, DeleteJobSet)] == ["train-1"]


def unplaceable(pod: dict, since: datetime) -> dict:
    """The pod as the scheduler leaves it when no node may take it, since `since`."""
    (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    cond.update(lastTransitionTime=ts(since), message="0/2 nodes are available: 1 node(s) didn't match pod "
                                                      "anti-affinity rules, 1 node(s) had untolerated taint")
    return pod


def test_an_elastic_gang_whose_worker_finds_no_node_shrinks_onto_the_nodes_left_charged_to_nothing() -> None:
    """A node of a running 4-node gang is lost: JobSet restarted the gang and one new worker finds no node
    (its old node is gone, anti-affinity keeps it off the others). 30 s later the 3 placed workers get the stop
    notice (cause Resize) and the JobSet is replaced by one of 3 in the same attempt; it does not grow back
    while no fourth node may take a worker, however long, and grows once one may."""
    task = Task()
    first = created(task.step(None, None, t=0, capacity=free(16)))
    wl = workload_obj("js-1").admitted().obj()
    js = gang(first, "js-1").admitted().jobs(ready=1, active=1).obj()
    task.step(js, wl, [pod_obj("train-1", i) for i in range(4)], t=1, capacity=free(0))
    lost = pod_obj("train-1", 3, node=None, phase="Pending", ready=False)
    pods = [pod_obj("train-1", i) for i in range(3)] + [unplaceable(lost, at(10))]
    actions = task.step(js, wl, pods, t=20, capacity=free(0), placeable=3)
    assert not resized(actions) and at(40) in [a.at for a in actions if isinstance(a, RequeueAt)]

    actions = task.step(js, wl, pods, t=40, capacity=free(0), placeable=3)
    assert resized(actions) == [{"from": 4, "to": 3, "of": 4}]
    (notice,) = [a for a in actions if isinstance(a, AnnotatePods)]
    assert json.loads(notice.notice)["cause"] == core.RESIZE and len(notice.names) == 4
    assert [type(a).__name__ for a in actions if not isinstance(a, RecordEvent | RequeueAt)] == \
        ["AnnotatePods", "DeleteJobSet", "CreateJobSet"]
    second = created(actions)
    assert size(second) == (3, "3")
    assert task.status["reason"] == ("shrinking the gang from 4 to 3 nodes: a worker found no node for 30 s; "
                                     "it runs on the nodes left")
    assert task.status["elastic"]["shrunkOn"] == 3

    js = gang(second, "js-2").admitted().jobs(ready=1, active=1).obj()
    wl = workload_obj("js-2").admitted().obj()
    pods = [pod_obj("train-1-r1", i) for i in range(3)]
    task.step(js, wl, pods, t=45, capacity=free(4), placeable=3)
    s = task.status
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["runningNodes"]) == (1, 0, 0, 3), s
    assert not resized(task.step(js, wl, pods, t=600, capacity=free(4), placeable=3))  # cooldown long over
    assert resized(task.step(js, wl, pods, t=601, capacity=free(4), placeable=4)) == [{"from": 3, "to": 4, "of": 4}]
    assert task.status["elastic"]["shrunkOn"] == 0
