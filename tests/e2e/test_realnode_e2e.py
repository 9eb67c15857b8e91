"""Real pods on a real node: the preemption-and-resume loop with every worker a real process in a container.

The session's control plane (tier C, with its kwok nodes) gets a real node beside it (realnode.py:
containerd, the kubelet, CoreDNS), the images built here (hack/build-images.sh) and the gangrun
controller deployed in-cluster from that image with deploy/'s manifests (incluster.py), watching
one namespace of its own. The tasks run the shipped training example
(``python -m gangrun.examples.train``) with their checkpoints on a hostPath volume given through
``podTemplate``, in a ClusterQueue sized for two half-CPU workers, so that a one-worker task of
higher priority makes Kueue preempt the gang.

These tests need root and Debian's containerd, runc, CNI plugins, buildah and debootstrap (``./dev
test`` installs them); without them they skip, and with ``CI=true`` they fail.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import incluster
import pytest
import realnode
from controlplane import ControlPlane, Kube, has_condition
from test_controller_e2e import ATTEMPT_LABEL, TASK_LABEL, task_path, wait_status
from test_training_e2e import PodRecorder

from conftest import real_node_images

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

QUEUE = "real"
CLUSTER_QUEUE = "real-node"
TIMEOUT = 180.0
TIMINGS: dict[str, float] = {}  # measured along the way, printed by the last test


@dataclass
class RealCluster:
    cp: ControlPlane
    node: realnode.RealNode
    ns: str
    data: Path       # a host folder the pods see at the same path

    @property
    def kube(self) -> Kube:
        return self.cp.kube


@pytest.fixture(scope="module")  # one real node at a time: test_realnode_host.py starts its own
def real_cluster(control_plane_tier_c: ControlPlane) -> Iterator[RealCluster]:
    cp = control_plane_tier_c
    images = real_node_images(cp.binaries)
    node = realnode.RealNode(cp.binaries, cp.kubeconfig, Path(tempfile.mkdtemp(prefix="gangrun-node-")), images,
                             keep_workdir=bool(os.environ.get("GANGRUN_E2E_KEEP")))
    node.start()
    data = Path(tempfile.mkdtemp(prefix="gangrun-data-"))
    data.chmod(0o1777)  # the image's user (65532) writes the checkpoints
    try:
        ns = cp.make_namespace("realnode")
        kube = cp.kube
        kube.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
                    "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                             "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                                 "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "1"},
                                                                         {"name": "memory", "nominalQuota": "1Gi"}]}]}]}})
        kube.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                    "metadata": {"name": QUEUE, "namespace": ns}, "spec": {"clusterQueue": CLUSTER_QUEUE}})
        kube.wait_for("LocalQueue real Active", lambda: has_condition(kube.get("LocalQueue", QUEUE, ns), "Active"))
        incluster.deploy(kube, cp.api_url, namespace=ns)
        yield RealCluster(cp, node, ns, data)
    finally:
        with contextlib.suppress(Exception):
            incluster.remove(cp.kube)
        node.stop()
        import shutil

        shutil.rmtree(data, ignore_errors=True)


def train_task(rc: RealCluster, name: str, *, nodes: int = 2, priority: str = "low", steps: int = 60,
               resume: bool = True, retries: int = 0, max_restarts: int = 0) -> dict:
    """The shipped example in real containers, its checkpoints in a hostPath folder through podTemplate."""
    worker = {"name": "worker", "volumeMounts": [{"name": "data", "mountPath": str(rc.data)}]}
    template = {"spec": {"containers": [worker],
                         "volumes": [{"name": "data", "hostPath": {"path": str(rc.data), "type": "Directory"}}],
                         **realnode.placement()}}
    return {
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name, "namespace": rc.ns},
        "spec": {"nodes": nodes, "command": ["python", "-m", "gangrun.examples.train"], "image": realnode.IMAGE,
                 "env": {"STEPS": str(steps), "SAVE_EVERY": "2", "STEP_SECONDS": "0.2"},
                 "resources": {"cpu": "500m", "memory": "256Mi"}, "queue": QUEUE, "priorityClass": priority,
                 "retries": retries, "terminationGracePeriod": "20s",
                 "failurePolicy": {"maxRestarts": max_restarts, "resumeAfterPreemption": resume},
                 "checkpoint": {"uri": f"file://{rc.data}"}, "podTemplate": template},
    }


def submit(rc: RealCluster, body: dict) -> None:
    rc.kube.request("POST", task_path(rc.ns), body=body)


class LogFollower:
    """A worker's output, followed from the API server on a thread and kept after its pod is gone."""

    def __init__(self, rc: RealCluster, pod: str) -> None:
        self.text = ""
        self._rc, self._pod = rc, pod
        threading.Thread(target=self._run, daemon=True, name=f"log-{pod}").start()

    def _run(self) -> None:
        from kubernetes import client

        api = client.CoreV1Api(self._rc.kube.api_client)
        resp = api.read_namespaced_pod_log(self._pod, self._rc.ns, container="worker", follow=True,
                                           _preload_content=False)
        for chunk in resp.stream(1024):
            self.text += chunk.decode(errors="replace")

    def wait(self, pattern: str, timeout: float = TIMEOUT) -> re.Match:
        return self._rc.kube.wait_for(f"{pattern!r} in the log of {self._pod}", lambda: re.search(pattern, self.text),
                                      timeout=timeout, interval=0.3)


def running_pods(rc: RealCluster, task: str, attempt: int) -> list[dict]:
    return rc.kube.running_pods(rc.ns, f"{TASK_LABEL}={task},{ATTEMPT_LABEL}={attempt}")


def worker_exits(rec: PodRecorder, uids: set[str]) -> dict[str, dict]:
    """The worker container's terminated state of each pod in `uids`, as the watch saw it last."""
    out: dict[str, dict] = {}
    for _rv, name, pod in rec.changes:
        if pod["metadata"]["uid"] not in uids:
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs["name"] == "worker" and "terminated" in (cs.get("state") or {}):
                out[name] = cs["state"]["terminated"]
    return out


def cleanup_task(rc: RealCluster, name: str) -> None:
    with contextlib.suppress(Exception):
        rc.kube.request("DELETE", task_path(rc.ns, name))


def wait_phase(rc: RealCluster, name: str, phase: str, timeout: float = TIMEOUT) -> dict:
    try:
        return wait_status(rc.kube, rc.ns, name, lambda s: s.get("phase") == phase, phase, timeout=timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}\ncontroller:\n{incluster.logs(rc.kube)[-4000:]}") from None


# ------------------------------------------------------------------------------- tests


def test_jobset_pod_hostnames_resolve_from_inside_a_real_pod(real_cluster: RealCluster) -> None:
    """Each worker resolves rank 0's address (MASTER_ADDR, `<jobset>-<job>-0-0.<subdomain>`) and the other
    worker's hostname through the cluster DNS, from inside its container."""
    rc = real_cluster
    script = ("import os, socket, time\n"
              "names = [os.environ['MASTER_ADDR'], os.environ['MASTER_ADDR'].replace('-0-0.', '-0-1.', 1)]\n"
              "deadline = time.time() + 60\n"
              "for n in names:\n"
              "    while True:\n"
              "        try:\n"
              "            print(n, socket.gethostbyname(n), flush=True); break\n"
              "        except OSError:\n"
              "            if time.time() > deadline: raise\n"
              "            time.sleep(0.5)\n")
    body = train_task(rc, "dns")
    body["spec"]["command"] = ["python", "-c", script]
    try:
        submit(rc, body)
        s = wait_phase(rc, "dns", "Succeeded")
        assert s["attempt"] == 1
    finally:
        cleanup_task(rc, "dns")


def preempt_and_finish(rc: RealCluster, name: str, *, resume: bool) -> tuple[dict[int, int], dict[int, re.Match], dict]:
    """Run `name` (2 real workers), preempt it with a 1-worker task of higher priority once it trained 10
    steps, and follow it to Succeeded. Returns the step each rank saved at the stop, the `rank R/2 ...
    starting at step N (source)` line of each of the next run's workers by rank, and the final status."""
    kube = rc.kube
    urgent = f"{name}-urgent"
    rec = PodRecorder(rc.cp, rc.ns)
    try:
        t0 = time.monotonic()
        submit(rc, train_task(rc, name, steps=60, resume=resume, retries=0 if resume else 1))
        first = kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={name}", 2, timeout=TIMEOUT)
        TIMINGS[f"{name}: create -> 2 workers Running"] = time.monotonic() - t0
        first_uids = {p["metadata"]["uid"] for p in first}
        logs = [LogFollower(rc, p["metadata"]["name"]) for p in first]
        for f in logs:
            f.wait(r"step 10: loss")
        t1 = time.monotonic()
        submit(rc, train_task(rc, urgent, nodes=1, priority="high", steps=10))
        # The gang is stopped: each worker's own words, and its container's exit.
        saved = {}  # rank -> the step it saved at the stop (rank 0 writes the checkpoint)
        for f in logs:
            log = f.wait(r"stop requested \((.*)\): saved step (\d+)").string
            m = re.search(r"stop requested \((.*)\): saved step (\d+)", log)
            assert m and m.group(1) != "cause unknown", log
            rank = re.search(r"rank (\d+)/2 attempt 1 restart \d+: starting at step", log)
            assert rank, log
            saved[int(rank.group(1))] = int(m.group(2))
        exits = kube.wait_for("both first workers terminated", lambda: (
            e if len(e := worker_exits(rec, first_uids)) == 2 else None), timeout=TIMEOUT)
        TIMINGS[f"{name}: preemptor created -> both workers saved and exited"] = time.monotonic() - t1
        # Ended by the SIGTERM it handled (143) or on its own (0), never SIGKILLed at the grace period's end (137);
        # the launcher's termination message names the checkpoint committed at the stop.
        assert {e["exitCode"] for e in exits.values()} <= {0, 143}, exits
        committed = [int(m.group(1)) for e in exits.values() if (m := re.search(r'"step": ?(\d+)', e.get("message", "")))]
        assert saved[0] in committed, (committed, saved)
        wait_phase(rc, urgent, "Succeeded")
        attempt = 1 if resume else 2
        t2 = time.monotonic()
        again = kube.wait_for(f"attempt {attempt} running again", lambda: (
            p if len(p := [x for x in running_pods(rc, name, attempt) if x["metadata"]["uid"] not in first_uids]) == 2
            else None), timeout=TIMEOUT)
        starts = {int(m.group(1)): m for p in again if (m := LogFollower(rc, p["metadata"]["name"]).wait(
            r"rank (\d+)/2 attempt \d+ restart \d+: starting at step (\d+) \((.*)\)"))}
        TIMINGS[f"{name}: preemptor done -> workers loaded the checkpoint"] = time.monotonic() - t2
        return saved, starts, wait_phase(rc, name, "Succeeded")
    finally:
        rec.stop()
        cleanup_task(rc, urgent)
        cleanup_task(rc, name)


def assert_resumed_from(starts: dict[int, re.Match], saved: dict[int, int], source: str) -> None:
    """Rank 0, which writes the example's checkpoints, loads exactly the step saved at the stop, from
    `source`. The example's ranks load without waiting for each other (it has no collectives), so
    rank 1 may start a moment later and find a newer save of the new run (its own attempt's): it never
    starts older than the stop's save."""
    lines = {r: m.group(0) for r, m in starts.items()}
    assert set(starts) == {0, 1}, lines
    assert int(starts[0].group(2)) == saved[0] and starts[0].group(3) == source, (lines, saved)
    assert int(starts[1].group(2)) >= saved[0] and starts[1].group(3) in {source, "own"}, (lines, saved)


def test_a_preempted_gang_of_real_workers_saves_in_its_grace_period_keeps_attempt_1_and_resumes(
        real_cluster: RealCluster) -> None:
    """The shipped example in 2 real pods, checkpoints on a hostPath volume: Kueue preempts it for a
    higher-priority task; every worker reads the stop notice from its downward-API file, saves and
    exits 0 inside the grace period; the task keeps attempt 1 with no retry used; after re-admission
    the workers load the step saved at the stop and finish; the controller runs in-cluster."""
    saved, starts, s = preempt_and_finish(real_cluster, "train", resume=True)
    assert s["attempt"] == 1 and s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 0
    assert len(s["attempts"]) == 1
    assert_resumed_from(starts, saved, "own")


def test_without_resume_a_preempted_gang_of_real_workers_retries_as_a_new_attempt_from_the_previous_checkpoint(
        real_cluster: RealCluster) -> None:
    """resumeAfterPreemption false: the preemption ends attempt 1 as a user retry; attempt 2's workers
    load attempt 1's checkpoint, the step saved at the stop."""
    saved, starts, s = preempt_and_finish(real_cluster, "fresh", resume=False)
    assert s["attempt"] == 2 and s["userRetriesUsed"] == 1
    assert_resumed_from(starts, saved, "previous")


def test_zz_report_the_real_node_timings(real_cluster: RealCluster) -> None:
    """Not a check: the figures of this run (`pytest -s` shows them; docs/kubernetes.md quotes them)."""
    for k, v in {**real_cluster.node.timings, **TIMINGS}.items():
        print(f"real node: {k}: {v:.1f} s")
