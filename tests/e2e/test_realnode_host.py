"""The real node leaves the host as it found it: after a stop, and after a SIGKILL followed by a start and a stop.

What is compared (realnode.host_state): iptables-save and ip6tables-save (without counters), the
network links, /proc/mounts, the top-level cgroup folders of every hierarchy, net.ipv4.ip_forward
and the paths containerd, the kubelet and the CNI plugins make outside their configured folders.
A real pod on the bridge network runs in between, so that there is something to clean: a veth, a
network namespace, volume and rootfs mounts, the pod's cgroups.
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
from tests.harness import realnode
from tests.harness.binaries import REPO_ROOT
from tests.harness.controlplane import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


@pytest.fixture(scope="module")
def node_parts(control_plane_tier_c: ControlPlane) -> tuple[ControlPlane, list[Path]]:
    cp = control_plane_tier_c
    return cp, real_node_images(cp.binaries)


def run_a_pod(cp: ControlPlane, name: str) -> None:
    """A real pod on the bridge network with a volume; wait until it runs."""
    kube = cp.kube
    kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                 "spec": {"terminationGracePeriodSeconds": 1, **realnode.placement(),
                          "containers": [{"name": "c", "image": realnode.IMAGE,
                                          "command": ["python3", "-c", "import time; time.sleep(600)"],
                                          "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                          "volumes": [{"name": "scratch", "emptyDir": {}}]}})
    kube.wait_for(f"pod {name} Running", lambda: kube.get("Pod", name, "default")["status"].get("phase") == "Running",
                  timeout=120)


def forget_pod(cp: ControlPlane, name: str) -> None:
    """Remove the Pod object of a node that is gone (nothing runs it any more)."""
    cp.kube.request("DELETE", f"/api/v1/namespaces/default/pods/{name}", body={"gracePeriodSeconds": 0})


def diff(before: dict, after: dict) -> dict:
    return {k: {"gone": sorted(set(map(str, before[k])) - set(map(str, after[k]))) if isinstance(before[k], list)
                else before[k],
                "new": sorted(set(map(str, after[k])) - set(map(str, before[k]))) if isinstance(after[k], list)
                else after[k]}
            for k in before if before[k] != after[k]}


def test_stopping_the_real_node_leaves_the_host_as_it_was(node_parts) -> None:
    cp, images = node_parts
    realnode.clean_leftovers()
    before = realnode.host_state()
    node = realnode.RealNode(cp.binaries, cp.kubeconfig, Path(tempfile.mkdtemp(prefix="gangrun-node-")), images)
    node.start()
    try:
        run_a_pod(cp, "host-check")
        during = realnode.host_state()
        assert during != before  # the node did change the host (a bridge, mounts, chains, cgroups)
        assert realnode.BRIDGE in " ".join(during["links"])
    finally:
        node.stop()
        forget_pod(cp, "host-check")
    after = realnode.host_state()
    assert after == before, diff(before, after)


def test_a_sigkilled_node_is_cleaned_up_by_the_next_start_and_stop(node_parts) -> None:
    cp, images = node_parts
    realnode.clean_leftovers()
    before = realnode.host_state()
    work = Path(tempfile.mkdtemp(prefix="gangrun-node-"))
    # The node as a program of its own: the harness from the repository root, gangrun as the tests import it.
    proc = subprocess.Popen([sys.executable, "-m", "tests.harness.realnode", str(cp.kubeconfig), str(work),
                             *map(str, images)], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        run_a_pod(cp, "host-check-killed")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert realnode.host_state() != before  # the kill left the node's changes behind
    forget_pod(cp, "host-check-killed")
    node = realnode.RealNode(cp.binaries, cp.kubeconfig, Path(tempfile.mkdtemp(prefix="gangrun-node-")), images)
    node.start()
    node.stop()
    after = realnode.host_state()
    assert after == before, diff(before, after)
