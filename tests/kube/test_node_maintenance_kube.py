"""B9 on Kubernetes, on the in-memory API: a node about to go (cordoned, tainted) tells every worker
`NodeMaintenance`, then its workers are evicted as `kubectl drain` does, and the restart JobSet makes
for it is charged to no budget."""

from __future__ import annotations

import json

from gangrun._backends.kube import crd
from gangrun._backends.kube.client import JOBSETS, NODES, PODS, TASKS
from gangrun._backends.kube.reconcile import SETTLE
from gangrun._core import stop_causes
from tests.harness.kube_builders import disrupted, pod_obj, restarting_for_disruption
from tests.kube.test_controller import Cluster

POD = "train-1-workers-0-{}-abcde"
WHY = "cordoned: taint node.kubernetes.io/unschedulable:NoSchedule"


def node(name: str, *, cordoned: bool = False, taints: list[dict] | None = None) -> dict:
    taints = list(taints or [])
    if cordoned:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"unschedulable": cordoned, "taints": taints}, "status": {"images": [{"names": ["big"]}]}}


def running(c: Cluster, **spec: object) -> None:
    """A gang of two workers up, rank i on node-i."""
    for i in range(3):
        c.api.put(NODES, node(f"node-{i}"))
    c.submit(**spec)
    c.settle()
    c.admit()
    for i in range(2):
        c.api.put(PODS, pod_obj("train-1", i, node=f"node-{i}"))
    c.settle()


def notice(c: Cluster, i: int) -> dict | None:
    pod = c.api.obj(PODS, "ml", POD.format(i))
    raw = ((pod or {}).get("metadata", {}).get("annotations") or {}).get(crd.STOP_NOTICE_ANNOTATION)
    return json.loads(raw) if raw else None


def evictions(c: Cluster) -> list[str]:
    return [name for verb, _plural, name in c.api.calls if verb == "evict"]


def test_b9_a_cordoned_node_tells_every_worker_node_maintenance_then_evicts_its_worker() -> None:
    c = Cluster()
    running(c)
    c.api.put(NODES, node("node-1", cordoned=True))
    c.settle()
    for i in range(2):  # every worker, not only the one on the node, is told, naming the node and the taint
        told = notice(c, i)
        assert told is not None and told["cause"] == stop_causes.NODE_MAINTENANCE, told
        assert told["message"] == f"node node-1 is about to go ({WHY}); the gang saves and restarts (not counted)"
    assert evictions(c) == []  # the notices first: the kubelet refreshes the workers' files
    c.clock.advance(SETTLE.total_seconds())
    c.settle()
    assert evictions(c) == [POD.format(1)]  # only the worker on the node going, as kubectl drain would
    evicted = c.api.obj(PODS, "ml", POD.format(1))
    assert evicted["metadata"]["deletionTimestamp"]
    # The kubelet stops it (exit 143); JobSet restarts the gang by its disruption rule, not counted.
    c.api.put(PODS, disrupted(pod_obj("train-1", 1, node="node-1"), message="Eviction API: evicting"))
    c.settle()
    assert notice(c, 0)["cause"] == stop_causes.NODE_MAINTENANCE  # type: ignore[index]  # not NodeDisruption
    js = restarting_for_disruption(c.js())
    c.api.put(JOBSETS, js)
    c.settle()
    for i in range(2):
        c.api.remove(PODS, "ml", POD.format(i))
        c.api.put(PODS, pod_obj("train-1", i, restart=1, node=f"node-{2 * i}"))  # not on node-1 any more
    js["status"].update(conditions=[])
    c.api.put(JOBSETS, js)
    c.settle()
    s = c.status()
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["restartAttempt"]) == (1, 0, 0, 1), s
    (d,) = s["disruptions"]
    assert d["reason"] == "EvictionByEvictionAPI" and f"(node-1: {WHY})" in d["message"], d
    assert evictions(c) == [POD.format(1)]  # the new round is on nodes that stay: nothing more to move


def test_b9_a_worker_whose_pod_tolerates_the_taint_is_not_moved() -> None:
    c = Cluster()
    running(c, podTemplate={"spec": {"tolerations": [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}})
    for i in range(2):  # the template's tolerations, as JobSet would put them on the pods
        pod = c.api.obj(PODS, "ml", POD.format(i))
        pod["spec"]["tolerations"] = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                       "effect": "NoSchedule"}]
        c.api.put(PODS, pod)
    c.api.put(NODES, node("node-1", cordoned=True))
    c.clock.advance(5)
    c.settle()
    assert notice(c, 0) is None and notice(c, 1) is None and evictions(c) == []


def test_b9_a_noexecute_taint_the_taint_manager_acts_on_still_tells_the_peers_node_maintenance() -> None:
    c = Cluster()
    running(c)
    c.api.put(NODES, node("node-1", taints=[{"key": "example.com/reclaim", "effect": "NoExecute"}]))
    # The taint manager deletes the pod first (DeletionByTaintManager): gangrun evicts nothing itself.
    pod = disrupted(pod_obj("train-1", 1, node="node-1"), "DeletionByTaintManager", "Taint manager: deleting due to "
                    "NoExecute taint", failed=False)
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
    c.api.put(PODS, pod)
    c.clock.advance(5)
    c.settle()
    told = notice(c, 0)
    assert told is not None and told["cause"] == stop_causes.NODE_MAINTENANCE
    assert "node node-1 is about to go (NoExecute taint: taint example.com/reclaim:NoExecute)" in told["message"]
    assert evictions(c) == []


def test_b9_without_restart_on_disruption_a_cordon_is_left_to_the_cluster() -> None:
    c = Cluster()
    running(c, failurePolicy={"restartOnDisruption": False})
    c.api.put(NODES, node("node-1", cordoned=True))
    c.clock.advance(5)
    c.settle()
    assert notice(c, 0) is None and evictions(c) == []


def test_b9_the_controller_keeps_only_a_node_s_cordon_and_taints() -> None:
    c = Cluster()
    c.api.put(NODES, node("node-1", cordoned=True))
    c.settle()
    kept = c.ctl.nodes.get(("", "node-1"))
    assert kept is not None and "status" not in kept and kept["spec"]["unschedulable"] is True


def test_b9_a_cordon_lifted_before_the_cache_saw_it_moves_no_worker() -> None:
    """The node and pod watches are not ordered: a worker bound to a node just uncordoned can reach the
    controller before the uncordon does. The node is read again before anyone is told or moved."""
    c = Cluster()
    for i in range(2):
        c.api.put(NODES, node(f"node-{i}", cordoned=i == 1))
    c.submit()
    c.settle()
    c.admit()
    c.settle()
    c.api.put(NODES, node("node-1"))  # uncordoned; the scheduler binds rank 1 there at once
    for i in range(2):
        c.api.put(PODS, pod_obj("train-1", i, node=f"node-{i}"))
    c.ctl.pods.relist()  # only the pods' news has arrived
    c.ctl.queue.add(("ml", "train"))
    c.clock.advance(5)
    while c.ctl.process_one(timeout=0):
        pass
    assert notice(c, 0) is None and notice(c, 1) is None and evictions(c) == []
    kept = c.ctl.nodes.get(("", "node-1"))
    assert kept is not None and not kept["spec"]["unschedulable"], kept


def test_news_of_any_node_looks_again_at_the_elastic_gangs_shrunk_onto_the_nodes_left_only() -> None:
    """A lost node coming back touches no pod of the gang shrunk off it: the node's news itself wakes the gang,
    which grows back once the node may take a worker (`elastic.plan`)."""
    c = Cluster()
    for name, shrunk in (("train", 2), ("other", 0)):
        c.submit(name=name, nodes=3, minNodes=1)
        c.settle()
        task = c.api.obj(TASKS, "ml", name)
        task["status"] = {**task.get("status", {}), "elastic": {"attempt": 1, "nodes": 2, "shrunkOn": shrunk}}
        c.api.put(TASKS, task)
    c.settle()
    assert len(c.ctl.queue) == 0
    c.ctl._node_changed(node("node-2"))
    assert [c.ctl.queue.get(timeout=0), c.ctl.queue.get(timeout=0)] == [("ml", "train"), None]
