"""B9 on Kubernetes, on the real control plane: a node of a running gang cordoned (`kubectl cordon`) or
tainted for reclaim stops the gang with cause `NodeMaintenance` and moves it, charged to nothing.

The control plane is the session's tier C with `gangrun controller` as a subprocess per test, as in
test_controller_e2e.py; kwok's 4 fake nodes take the gang's 2 pods (one node each, 4 CPU), so two nodes
stay free to move to. kwok runs no containers: the notice reaching the workers is the pod annotation
their downward-API file shows, seen on every pod before it is stopped. The nodes are shared by the
session: each test uncordons and untaints what it touched.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e import test_controller_e2e
from tests.e2e.test_controller_e2e import controller, is_running
from tests.e2e.test_training_e2e import (
    NOTICE,
    attempt_pods,
    create_task,
    deleting,
    evict,
    has_notice,
    jobset,
    timeline,
)
from tests.harness.client import Kube
from tests.harness.tasks import TASK_LABEL, TIMEOUT, PodRecorder, wait_status

pytestmark = pytest.mark.e2e
crd_installed = test_controller_e2e.crd_installed
env = test_controller_e2e.env

RESTARTED = "running (restart attempt 1)"


def set_node(kube: Kube, name: str, *, unschedulable: bool, taints: list[dict] | None) -> None:
    kube.patch("Node", name, None, {"spec": {"unschedulable": unschedulable, "taints": taints}})


def moved(env, how: str, taint: dict | None) -> None:
    """Cordon (`taint` None) or taint the node of rank 1 of a running gang; the gang is told, saves, and
    restarts in the same attempt off that node, with no retry and no counted restart."""
    cp, ns, rec, _ = env
    kube = cp.kube
    pods_seen = PodRecorder(cp, ns)
    node = ""
    try:
        ctl = controller(env)
        create_task(kube, ns, retries=0, failurePolicy={"maxRestarts": 0}, terminationGracePeriod="10s")
        wait_status(kube, ns, "train", is_running, "Running", ctl)
        pods = sorted(kube.wait_running_pods(ns, f"{TASK_LABEL}=train", 2), key=lambda p: p["metadata"]["name"])
        names = [p["metadata"]["name"] for p in pods]
        node = pods[1]["spec"]["nodeName"]
        asked, asked_mono = time.time(), time.monotonic()
        if taint is None:
            set_node(kube, node, unschedulable=True, taints=None)  # `kubectl cordon`: spec.unschedulable
        else:
            set_node(kube, node, unschedulable=False, taints=[taint])
        s = wait_status(kube, ns, "train", lambda s: s.get("reason") == RESTARTED, "restarted in the same attempt", ctl)
        kube.wait_running_pods(ns, f"{TASK_LABEL}=train,jobset.sigs.k8s.io/restart-attempt=1", 2, timeout=TIMEOUT)
        moved_in = time.time() - asked
    finally:
        pods_seen.stop()
        if node:
            set_node(kube, node, unschedulable=False, taints=None)
    why = "cordoned: taint node.kubernetes.io/unschedulable:NoSchedule" if taint is None else (
        f"{how}: taint {taint['key']}{'=' + taint['value'] if taint.get('value') else ''}:{taint['effect']}")
    for name in names:  # every worker, on the node or not, is told before it is stopped
        noticed, stopped = pods_seen.first(name, has_notice), pods_seen.first(name, deleting)
        assert noticed is not None and stopped is not None and noticed < stopped, (name, noticed, stopped)
        told = [json.loads(o["metadata"]["annotations"][NOTICE]) for _rv, n, o in pods_seen.changes
                if n == name and has_notice(o)]
        assert {t["cause"] for t in told} == {"NodeMaintenance"}, told  # never replaced by NodeDisruption
        assert told[0]["message"] == f"node {node} is about to go ({why}); the gang saves and restarts (not counted)"
        assert asked + 9 < told[0]["deadline"] < time.time() + 11  # the grace period of the spec
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["restartAttempt"]) == (1, 0, 0, 1), s
    (d,) = s["disruptions"]
    assert d["reason"] == "EvictionByEvictionAPI" and d["worker"] == f"pod {names[1]}", d
    js = jobset(kube, ns)["status"]
    assert (js["restarts"], js.get("restartsCountTowardsMax", 0)) == (1, 0)  # JobSet charged no maxRestarts
    new = [p for p in attempt_pods(kube, ns) if not deleting(p)
           and p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == "1"]
    assert len(new) == 2 and node not in {p["spec"]["nodeName"] for p in new}, [p["spec"]["nodeName"] for p in new]
    lost = [e for e in timeline(kube, ns) if e["reason"] == "WorkerDisrupted"]
    assert len(lost) == 1 and f"({node}: {why})" in lost[0]["message"], lost
    rec.assert_one_per_attempt(1)
    told_in = max(pods_seen.seen_at[pods_seen.first(n, has_notice) or 0] for n in names) - asked_mono
    print(f"\n{how}: {node} -> every worker told in {told_in * 1000:.0f} ms, gang running again off it "
          f"in {moved_in:.1f} s")


def test_b9_a_cordoned_node_moves_the_gang_with_node_maintenance_charged_to_nothing(env) -> None:
    moved(env, "cordoned", None)


def test_b9_a_reclaim_taint_moves_the_gang_with_node_maintenance_charged_to_nothing(env) -> None:
    moved(env, "AWS: spot interruption notice",
          {"key": "aws-node-termination-handler/spot-itn", "value": "true", "effect": "NoSchedule"})


def test_b9_kubectl_drain_moves_the_gang_and_tells_the_other_workers_node_maintenance(env) -> None:
    """`kubectl drain`: a cordon, then at once the Eviction API on the node's pods. The drained worker is
    usually stopped before gangrun's notice reaches it; the others are told NodeMaintenance, and the
    restart is charged to nothing."""
    cp, ns, rec, _ = env
    kube = cp.kube
    pods_seen = PodRecorder(cp, ns)
    node = ""
    try:
        ctl = controller(env)
        create_task(kube, ns, retries=0, failurePolicy={"maxRestarts": 0}, terminationGracePeriod="10s")
        wait_status(kube, ns, "train", is_running, "Running", ctl)
        pods = sorted(kube.wait_running_pods(ns, f"{TASK_LABEL}=train", 2), key=lambda p: p["metadata"]["name"])
        names = [p["metadata"]["name"] for p in pods]
        node = pods[1]["spec"]["nodeName"]
        set_node(kube, node, unschedulable=True, taints=None)
        evict(kube, ns, names[1])
        s = wait_status(kube, ns, "train", lambda s: s.get("reason") == RESTARTED, "restarted in the same attempt", ctl)
        new = kube.wait_running_pods(ns, f"{TASK_LABEL}=train,jobset.sigs.k8s.io/restart-attempt=1", 2,
                                     timeout=TIMEOUT)
    finally:
        pods_seen.stop()
        if node:
            set_node(kube, node, unschedulable=False, taints=None)
    noticed, stopped = pods_seen.first(names[0], has_notice), pods_seen.first(names[0], deleting)
    assert noticed is not None and stopped is not None and noticed < stopped, (noticed, stopped)
    told = [json.loads(o["metadata"]["annotations"][NOTICE]) for _rv, n, o in pods_seen.changes
            if n == names[0] and has_notice(o)]
    assert {t["cause"] for t in told} == {"NodeMaintenance"} and f"node {node} is about to go" in told[0]["message"]
    drained, evicted = pods_seen.first(names[1], has_notice), pods_seen.first(names[1], deleting)
    told_first = drained is not None and evicted is not None and drained < evicted
    print(f"\nkubectl drain: the drained worker {'was' if told_first else 'was not'} told before its eviction")
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["restartAttempt"]) == (1, 0, 0, 1), s
    js = jobset(kube, ns)["status"]
    assert (js["restarts"], js.get("restartsCountTowardsMax", 0)) == (1, 0)
    assert node not in {p["spec"]["nodeName"] for p in new}
    rec.assert_one_per_attempt(1)
