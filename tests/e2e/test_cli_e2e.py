"""The `gangrun` command line against a real API server (issue 13, items 9-11).

Tier A is enough (kube-apiserver with the ClusteredTask, JobSet and Kueue CRDs): no controller
runs, so a cancel stays a request, and the task's status and Events are written here as the
controller would write them. Each command runs as a user types it, in a subprocess; the test reads
its exit code and its one line on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from gangrun._backends.kube import events
from gangrun._backends.kube.stored import load_state
from gangrun._core.eviction import Eviction, EvictionKind
from gangrun._core.phases import Phase
from gangrun._core.timeline import Event, EventType
from tests.harness.client import ApiError
from tests.harness.controlplane import ControlPlane
from tests.harness.processes import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "gangrun.dev", "v1alpha1", "clusteredtasks"
WAITING_MESSAGE = ("Preempted to accommodate a workload (UID: 0f3c2a3e-1b7d-4a56-9a7e-2f1f5d1e0c9b, JobUID: "
                   "5b9f1c2e-8d3a-4e7f-b6a1-0c2d3e4f5a6b) due to prioritization in the ClusterQueue")


@pytest.fixture(scope="module")
def cluster(control_plane_tier_a: ControlPlane) -> ControlPlane:
    cp = control_plane_tier_a
    cp.install_crds([yaml.safe_load((REPO / "deploy" / "crd.yaml").read_text())])
    cp.kube.wait_for("clusteredtasks served", lambda: _served(cp), timeout=60)
    return cp


def _served(cp: ControlPlane) -> bool:
    try:
        return cp.kube.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}") is not None
    except ApiError:
        return False


@pytest.fixture
def namespace(cluster: ControlPlane, make_namespace: Callable[[], str]) -> str:
    ns = make_namespace()
    try:
        cluster.kube.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                             "metadata": {"name": "default", "namespace": ns},
                             "spec": {"clusterQueue": "cluster-queue"}})
    except ApiError as e:  # a tier-C control plane (an earlier test asked for it) makes the queue with the namespace
        if e.status != 409:
            raise
    return ns


def gangrun(cp: ControlPlane, *args: str, kubeconfig: Path | str | None = None):
    import subprocess

    env = {**cp.env(), "PYTHONPATH": str(REPO / "src")}
    env.pop("GANGRUN_BACKEND", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run([sys.executable, "-m", "gangrun", "--backend", "kubernetes", *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def _manifest(tmp_path: Path, name: str = "train") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
        "spec": {"nodes": 2, "command": ["python", "train.py"], "image": "registry.invalid/train:1"}}))
    return path


def _one_error_line(r, code: int) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("gangrun: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and "Error:" not in r.stderr.split("gangrun: error: ", 1)[1]
    return r.stderr


def _record(cp: ControlPlane, ns: str, message: str) -> None:
    """An Event on the task as the controller writes it (involvedObject carries the task's UID)."""
    task = cp.kube.get("ClusteredTask", "train", ns)
    ev = Event(time=datetime.now(UTC), type=EventType.PHASE, message=message, attempt=1)
    cp.kube.create(events.to_k8s(task, ev, type_="Normal"))


def test_events_and_describe_show_only_the_current_task_of_a_reused_name(cluster, namespace, tmp_path):
    ns, kube = namespace, cluster.kube
    assert gangrun(cluster, "submit", str(_manifest(tmp_path)), "-n", ns).returncode == 0
    old_uid = kube.get("ClusteredTask", "train", ns)["metadata"]["uid"]
    _record(cluster, ns, "from the deleted task")
    kube.delete("ClusteredTask", "train", ns)
    kube.wait_for("the old task to go", lambda: kube.get_or_none("ClusteredTask", "train", ns) is None)
    assert gangrun(cluster, "submit", str(_manifest(tmp_path)), "-n", ns).returncode == 0
    assert kube.get("ClusteredTask", "train", ns)["metadata"]["uid"] != old_uid
    _record(cluster, ns, "from the new task")

    r = gangrun(cluster, "events", "train", "-n", ns, "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [e["message"] for e in yaml.safe_load(r.stdout)] == ["from the new task"]
    r = gangrun(cluster, "describe", "train", "-n", ns, "-o", "json")
    assert [e["message"] for e in yaml.safe_load(r.stdout)["events"]] == ["from the new task"]


def test_user_mistakes_name_the_object_and_exit_2(cluster, namespace, tmp_path):
    ns = namespace
    manifest = str(_manifest(tmp_path))
    err = _one_error_line(gangrun(cluster, "submit", manifest, "-n", "nosuchns"), 2)
    assert "namespace nosuchns does not exist" in err and "LocalQueue" not in err
    err = _one_error_line(gangrun(cluster, "get", "train", "-n", "nosuchns"), 2)
    assert "namespace nosuchns does not exist" in err
    err = _one_error_line(gangrun(cluster, "get", "--kubeconfig", "/nonexistent/kubeconfig"), 2)
    assert "--kubeconfig /nonexistent/kubeconfig: no such file" in err

    assert gangrun(cluster, "submit", manifest, "-n", ns).returncode == 0
    err = _one_error_line(gangrun(cluster, "logs", "train", "--rank", "5", "-n", ns), 2)
    assert 'task "train" has ranks 0..1, not 5' in err
    err = _one_error_line(gangrun(cluster, "logs", "train", "--attempt", "3", "-n", ns), 2)
    assert 'task "train" has attempts 1..1, not 3' in err


def test_cancel_without_a_controller_says_it_is_requested(cluster, namespace, tmp_path):
    assert gangrun(cluster, "submit", str(_manifest(tmp_path)), "-n", namespace).returncode == 0
    r = gangrun(cluster, "cancel", "train", "-n", namespace)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("train: cancel requested") and "cancelled" not in r.stdout
    annotations = cluster.kube.get("ClusteredTask", "train", namespace)["metadata"]["annotations"]
    assert "gangrun.dev/cancel-requested" in annotations


def test_a_gang_waiting_for_readmission_reads_as_waiting_in_get_and_logs(cluster, namespace, tmp_path):
    ns, kube = namespace, cluster.kube
    assert gangrun(cluster, "submit", str(_manifest(tmp_path)), "-n", ns).returncode == 0
    now = datetime.now(UTC)
    ev = Eviction(kind=EvictionKind.PREEMPTED, reason="Preempted", detail="InClusterQueue", message=WAITING_MESSAGE)
    state = load_state(kube.get("ClusteredTask", "train", ns), now=now)
    state = state.with_running(at=now, restart_attempt=0).with_eviction_seen(ev, at=now)
    state = state.with_info(state.info.advance(Phase.RUNNING, f"{ev.summary()}; waiting for re-admission"))
    kube.patch("ClusteredTask", "train", ns, {"status": state.for_storage()}, subresource="status")

    r = gangrun(cluster, "get", "-n", ns)
    assert r.returncode == 0, r.stderr
    row = r.stdout.splitlines()[1]
    assert "Running" in row and "(Preempted, InClusterQueue)" in row and row.endswith("; waiting for re-admission")
    err = _one_error_line(gangrun(cluster, "logs", "train", "-n", ns), 2)
    assert "task train was preempted" in err


def test_api_failures_exit_3_with_one_line(cluster, namespace, tmp_path):
    ns = namespace
    assert gangrun(cluster, "submit", str(_manifest(tmp_path)), "-n", ns).returncode == 0
    nobody = cluster.service_account_kubeconfig(ns, "nobody", namespace_rules=[])
    for args in (["get", "-n", ns], ["get", "train", "-n", ns], ["logs", "train", "-n", ns],
                 ["logs", "train", "-f", "-n", ns]):
        err = _one_error_line(gangrun(cluster, *args, kubeconfig=nobody), 3)
        assert "forbidden to" in err and err.count("403") == 1, err

    unreachable = tmp_path / "unreachable.kubeconfig"
    doc = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    unreachable.write_text(yaml.safe_dump(doc))
    for args in (["get", "-n", ns], ["logs", "train", "-n", ns], ["logs", "train", "-f", "-n", ns]):
        err = _one_error_line(gangrun(cluster, *args, kubeconfig=unreachable), 3)
        assert "cannot reach the Kubernetes API server" in err and "Connection refused" in err, err
    assert os.path.exists(unreachable)


def test_the_api_server_accepts_every_event_the_controller_writes(cluster, namespace, tmp_path):
    """Each timeline event type, with the longest message and the richest data gangrun writes, as a
    core/v1 Event on the task: one the API server refused would be lost from every task's timeline."""
    ns, kube = namespace, cluster.kube
    assert gangrun(cluster, "submit", str(_manifest(tmp_path)), "-n", ns).returncode == 0
    task = kube.get("ClusteredTask", "train", ns)
    now = datetime.now(UTC)
    for i, type_ in enumerate(EventType):
        ev = Event(time=now, type=type_, attempt=3, message=("worker lost to node disruption (Ä): " + "x" * 2000),
                   data={"reason": "EvictionByEvictionAPI", "restartAttempt": 2, "committedAt": now.isoformat(),
                         "uri": "s3://bucket/" + "p" * 300, "waitedSeconds": 12.5})
        body = events.to_k8s(task, ev, type_="Warning" if i % 2 else "Normal", index=i,
                             instance="gangrun-controller-7d9f8c-abcde_0123abcd")
        kube.create(body)  # raises on a 4xx
    r = gangrun(cluster, "events", "train", "-n", ns, "-o", "json")
    assert r.returncode == 0, r.stderr
    assert sorted(e["type"] for e in yaml.safe_load(r.stdout)) == sorted(t.value for t in EventType)
