"""The real node leaves the host as it found it: after a stop, and after a SIGKILL followed by a start and a stop;
so do two real nodes on this host (realnodes.py), after a stop and after a SIGKILL followed by what
``./dev cluster down`` does (realnode.clean_leftovers).

What is compared (realnode.host_state): iptables-save and ip6tables-save (without counters), the
network links, the IPv4 routes, /proc/mounts, the top-level cgroup folders of every hierarchy,
net.ipv4.ip_forward and the paths containerd, the kubelet and the CNI plugins make outside their
configured folders. A real pod on each node's bridge network runs in between, so that there is
something to clean: a veth, a network namespace, volume and rootfs mounts, the pod's cgroups.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.e2e.conftest import real_node_images
from tests.harness import realnode, realnodes
from tests.harness.binaries import REPO_ROOT
from tests.harness.controlplane import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


@pytest.fixture(scope="module")
def node_parts(control_plane_tier_c: ControlPlane) -> tuple[ControlPlane, list[Path]]:
    cp = control_plane_tier_c
    return cp, real_node_images(cp.binaries)


def run_a_pod(cp: ControlPlane, name: str, node: str = realnode.NODE_NAME) -> None:
    """A real pod on `node`'s bridge network with a volume; wait until it runs."""
    kube = cp.kube
    on_node = realnode.placement()
    on_node["nodeSelector"]["kubernetes.io/hostname"] = node
    kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                 "spec": {"terminationGracePeriodSeconds": 1, **on_node,
                          "containers": [{"name": "c", "image": realnode.IMAGE,
                                          "command": ["python3", "-c", "import time; time.sleep(600)"],
                                          "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                          "volumes": [{"name": "scratch", "emptyDir": {}}]}})
    kube.wait_for(f"pod {name} Running", lambda: kube.get("Pod", name, "default")["status"].get("phase") == "Running",
                  timeout=120)


def forget_pod(cp: ControlPlane, name: str) -> None:
    """Remove the Pod object of a node that is gone (nothing runs it any more)."""
    cp.kube.request("DELETE", f"/api/v1/namespaces/default/pods/{name}", body={"gracePeriodSeconds": 0})


def run_pods(cp: ControlPlane, name: str, count: int) -> list[str]:
    """A real pod on each of the first `count` nodes (:func:`run_a_pod`); their names."""
    pods = [name if i == 1 else f"{name}-{i}" for i in range(1, count + 1)]
    for i, pod in enumerate(pods, 1):
        run_a_pod(cp, pod, realnodes.node_net(i).name)
    return pods


def diff(before: dict, after: dict) -> dict:
    return {k: {"gone": sorted(set(map(str, before[k])) - set(map(str, after[k]))) if isinstance(before[k], list)
                else before[k],
                "new": sorted(set(map(str, after[k])) - set(map(str, before[k]))) if isinstance(after[k], list)
                else after[k]}
            for k in before if before[k] != after[k]}


@pytest.mark.parametrize("count", [1, 2], ids=["one-node", "two-nodes"])
def test_stopping_the_real_nodes_leaves_the_host_as_it_was(node_parts, count: int) -> None:
    cp, images = node_parts
    realnode.clean_leftovers()
    before = realnode.host_state()
    nodes = realnodes.start_nodes(cp.binaries, cp.kubeconfig, Path(tempfile.mkdtemp(prefix="gangrun-node-")),
                                  images, count)
    pods: list[str] = []
    try:
        pods = run_pods(cp, "host-check", count)
        during = realnode.host_state()
        assert during != before  # the nodes did change the host (bridges, routes, mounts, chains, cgroups)
        for n in nodes:
            assert n.net.bridge in " ".join(during["links"])
    finally:
        realnodes.stop_nodes(nodes)
        for pod in pods:
            forget_pod(cp, pod)
    after = realnode.host_state()
    assert after == before, diff(before, after)


@pytest.mark.parametrize("count", [1, 2], ids=["one-node", "two-nodes"])
def test_sigkilled_nodes_are_cleaned_up_by_the_next_start_and_stop_or_by_cluster_down(node_parts, count: int) -> None:
    """One node: the next start cleans up, then its stop; two: what `./dev cluster down` does after a killed
    `up` (clean_leftovers, from the record both nodes wrote)."""
    cp, images = node_parts
    realnode.clean_leftovers()
    before = realnode.host_state()
    work = Path(tempfile.mkdtemp(prefix="gangrun-node-"))
    # The nodes as a program of their own: the harness from the repository root, gangrun as the tests import it.
    proc = subprocess.Popen([sys.executable, "-m", "tests.harness.realnodes", str(count), str(cp.kubeconfig), str(work),
                             *map(str, images)], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    pods: list[str] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        pods = run_pods(cp, "host-check-killed", count)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert realnode.host_state() != before  # the kill left the nodes' changes behind
    for pod in pods:
        forget_pod(cp, pod)
    if count == 1:
        node = realnode.RealNode(cp.binaries, cp.kubeconfig, Path(tempfile.mkdtemp(prefix="gangrun-node-")), images)
        node.start()
        node.stop()
    else:
        assert realnode.clean_leftovers()
        for i in range(2, count + 1):  # a joined node's name is not taken again: forget it as its stop would
            cp.kube.delete("Node", realnodes.node_net(i).name)
    after = realnode.host_state()
    assert after == before, diff(before, after)
