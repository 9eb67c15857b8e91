"""Gangs across two real nodes on this one host (realnodes.py): one worker per node, meeting across the bridges.

The session's control plane (tier C) gets two real nodes: ``gangrun-node`` (pods on ``gangrun0``,
10.250.0.0/24, CoreDNS on its gateway) and ``gangrun-node-2`` (its own containerd, kubelet, cgroup
root ``/gangrun-node-2`` and pods on ``gangrun1``, 10.250.1.0/24), both with the label and taint that
:func:`realnode.placement` selects, and the gangrun controller in-cluster (realnode_tasks.py). The gloo
DDP example runs as a 2-worker gang whose pod anti-affinity on the task label (the one the cluster's
example manifest carries on two nodes) puts one worker on each node: rank 1 finds rank 0 by its JobSet
hostname through the one CoreDNS and the two ranks' gloo connections cross from one bridge to the other
through the host. The nodes share this machine's kernel, CPU and page cache (docs/kubernetes.md, "Two
nodes").

Root and the real-node packages are needed, as for test_realnode_e2e.py; without them these tests skip.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import real_node_images
from tests.e2e.test_controller_e2e import list_tasks
from tests.e2e.test_realnode_e2e import assert_resumed_from
from tests.harness import realnode, realnodes
from tests.harness.client import has_condition
from tests.harness.cluster import one_worker_per_node
from tests.harness.controlplane import ControlPlane
from tests.harness.faults import (
    HostLogs,
    newest_checkpoint,
    node_lifecycle,
    power_off,
    power_on,
    taint_out_of_service,
    uninterrupted,
)
from tests.harness.realnode_tasks import (
    TIMEOUT,
    LogFollower,
    RealCluster,
    cleanup_task,
    committed_steps,
    ddp_task,
    new_running_pods,
    rank_of,
    real_cluster,
    starts_by_rank,
    submit,
    train_task,
    training_process,
    wait_phase,
)
from tests.harness.tasks import TASK_LABEL, task_path

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

TIMINGS: dict[str, float] = {}
NETS = [realnodes.node_net(1), realnodes.node_net(2)]


@pytest.fixture(scope="module", name="real_cluster")  # one real node at a time: test_realnode_host.py starts its own
def real_cluster_fixture(control_plane_tier_c: ControlPlane) -> Iterator[RealCluster]:
    cp = control_plane_tier_c
    images = real_node_images(cp.binaries)
    t0 = time.monotonic()
    with real_cluster(cp, images, nodes=2) as rc:
        TIMINGS["2 nodes, queue and controller up"] = time.monotonic() - t0
        yield rc


def internal_ip(node: dict) -> str:
    return next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def test_both_nodes_are_ready_with_their_own_address_bridge_and_the_labels_placement_selects(
        real_cluster: RealCluster) -> None:
    rc = real_cluster
    assert [n.net for n in (rc.node, *rc.others)] == NETS
    for net in NETS:
        node = rc.kube.get("Node", net.name)
        assert has_condition(node, "Ready"), node["status"]["conditions"]
        assert internal_ip(node) == net.gateway  # the kubelet's --node-ip: its own bridge's gateway
        assert ipaddress.ip_address(net.gateway) in ipaddress.ip_network(net.subnet)
        assert node["metadata"]["labels"][realnode.NODE_LABEL[0]] == realnode.NODE_LABEL[1]
        assert realnode.TAINT in [{k: t[k] for k in ("key", "value", "effect")} for t in node["spec"]["taints"]]
    assert len({n.cgroup_root for n in NETS}) == len({n.bridge for n in NETS}) == 2


def test_a_two_worker_gloo_ddp_gang_trains_with_one_worker_on_each_node(real_cluster: RealCluster) -> None:
    """examples/ddp/train.py (the same task as test_realnode_e2e.py's, with the host's torch) plus the
    anti-affinity of the cluster's example manifest: the scheduler puts rank 0 and rank 1 on different
    nodes, their pods get addresses on different bridges, and DDP over gloo trains across them to
    Succeeded in attempt 1."""
    rc = real_cluster
    body = ddp_task(rc, "ddp-across")
    body["spec"]["podTemplate"]["spec"]["affinity"] = one_worker_per_node("ddp-across")
    try:
        t0 = time.monotonic()
        submit(rc, body)
        pods = rc.kube.wait_running_pods(rc.ns, f"{TASK_LABEL}=ddp-across", 2, timeout=TIMEOUT)
        TIMINGS["ddp across nodes: create -> 2 workers Running"] = time.monotonic() - t0
        by_rank = {rank_of(p): p for p in pods}
        placed = {r: (p["spec"]["nodeName"], p["status"]["podIP"]) for r, p in by_rank.items()}
        assert {node for node, _ip in placed.values()} == {n.name for n in NETS}, placed
        for node, ip in placed.values():
            net = next(n for n in NETS if n.name == node)
            assert ipaddress.ip_address(ip) in ipaddress.ip_network(net.subnet), placed
        logs = {r: LogFollower(rc, p["metadata"]["name"]) for r, p in by_rank.items()}
        s = wait_phase(rc, "ddp-across", "Succeeded", timeout=2 * TIMEOUT)
        TIMINGS["ddp across nodes: create -> Succeeded"] = time.monotonic() - t0
        assert s["attempt"] == 1 and not s.get("restartAttempt"), s
        logs[0].wait(r"step 20 saved", timeout=10)
        assert "starting fresh: 2 ranks, DDP" in logs[0].text, logs[0].text
        print(f"ddp across nodes: placed {placed}")
    finally:
        cleanup_task(rc, "ddp-across")


def test_b9_a_cordoned_node_moves_the_gang_and_every_rank_resumes_from_the_save_at_the_notice(
        real_cluster: RealCluster) -> None:
    """`kubectl cordon` of rank 1's node while the shipped example trains: every worker is told
    NodeMaintenance, rank 0 saves at its SIGTERM, the controller evicts the workers on the cordoned node,
    and JobSet restarts the gang in attempt 1, charged to nothing, off that node; every rank of the new
    run loads the step saved at the notice."""
    rc = real_cluster
    name = "cordoned"
    node = ""
    try:
        submit(rc, train_task(rc, name, steps=60, step_seconds=0.1))
        first = rc.kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={name}", 2, timeout=TIMEOUT)
        by_rank = {rank_of(p): p for p in first}
        log = LogFollower(rc, by_rank[0]["metadata"]["name"])
        log.wait(r"step 10: loss")
        node = by_rank[1]["spec"]["nodeName"]
        t0 = time.monotonic()
        rc.kube.patch("Node", node, None, {"spec": {"unschedulable": True}})
        saved = int(log.wait(r"stop requested \(NodeMaintenance\): saved step (\d+)").group(1))
        again = new_running_pods(rc, name, 1, {p["metadata"]["uid"] for p in first})
        starts = starts_by_rank(rc, again)
        TIMINGS["cordon -> every rank resumed"] = time.monotonic() - t0
        s = wait_phase(rc, name, "Succeeded")
    finally:
        if node:
            rc.kube.patch("Node", node, None, {"spec": {"unschedulable": False}})
        cleanup_task(rc, name)
    assert node not in {p["spec"]["nodeName"] for p in again}, [p["spec"]["nodeName"] for p in again]
    lines = {r: m.group(0) for r, m in starts.items()}
    assert set(starts) == {0, 1}, lines
    for rank in (0, 1):  # every rank loads the save made at the notice, of its own attempt
        assert (int(starts[rank]["step"]), starts[rank]["restart"], starts[rank]["source"]) == (saved, "1", "own"), (
            lines, saved)
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["restartAttempt"]) == (1, 0, 0, 1), s
    print(f"cordon of {node} -> every rank resumed from step {saved}: {TIMINGS['cordon -> every rank resumed']:.1f} s")
def restore(rc: RealCluster, victim: realnode.RealNode, task: str, logs: HostLogs) -> None:
    """After a test that killed `victim`, whatever happened: the node powered on and in service, the task gone."""
    logs.stop()
    with contextlib.suppress(Exception):
        taint_out_of_service(rc.kube, victim.net.name, False)
    if not victim.components or not all(c.alive() for c in victim.components):
        with contextlib.suppress(Exception):
            power_on(victim)
    cleanup_task(rc, task)


def report(what: str, figures: dict[str, float]) -> None:
    for k, v in figures.items():
        print(f"{what}: {k}: {v:.1f} s")
        TIMINGS[f"{what}: {k}"] = v


def test_a_node_killed_outright_restarts_a_rigid_gang_as_a_node_disruption_once_it_is_back(
        real_cluster: RealCluster) -> None:
    """A power loss: the second node's kubelet, containerd and containers are SIGKILLed while a 2-worker gang
    (one worker per node by anti-affinity, resumeAfterPreemption, no retry, no restart allowed) trains. The node
    lifecycle controller marks the node NotReady; the operator, knowing it is off, taints it out-of-service, so
    PodGC fails its pod as a disruption (DisruptionTarget) and force-deletes it; JobSet restarts the gang without
    charging maxRestarts; the worker on the healthy node saves at its stop; the restarted gang waits (its second
    worker cannot go anywhere else) until the node is powered on and the taint removed, and then every rank
    resumes from the newest committed checkpoint: one task, one JobSet, attempt 1, one disruption and no budget
    spent, and the final weights equal, bit for bit, to an uninterrupted run's."""
    rc, name, steps = real_cluster, "lost", 800
    jobset, victim = f"{name}-1", rc.others[0]
    kube, selector = rc.kube, f"{TASK_LABEL}={name}"
    body = train_task(rc, name, steps=steps, step_seconds=0.15)
    body["spec"]["podTemplate"]["spec"]["affinity"] = one_worker_per_node(name)
    figures: dict[str, float] = {}
    logs = HostLogs(rc, jobset)
    try:
        with node_lifecycle(rc.cp):
            submit(rc, body)
            uid = kube.request("GET", task_path(rc.ns, name))["metadata"]["uid"]
            first = kube.wait_running_pods(rc.ns, selector, 2, timeout=TIMEOUT)
            first_uids = {p["metadata"]["uid"] for p in first}
            rank0 = next(p["metadata"]["uid"] for p in first if rank_of(p) == 0)
            lost = next(p for p in first if p["spec"]["nodeName"] == victim.net.name)
            logs.wait(rank0, r"step 10: loss")

            t0 = time.monotonic()
            power_off(victim)
            kube.wait_for(f"{victim.net.name} NotReady", lambda: not has_condition(
                kube.get("Node", victim.net.name), "Ready"), timeout=TIMEOUT, interval=0.2)
            figures["node killed -> NotReady"] = time.monotonic() - t0
            taint_out_of_service(kube, victim.net.name, True)  # the operator: the machine is off
            kube.wait_for("the lost worker's pod gone", lambda: lost["metadata"]["uid"] not in {
                p["metadata"]["uid"] for p in kube.list("Pod", rc.ns, label_selector=selector)},
                timeout=TIMEOUT, interval=0.2)
            figures["node killed -> its pod deleted"] = time.monotonic() - t0
            kube.wait_for("the healthy node's worker gone", lambda: all(
                training_process(u) is None for u in first_uids), timeout=TIMEOUT, interval=0.2)
            figures["node killed -> the gang stopped"] = time.monotonic() - t0
            committed = committed_steps(rc, name, 1)
            newest = committed[max(committed)]
            waiting = kube.wait_for("the restarted gang waiting for the node", lambda: [
                p for p in kube.list("Pod", rc.ns, label_selector=selector)
                if p["metadata"]["uid"] not in first_uids and p["status"].get("phase") == "Pending"
                and not p["spec"].get("nodeName")], timeout=TIMEOUT, interval=0.2)
            assert len(waiting) == 1, waiting

            t1 = time.monotonic()
            figures["node powered on -> kubelet serving"] = power_on(victim)
            kube.wait_for(f"{victim.net.name} Ready", lambda: has_condition(
                kube.get("Node", victim.net.name), "Ready"), timeout=TIMEOUT, interval=0.2)
            taint_out_of_service(kube, victim.net.name, False)  # the operator: it is back
            starts = logs.starts(first_uids)
            figures["node powered on -> every rank resumed"] = time.monotonic() - t1
            figures["node killed -> every rank resumed"] = time.monotonic() - t0
            status = wait_phase(rc, name, "Succeeded", timeout=2 * TIMEOUT)
        tasks = [t["metadata"]["uid"] for t in list_tasks(kube, rc.ns) if t["metadata"]["name"] == name]
        assert tasks == [uid], tasks
        assert [j["metadata"]["name"] for j in kube.list("JobSet", rc.ns, label_selector=selector)] == [jobset]
        s = status
        assert (s["attempt"], len(s["attempts"]), s["userRetriesUsed"], s["systemRetriesUsed"],
                s.get("restartAttempt", 0)) == (1, 1, 0, 0, 1), s
        assert [d["worker"] for d in s.get("disruptions") or []] == [f"pod {lost['metadata']['name']}"], s
        js = kube.get("JobSet", jobset, rc.ns)["status"]
        assert (js["restarts"], js.get("restartsCountTowardsMax", 0)) == (1, 0), js
        assert {(m["attempt"], m["restart"]) for m in starts.values()} == {("1", "1")}, starts
        assert_resumed_from(starts, {0: newest}, "own")
        assert newest_checkpoint(rc.data, name, 1) == {"step": steps, "w": uninterrupted(steps)}
        print(f"node killed: disruption {s['disruptions']}")
        report("node killed", figures)
    finally:
        restore(rc, victim, name, logs)


def test_a_node_killed_outright_shrinks_an_elastic_gang_onto_the_node_left_until_the_node_is_back(
        real_cluster: RealCluster) -> None:
    """The same power loss under an elastic gang (2 nodes, minNodes 1, one worker per node, resizeCooldown 5 s).
    JobSet restarts the gang for the lost worker as for a rigid one, but its second worker finds no node; 30 s
    later the controller stops the worker left (cause Resize) and runs the gang on the node left: a JobSet of
    one worker, in the same attempt, charged to nothing. It does not grow back while the node is down, its
    cooldown long over; once the node is back and may take a worker it grows back to 2. Each start resumes every
    rank from the newest committed checkpoint, and the final weights equal, bit for bit, an uninterrupted run's."""
    rc, name, steps = real_cluster, "lost-e", 1500
    victim = rc.others[0]
    kube, selector = rc.kube, f"{TASK_LABEL}={name}"
    body = train_task(rc, name, steps=steps, step_seconds=0.1)
    body["spec"].update(minNodes=1, resizeCooldown="5s")
    body["spec"]["podTemplate"]["spec"]["affinity"] = one_worker_per_node(name)
    figures: dict[str, float] = {}
    logs = HostLogs(rc, f"{name}-1")  # its JobSets: lost-e-1, then lost-e-1-r1, lost-e-1-r2

    def jobsets() -> list[tuple[str, int]]:
        return sorted((j["metadata"]["name"], j["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"])
                      for j in kube.list("JobSet", rc.ns, label_selector=selector)
                      if not j["metadata"].get("deletionTimestamp"))

    def saved_at_resize(count: int) -> list[tuple[str, int]]:
        """(pod uid, step) of the workers that saved at a Resize stop, once there are `count`: the one worker
        running before each resize (rank 0, the only writer)."""
        def found() -> list[tuple[str, int]] | None:
            saves = [(u, int(m.group(1))) for u, text in list(logs.texts.items())
                     if (m := re.search(r"stop requested \(Resize\): saved step (\d+)", text))]
            return saves if len(saves) >= count else None
        return kube.wait_for(f"{count} saves at a Resize stop", found, timeout=TIMEOUT, interval=0.1)

    try:
        with node_lifecycle(rc.cp):
            submit(rc, body)
            first = kube.wait_running_pods(rc.ns, selector, 2, timeout=TIMEOUT)
            seen = {p["metadata"]["uid"] for p in first}
            logs.wait(next(p["metadata"]["uid"] for p in first if rank_of(p) == 0), r"step 10: loss")

            t0 = time.monotonic()
            power_off(victim)
            kube.wait_for(f"{victim.net.name} NotReady", lambda: not has_condition(
                kube.get("Node", victim.net.name), "Ready"), timeout=TIMEOUT, interval=0.2)
            taint_out_of_service(kube, victim.net.name, True)
            kube.wait_for("the gang shrunk onto the node left", lambda: jobsets() == [(f"{name}-1-r1", 1)],
                          timeout=2 * TIMEOUT, interval=0.2)
            figures["node killed -> the gang shrunk"] = time.monotonic() - t0
            ((stopped, saved),) = saved_at_resize(1)
            small = logs.starts({stopped}, count=1, world=1)
            figures["node killed -> the shrunk gang resumed"] = time.monotonic() - t0
            assert {(r, m["attempt"], int(m["step"]), m["source"]) for r, m in small.items()} == {
                (0, "1", saved, "own")}, small
            s = wait_phase(rc, name, "Running")
            assert (s["elastic"]["nodes"], s["userRetriesUsed"], s["systemRetriesUsed"]) == (1, 0, 0), s

            time.sleep(15)  # three cooldowns: quota is free, but no node may take a second worker
            assert jobsets() == [(f"{name}-1-r1", 1)]

            t1 = time.monotonic()
            figures["node powered on -> kubelet serving"] = power_on(victim)
            kube.wait_for(f"{victim.net.name} Ready", lambda: has_condition(
                kube.get("Node", victim.net.name), "Ready"), timeout=TIMEOUT, interval=0.2)
            taint_out_of_service(kube, victim.net.name, False)
            kube.wait_for("the gang grown back", lambda: jobsets() == [(f"{name}-1-r2", 2)], timeout=TIMEOUT,
                          interval=0.2)
            ((_, _), (small_uid, saved)) = saved_at_resize(2)
            both = logs.starts({*seen, stopped, small_uid}, world=2)
            figures["node powered on -> the grown gang resumed"] = time.monotonic() - t1
            assert_resumed_from(both, {0: saved}, "own")
            status = wait_phase(rc, name, "Succeeded", timeout=2 * TIMEOUT)
        s = status
        assert (s["attempt"], len(s["attempts"]), s["userRetriesUsed"], s["systemRetriesUsed"]) == (1, 1, 0, 0), s
        assert len(s.get("disruptions") or []) == 1 and s["elastic"]["nodes"] == 2, s
        assert newest_checkpoint(rc.data, name, 1) == {"step": steps, "w": uninterrupted(steps)}
        report("elastic node killed", figures)
    finally:
        restore(rc, victim, name, logs)


def test_zz_report_the_two_node_timings(real_cluster: RealCluster) -> None:
    """Not a check: the figures of this run (`pytest -s` shows them)."""
    for node in (real_cluster.node, *real_cluster.others):
        for k, v in node.timings.items():
            print(f"{node.net.name}: {k}: {v:.1f} s")
    for k, v in TIMINGS.items():
        print(f"two nodes: {k}: {v:.1f} s")
