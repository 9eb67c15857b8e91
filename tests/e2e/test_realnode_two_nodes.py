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

import ipaddress
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import real_node_images
from tests.harness import realnode, realnodes
from tests.harness.client import has_condition
from tests.harness.cluster import one_worker_per_node
from tests.harness.controlplane import ControlPlane
from tests.harness.realnode_tasks import (
    TIMEOUT,
    LogFollower,
    RealCluster,
    cleanup_task,
    ddp_task,
    rank_of,
    real_cluster,
    submit,
    wait_phase,
)
from tests.harness.tasks import TASK_LABEL

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


def test_zz_report_the_two_node_timings(real_cluster: RealCluster) -> None:
    """Not a check: the figures of this run (`pytest -s` shows them)."""
    for node in (real_cluster.node, *real_cluster.others):
        for k, v in node.timings.items():
            print(f"{node.net.name}: {k}: {v:.1f} s")
    for k, v in TIMINGS.items():
        print(f"two nodes: {k}: {v:.1f} s")
