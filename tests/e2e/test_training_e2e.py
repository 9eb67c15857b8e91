"""Real training jobs on the real control plane (issue 9): a pod template that reaches the pods, a worker
lost to a node drain that costs no budget, the stop notice before the gang is stopped, checkpoints and
accounting on the status, and the CLI driving it all through the real API server.

The control plane is the session's tier C (apiserver, etcd, kube-controller-manager, kube-scheduler,
kwok, JobSet, Kueue) with `gangrun controller` as a subprocess per test, as in test_controller_e2e.py.
kwok stands in for kubelets: `_own_pod_stages` in controlplane.py stops a pod evicted through the
Eviction API (`kubectl drain`'s call; the API server itself adds DisruptionTarget) as a kubelet does,
Failed with exit 143, and can keep a deleted pod for a while, as a kubelet giving its grace period.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from gangrun import _checkpoint_report
from tests.e2e import test_controller_e2e
from tests.e2e.test_controller_e2e import (
    TIMEOUT,
    controller,
    finish_preemptor,
    is_running,
    is_waiting_for_readmission,
    preempt,
)
from tests.harness.addons import LOCAL_QUEUE, NODE_CPU
from tests.harness.client import Kube
from tests.harness.controlplane import ControlPlane
from tests.harness.kwok import (
    ANNOTATION_COMPLETE_AFTER,
    ANNOTATION_NEVER_READY,
    ANNOTATION_TERMINATE_AFTER,
    ANNOTATION_TERMINATION_MESSAGE,
)
from tests.harness.tasks import ATTEMPT_LABEL, TASK_LABEL, PodRecorder, task_path, wait_status

pytestmark = pytest.mark.e2e
# The controller tests' fixtures: the CRD installed once, and per test a namespace, a JobSet recorder
# and the controllers the test starts (stopped first, their logs checked for rejected Events).
crd_installed = test_controller_e2e.crd_installed
env = test_controller_e2e.env

REPO = Path(__file__).resolve().parents[2]
NOTICE = "gangrun.dev/stop-notice"
LOST = "worker lost to node disruption (EvictionByEvictionAPI): Eviction API: evicting (pod "


def create_task(kube: Kube, ns: str, name: str = "train", **spec: object) -> dict:
    body = {
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name, "namespace": ns},
        "spec": {"nodes": 2, "command": ["python", "train.py"], "image": "example.invalid/trainer:1",
                 "resources": {"cpu": str(NODE_CPU), "memory": "1Gi"}, "priorityClass": "low",
                 "queue": LOCAL_QUEUE, "terminationGracePeriod": "1s", **spec},
    }
    return kube.request("POST", task_path(ns), body=body)


def attempt_pods(kube: Kube, ns: str, attempt: int = 1, name: str = "train") -> list[dict]:
    return kube.list("Pod", ns, label_selector=f"{TASK_LABEL}={name},{ATTEMPT_LABEL}={attempt}")


def evict(kube: Kube, ns: str, pod: str) -> None:
    """What `kubectl drain` does to each pod: the Eviction API (the API server adds DisruptionTarget)."""
    kube.request("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction",
                 body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}})


def jobset(kube: Kube, ns: str, name: str = "train-1") -> dict:
    return kube.get("JobSet", name, ns)


def timeline(kube: Kube, ns: str, name: str = "train") -> list[dict]:
    uid = kube.request("GET", task_path(ns, name))["metadata"]["uid"]
    items = kube.request("GET", f"/api/v1/namespaces/{ns}/events", query={"fieldSelector": f"involvedObject.uid={uid}"})
    return sorted(items["items"], key=lambda e: ((e["metadata"].get("annotations") or {}).get("gangrun.dev/time", ""),))


def gangrun(cp: ControlPlane, *args: str):
    import subprocess

    env_ = {**cp.env(), "PYTHONPATH": str(REPO / "src")}
    env_.pop("GANGRUN_BACKEND", None)
    return subprocess.run([sys.executable, "-m", "gangrun", "--backend", "kubernetes", *args],
                          capture_output=True, text=True, env=env_, timeout=120, check=False)


def has_notice(pod: dict) -> bool:
    return NOTICE in (pod["metadata"].get("annotations") or {})


def deleting(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


# ------------------------------------------------------------------------------- tests


def test_a_pod_template_with_a_volume_a_secret_env_tolerations_and_a_service_account_reaches_the_pods(env) -> None:
    cp, ns, _rec, _ = env
    kube = cp.kube
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds", "namespace": ns},
                 "stringData": {"AWS_ACCESS_KEY_ID": "AKIA-e2e", "AWS_SECRET_ACCESS_KEY": "secret"}})
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer", "namespace": ns}})
    # A checkpoint store every attempt can reach: a PersistentVolumeClaim bound to a volume made for it.
    kube.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"ckpt-{ns}"},
                 "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                          "hostPath": {"path": f"/tmp/gangrun-e2e-{ns}"},
                          "claimRef": {"namespace": ns, "name": "ckpt"}}})
    kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "ckpt", "namespace": ns},
                 "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": f"ckpt-{ns}",
                          "resources": {"requests": {"storage": "1Gi"}}}})
    template = {
        "metadata": {"labels": {"team": "ml"}},
        "spec": {
            "containers": [{"name": "worker", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                            "envFrom": [{"secretRef": {"name": "s3-creds"}}],
                            "env": [{"name": "AWS_REGION", "value": "eu-west-1"},
                                    {"name": "KEY_COPY", "valueFrom": {"secretKeyRef": {
                                        "name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}}}]}],
            "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"type": "kwok"},
            "serviceAccountName": "trainer",
        },
    }
    ctl = controller(env)
    create_task(kube, ns, podTemplate=template, shmSize="1Gi", checkpoint={"uri": "file:///ckpt"})
    wait_status(kube, ns, "train", is_running, "Running", ctl)
    pods = attempt_pods(kube, ns)
    assert len(pods) == 2
    for pod in pods:
        spec = pod["spec"]
        assert pod["metadata"]["labels"]["team"] == "ml" and pod["status"]["phase"] == "Running"
        assert spec["serviceAccountName"] == "trainer" and spec["nodeSelector"] == {"type": "kwok"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["ckpt"]["persistentVolumeClaim"] == {"claimName": "ckpt"}
        assert volumes["gangrun-shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
        worker = next(c for c in spec["containers"] if c["name"] == "worker")
        assert {"name": "ckpt", "mountPath": "/ckpt"} in worker["volumeMounts"]
        assert worker["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
        env_ = {e["name"]: e for e in worker["env"]}
        assert env_["KEY_COPY"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}
        assert env_["AWS_REGION"]["value"] == "eu-west-1"
        uid = pod["metadata"]["labels"]["gangrun.dev/task-uid"]  # the task's identity keys its checkpoints
        assert env_["GANGRUN_CHECKPOINT_PATH"]["value"] == f"file:///ckpt/train/{uid}/attempt-1"
        assert worker["command"][:4] == ["python", "-m", "gangrun.launch", "--"]


def test_a_pod_template_setting_what_gangrun_owns_is_refused_at_admission_naming_the_field(crd_installed,
                                                                                          make_namespace) -> None:
    from tests.harness.client import ApiError

    ns = make_namespace()
    with pytest.raises(ApiError) as e:
        create_task(crd_installed.kube, ns, podTemplate={"spec": {"containers": [{"name": "worker", "command": ["sh"]}]}})
    assert e.value.status == 422
    assert "spec.podTemplate.spec.containers[worker].command: set by gangrun (spec.command)" in e.value.body


def test_a_pod_failed_with_disruption_target_restarts_the_gang_in_the_same_attempt_with_no_budget_spent(env) -> None:
    cp, ns, rec, _ = env
    kube = cp.kube
    ctl = controller(env)
    create_task(kube, ns, retries=0, failurePolicy={"maxRestarts": 0})  # any counted failure would end the task
    wait_status(kube, ns, "train", is_running, "Running", ctl)
    victim = sorted(p["metadata"]["name"] for p in kube.wait_running_pods(ns, f"{TASK_LABEL}=train", 2))[1]
    evict(kube, ns, victim)
    s = wait_status(kube, ns, "train", lambda s: s.get("reason") == "running (restart attempt 1)",
                    "the gang running again in the same attempt", ctl)
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["restartAttempt"]) == (1, 0, 0, 1), s
    assert [(d["reason"], d["worker"]) for d in s["disruptions"]] == [("EvictionByEvictionAPI", f"pod {victim}")]
    js = jobset(kube, ns)["status"]
    assert (js["restarts"], js.get("restartsCountTowardsMax", 0)) == (1, 0)  # JobSet did not charge maxRestarts
    lost = [e for e in timeline(kube, ns) if e["reason"] == "WorkerDisrupted"]
    assert len(lost) == 1 and lost[0]["type"] == "Warning"
    assert lost[0]["message"] == f"{LOST}{victim}); restarting the gang (not counted)"
    (work,) = s["accounting"]["workLost"]
    assert work["cause"] == "EvictionByEvictionAPI" and work["attempt"] == 1
    rec.assert_one_per_attempt(1)


def test_after_max_system_retries_disruptions_in_a_row_the_task_fails_saying_so(env) -> None:
    cp, ns, _rec, _ = env
    kube = cp.kube
    ctl = controller(env)
    # Pods that never get ready: every round is lost before the gang is up, so the losses are in a row.
    create_task(kube, ns, maxSystemRetries=1, podTemplate={"metadata": {"annotations": {ANNOTATION_NEVER_READY: "1"}}})
    for round_ in (0, 1):
        pods = kube.wait_for(f"round {round_}'s pods scheduled", lambda r=round_: [
            p for p in attempt_pods(kube, ns) if p["spec"].get("nodeName") and not deleting(p)
            and (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/restart-attempt") == str(r)],
            timeout=TIMEOUT, interval=0.2)
        evict(kube, ns, pods[0]["metadata"]["name"])
        if round_ == 0:
            kube.wait_for("the uncounted restart", lambda: jobset(kube, ns)["status"].get("restarts") == 1,
                          timeout=TIMEOUT, interval=0.2)
    s = wait_status(kube, ns, "train", lambda s: s.get("phase") == "Failed", "Failed", ctl)
    assert s["code"] == "MaxSystemFailuresExceeded", s
    assert s["message"].startswith(LOST), s["message"]
    assert s["message"].endswith("; 2 node disruptions in a row exceed maxSystemRetries (1)"), s["message"]
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"]) == (1, 0, 0)
    kube.wait_for("the JobSet deleted", lambda: kube.get_or_none("JobSet", "train-1", ns) is None, timeout=TIMEOUT)


def test_the_stop_notice_is_on_every_worker_before_the_gang_is_stopped(env) -> None:
    cp, ns, _rec, _ = env
    kube = cp.kube
    pods_seen = PodRecorder(cp, ns)
    try:
        ctl = controller(env)
        create_task(kube, ns, terminationGracePeriod="20s")
        wait_status(kube, ns, "train", is_running, "Running", ctl)
        names = sorted(p["metadata"]["name"] for p in attempt_pods(kube, ns))
        asked = time.time()
        r = gangrun(cp, "cancel", "train", "-n", ns)
        assert r.returncode == 0, r.stderr
        wait_status(kube, ns, "train", lambda s: s.get("phase") == "Aborted", "Aborted", ctl)
        kube.wait_for("the pods gone", lambda: not attempt_pods(kube, ns), timeout=TIMEOUT)
    finally:
        pods_seen.stop()
    for name in names:
        noticed, stopped = pods_seen.first(name, has_notice), pods_seen.first(name, deleting)
        assert noticed is not None and stopped is not None and noticed < stopped, (name, noticed, stopped)
        pod = next(o for _rv, n, o in pods_seen.changes if n == name and has_notice(o))
        notice = json.loads(pod["metadata"]["annotations"][NOTICE])
        assert notice["cause"] == "Aborted" and notice["message"] == "cancelled by the user"
        assert asked + 15 < notice["deadline"] < time.time() + 25  # the grace period from the spec


def test_a_kueue_preemption_reaches_the_workers_as_a_stop_notice_with_its_cause(env) -> None:
    """Kueue suspends the JobSet on its own; the controller writes the notice at Evicted=True, which
    Kueue writes before the suspend. kwok keeps the deleted pods for their grace period, as kubelets do."""
    cp, ns, _rec, _ = env
    kube = cp.kube
    pods_seen = PodRecorder(cp, ns)
    try:
        ctl = controller(env)
        create_task(kube, ns, terminationGracePeriod="5s", failurePolicy={"resumeAfterPreemption": True},
                    podTemplate={"metadata": {"annotations": {ANNOTATION_TERMINATE_AFTER: "3s"}}})
        wait_status(kube, ns, "train", is_running, "Running", ctl)
        names = sorted(p["metadata"]["name"] for p in attempt_pods(kube, ns))
        preempt(kube, ns)
        wait_status(kube, ns, "train", is_waiting_for_readmission, "waiting for re-admission", ctl)
        kube.wait_for("the pods gone", lambda: not attempt_pods(kube, ns), timeout=TIMEOUT)
        finish_preemptor(kube, ns)
    finally:
        pods_seen.stop()
    order = {}
    for name in names:
        noticed, stopped = pods_seen.first(name, has_notice), pods_seen.first(name, deleting)
        # A pod gets the notice only while it is not yet being deleted: this fails if the controller lost
        # the race with Kueue's suspend (it won by 60-320 ms on a loaded 2-core machine; docs/kubernetes.md).
        assert noticed is not None, f"{name} never got the stop notice"
        pod = next(o for _rv, n, o in pods_seen.changes if n == name and has_notice(o))
        notice = json.loads(pod["metadata"]["annotations"][NOTICE])
        assert notice["cause"] == "Preempted" and notice["message"].startswith("Preempted to accommodate a workload")
        if stopped is None or noticed < stopped:
            margin = (pods_seen.seen_at[stopped] - pods_seen.seen_at[noticed]) if stopped else float("inf")
            order[name] = f"{margin * 1000:.0f} ms before the suspend reached it"
        else:
            order[name] = "while terminating"
    print(f"stop notice vs Kueue's suspend: {order}")  # the race the docs describe; -s shows it


def test_checkpoints_in_termination_messages_and_the_accounting_reach_the_status(env) -> None:
    cp, ns, _rec, _ = env
    kube = cp.kube
    ctl = controller(env)
    create_task(kube, ns, failurePolicy={"resumeAfterPreemption": True})
    wait_status(kube, ns, "train", is_running, "Running", ctl)
    time.sleep(1)  # some time up, so the preemption loses some work
    preempt(kube, ns)
    wait_status(kube, ns, "train", is_waiting_for_readmission, "waiting for re-admission", ctl)
    finish_preemptor(kube, ns)
    wait_status(kube, ns, "train", lambda s: s.get("reason") == "running (restart attempt 0)"
                and not s.get("eviction"), "readmitted", ctl)
    committed = datetime.now(UTC)
    line = json.dumps({"type": "checkpoint_committed", "task": "train", "attempt": 1, "rank": 0, "seq": 3,
                       "step": 6, "uri": "file:///ckpt/train/attempt-1/step-6", "time": committed.timestamp()})
    message = _checkpoint_report.report([line])  # what gangrun.launch leaves for a worker that saved step 6
    for pod in kube.wait_running_pods(ns, f"{TASK_LABEL}=train", 2):  # both readmitted workers
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        annotations = {ANNOTATION_COMPLETE_AFTER: "0s"}
        if index == "0":
            annotations[ANNOTATION_TERMINATION_MESSAGE] = message
        kube.patch("Pod", pod["metadata"]["name"], ns, {"metadata": {"annotations": annotations}})
    s = wait_status(kube, ns, "train", lambda s: s.get("phase") == "Succeeded", "Succeeded", ctl)
    acct = s["accounting"]
    assert acct["lastCheckpoint"]["step"] == 6 and acct["lastCheckpoint"]["uri"].endswith("/step-6"), acct
    assert acct["gangUpSeconds"] > 1 and acct["queuedSeconds"] >= 0 and acct["endedAt"]
    (work,) = acct["workLost"]
    assert work["cause"] == "Preempted" and work["attempt"] == 1
    assert any(e["reason"] == "CheckpointCommitted" and "step 6" in e["message"] for e in timeline(kube, ns))
    r = gangrun(cp, "get", "train", "-n", ns, "-o", "json")
    assert r.returncode == 0, r.stderr
    view = json.loads(r.stdout)["accounting"]
    assert view["preemptionsByCause"] == {"Preempted": 1} and view["waitingForReadmissionSeconds"] > 0
    assert 0 < view["goodput"] <= 1 and view["lastCheckpoint"]["step"] == 6


def test_the_cli_submits_follows_and_cancels_a_task_through_the_real_api_server(env, tmp_path: Path) -> None:
    cp, ns, _rec, _ = env
    ctl = controller(env)
    manifest = tmp_path / "train.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": "train"},
        "spec": {"nodes": 2, "command": ["python", "-m", "gangrun.examples.train"], "image": "example.invalid/t:1",
                 "resources": {"cpu": str(NODE_CPU), "memory": "1Gi"}, "terminationGracePeriod": "1s",
                 "podTemplate": {"spec": {"containers": [{"name": "worker", "env": [{"name": "STEPS", "value": "9"}]}]}}},
    }))
    r = gangrun(cp, "submit", str(manifest), "-n", ns)
    assert r.returncode == 0 and r.stdout.strip() == "train", r.stderr
    wait_status(cp.kube, ns, "train", is_running, "Running", ctl)
    r = gangrun(cp, "get", "train", "-n", ns, "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["phase"] == "Running", r.stderr
    r = gangrun(cp, "events", "train", "-n", ns, "-o", "json")
    kinds = [e["type"] for e in json.loads(r.stdout)]
    assert kinds[:2] == ["Submitted", "GangCreated"], kinds
    assert kinds.index("Admitted") < kinds.index("GangStarted"), kinds
    r = gangrun(cp, "describe", "train", "-n", ns)
    assert r.returncode == 0 and "Running" in r.stdout, r.stderr
    r = gangrun(cp, "logs", "train", "--rank", "1", "-n", ns)  # kwok runs no containers: no kubelet serves logs
    assert r.returncode == 3 and r.stderr.startswith("gangrun: error: ") and r.stderr.count("\n") == 1, r.stderr
    r = gangrun(cp, "cancel", "train", "-n", ns)
    assert r.returncode == 0, r.stderr
    wait_status(cp.kube, ns, "train", lambda s: s.get("phase") == "Aborted", "Aborted", ctl)
    r = gangrun(cp, "get", "-n", ns)
    assert r.returncode == 0 and "Aborted" in r.stdout.splitlines()[1], r.stdout


def _server_side_dry_run(kube: Kube, doc: dict) -> None:
    md = doc["metadata"]
    path = kube.path(doc["kind"], md["name"], md.get("namespace"), doc.get("apiVersion"))
    kube.request("PATCH", path, body=doc, content_type="application/apply-patch+yaml",
                 query={"fieldManager": "e2e-walkthrough", "force": "true", "dryRun": "All"})


def test_the_deploy_kustomization_and_the_walkthrough_s_manifests_are_what_the_api_server_accepts(crd_installed):
    """Every object docs/kubernetes.md tells a user to apply, validated by the real API server (a dry run:
    the session's cluster keeps its own controller and queues)."""
    kube = crd_installed.kube
    deploy = REPO / "deploy"
    kustomization = yaml.safe_load((deploy / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    docs = [d for name in kustomization["resources"] for d in yaml.safe_load_all((deploy / name).read_text()) if d]
    kube.apply(next(d for d in docs if d["kind"] == "Namespace"))  # namespaced dry runs need it to exist
    for doc in docs:
        if doc["kind"] == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:  # what kustomize's `images:` does
                if c["image"].split(":")[0] == image["name"]:
                    c["image"] = f"{image['newName']}:{image['newTag']}"
            assert doc["spec"]["template"]["spec"]["containers"][0]["image"] == "gangrun:0.1.0"
        _server_side_dry_run(kube, doc)
    for path in sorted((deploy / "examples" / "setup").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            _server_side_dry_run(kube, doc)
    for path in sorted((deploy / "examples").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        doc["metadata"]["namespace"] = "default"
        kube.request("POST", task_path("default"), body=doc, query={"dryRun": "All"})
