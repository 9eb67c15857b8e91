"""The Python API against the real control plane (tier C: kube-apiserver, kwok nodes, JobSet, Kueue) with
the real `gangrun controller` running.

submit with generateName → the API server makes the name → the gang runs on kwok nodes (made to
succeed by annotating its pods) → wait → events → delete → the name is used again; a task preempted
by a higher-priority Job shows Kueue's own pending message while it waits; delete refuses a running
task and --force cancels it first. kwok runs no containers, so there are no worker logs to read here
(KubeBackend's log following is tested against the fake API server in tests/kube).
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

import gangrun
from gangrun._ui import start
from tests.e2e.test_controller_e2e import (
    ControllerProcess,
    complete_pods,
    crd_installed,  # noqa: F401  (a fixture)
    finish_preemptor,
    preempt,
)  # the controller process, its CRD fixture and kwok's pod completion
from tests.harness.addons import LOCAL_QUEUE, NODE_CPU
from tests.harness.controlplane import ControlPlane
from tests.harness.tasks import ATTEMPT_LABEL, TASK_LABEL

pytestmark = pytest.mark.e2e
TIMEOUT = 120.0


@pytest.fixture
def kube_env(crd_installed: ControlPlane, make_namespace):  # noqa: F811
    cp = crd_installed
    ns = make_namespace()
    ctl = ControllerProcess(cp, ns).start()
    yield cp, ns, ctl
    ctl.stop()
    for t in gangrun_tasks(cp, ns):
        cp.kube.request("DELETE", f"/apis/gangrun.dev/v1alpha1/namespaces/{ns}/clusteredtasks/{t}")


def gangrun_tasks(cp: ControlPlane, ns: str) -> list[str]:
    items = cp.kube.request("GET", f"/apis/gangrun.dev/v1alpha1/namespaces/{ns}/clusteredtasks")["items"]
    return [t["metadata"]["name"] for t in items]


def task(**metadata) -> gangrun.ClusteredTask:
    metadata.setdefault("checkpoint_uri", "s3://bucket/ck")  # a resuming task's checkpoints must outlive its pods
    return gangrun.ClusteredTask(**metadata, nodes=2, command=["python", "train.py"], image="example.invalid/trainer:1",
                                 resources={"cpu": str(NODE_CPU), "memory": "1Gi"}, priority_class="low",
                                 queue=LOCAL_QUEUE, termination_grace_period="1s", resume_after_preemption=True)


def until(run: gangrun.TaskRun, pred, what: str, ctl: ControllerProcess) -> dict:
    deadline = time.monotonic() + TIMEOUT
    while True:
        ctl.check()
        view = run.status()
        if pred(view):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"{run.name}: {what} not within {TIMEOUT:.0f}s; last: {view['phase']} {view['reason']}")
        time.sleep(0.2)


def running(view: dict) -> bool:
    return view["phase"] == "Running" and view["reason"].startswith("running (")


def test_api_submit_generated_name_wait_events_delete_and_reuse_the_name(kube_env) -> None:
    cp, ns, ctl = kube_env
    run = gangrun.submit(task(generate_name="train-"), backend="kubernetes", kubeconfig=str(cp.kubeconfig),
                         namespace=ns)
    assert run.name.startswith("train-") and len(run.name) == len("train-") + 5
    until(run, running, "Running", ctl)
    complete_pods(cp.kube, ns, f"{TASK_LABEL}={run.name},{ATTEMPT_LABEL}=1", 2)
    final = run.wait(timeout=TIMEOUT)
    assert (final["name"], final["phase"], final["attempt"], final["retriesLeft"]) == (run.name, "Succeeded", 1, 0)
    types = [e["type"] for e in run.events()]
    assert types[0] == "Submitted" and "Succeeded" in types
    page = start(run.backend)  # the web page reads the cluster through the same backend
    try:
        with urllib.request.urlopen(f"{page.url}api/tasks/{run.name}", timeout=30) as r:
            doc = json.loads(r.read())
        (lane,) = doc["timeline"]["lanes"]
        assert [s["kind"] for s in lane["segments"]][-1] == "running" and lane["marks"][-1]["label"] == "Succeeded"
        assert 0 <= doc["row"]["goodput"] <= 1  # the controller accounts it too, from the task's status
    finally:
        page.shutdown()
        page.server_close()

    assert run.delete() is True
    with pytest.raises(gangrun.UsageError, match=f"no task named {run.name}"):
        run.status()
    again = gangrun.submit(task(name=run.name), backend="kubernetes", kubeconfig=str(cp.kubeconfig), namespace=ns)
    assert again.name == run.name
    until(again, running, "Running again under the reused name", ctl)
    assert "Succeeded" not in [e["type"] for e in again.events()]  # nothing of the deleted task's timeline


def test_api_a_preempted_task_shows_kueues_pending_message_and_delete_force_cancels_it(kube_env) -> None:
    cp, ns, ctl = kube_env
    run = gangrun.submit(task(name="train"), backend="kubernetes", kubeconfig=str(cp.kubeconfig), namespace=ns)
    until(run, running, "Running", ctl)
    preempt(cp.kube, ns)
    view = until(run, lambda v: "waiting for re-admission" in v["reason"] and v.get("pending"),
                 "waiting for re-admission, with Kueue's message", ctl)
    assert view["phase"] == "Running" and view["attempt"] == 1
    assert view["queuePosition"] is None  # the test control plane runs Kueue without its visibility API
    with pytest.raises(gangrun.UsageError, match="^task train is Running, not ended: cancel it first"):
        run.delete()
    assert run.delete(force=True) is True
    assert "train" not in gangrun_tasks(cp, ns)
    finish_preemptor(cp.kube, ns)


def _jobset_env(cp: ControlPlane, ns: str, task_uid: str) -> dict[str, str]:
    """The worker env of the JobSet of attempt 1 that the task with `task_uid` owns."""
    def owned():
        for js in cp.kube.list("JobSet", ns, label_selector=f"{TASK_LABEL}=train,{ATTEMPT_LABEL}=1"):
            if any(r.get("uid") == task_uid for r in js["metadata"].get("ownerReferences") or []):
                return js
        return None

    js = cp.kube.wait_for(f"the JobSet of task uid {task_uid}", owned, timeout=TIMEOUT, interval=0.2)
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


def test_a_task_never_loads_a_checkpoint_it_did_not_write_kube(kube_env) -> None:
    """A ClusteredTask deleted and re-created under the same name has another metadata.uid: its JobSet saves
    under a checkpoint root of its own, and its timeline is its own; asked to, it resumes from the first."""
    cp, ns, ctl = kube_env
    on = {"backend": "kubernetes", "kubeconfig": str(cp.kubeconfig), "namespace": ns}
    path = f"/apis/gangrun.dev/v1alpha1/namespaces/{ns}/clusteredtasks/train"
    first = gangrun.submit(task(name="train", checkpoint_uri="s3://bucket/ck"), **on)
    until(first, running, "Running", ctl)
    first_uid = cp.kube.request("GET", path)["metadata"]["uid"]
    env = _jobset_env(cp, ns, first_uid)
    assert env["GANGRUN_CHECKPOINT_PATH"] == f"s3://bucket/ck/train/{first_uid}/attempt-1"
    assert "GANGRUN_RESUME_FROM" not in env
    complete_pods(cp.kube, ns, f"{TASK_LABEL}=train,{ATTEMPT_LABEL}=1", 2)
    first.wait(timeout=TIMEOUT)
    assert first.delete() is True

    again = gangrun.submit(task(name="train", checkpoint_uri="s3://bucket/ck", resume_from="train"), **on)
    until(again, running, "Running again under the same name", ctl)
    again_uid = cp.kube.request("GET", path)["metadata"]["uid"]
    assert again_uid != first_uid
    env = _jobset_env(cp, ns, again_uid)
    assert env["GANGRUN_CHECKPOINT_PATH"] == f"s3://bucket/ck/train/{again_uid}/attempt-1"
    assert env["GANGRUN_RESUME_FROM"] == "s3://bucket/ck/train"
    events = again.events()
    assert [e["type"] for e in events].count("Submitted") == 1 and "Succeeded" not in [e["type"] for e in events]
    created = next(e for e in events if e["type"] == "GangCreated")
    assert "resumes from task train's newest checkpoint" in created["message"]
