"""The real substrate behaves as gangrun relies on it: Kueue admits, preempts, deactivates and
readmits JobSets; JobSet and the Job controller run their pods on kwok nodes and complete them.

No gangrun code runs here. With ``GANGRUN_CAPTURE_FIXTURES=1`` the Workload and JobSet objects
seen in each state are written to ``tests/fixtures/kube/`` (managedFields stripped) for the
controller's adapter tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.harness.addons import LOCAL_QUEUE, NODE_CPU
from tests.harness.client import Kube, condition, has_condition
from tests.harness.controlplane import ControlPlane
from tests.harness.kwok import ANNOTATION_COMPLETE_AFTER, ANNOTATION_FAIL_AFTER, ANNOTATION_NEVER_READY

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kube"
TIMEOUT = 90.0


def capture(name: str, obj: dict) -> None:
    if not os.environ.get("GANGRUN_CAPTURE_FIXTURES"):
        return
    obj = json.loads(json.dumps(obj))
    obj.get("metadata", {}).pop("managedFields", None)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / f"{name}.json").write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------- builders


def jobset(name: str, ns: str, *, replicas: int = 2, cpu: int = NODE_CPU,
           priority: str | None = "low", queue: str | None = LOCAL_QUEUE,
           annotations: dict | None = None, max_restarts: int | None = None) -> dict:
    labels = {}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    spec: dict = {
        "suspend": bool(queue),
        "replicatedJobs": [{
            "name": "workers",
            "replicas": replicas,
            "template": {"spec": {
                "parallelism": 1, "completions": 1, "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": annotations or {}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "trainer", "image": "example.invalid/trainer:1",
                                        "resources": {"requests": {"cpu": str(cpu)}}}],
                    },
                },
            }},
        }],
    }
    if max_restarts is not None:
        spec["failurePolicy"] = {"maxRestarts": max_restarts}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec}


def batch_job(name: str, ns: str, *, parallelism: int, cpu: int = NODE_CPU,
              priority: str = "high") -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {
            "kueue.x-k8s.io/queue-name": LOCAL_QUEUE, "kueue.x-k8s.io/priority-class": priority}},
        "spec": {
            "suspend": True, "parallelism": parallelism, "completions": parallelism,
            "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "example.invalid/job:1",
                                "resources": {"requests": {"cpu": str(cpu)}}}],
            }},
        },
    }


# ------------------------------------------------------------------------------- helpers


def workload_of(kube: Kube, ns: str, kind: str, name: str) -> dict | None:
    for wl in kube.list("Workload", ns):
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref["kind"] == kind and ref["name"] == name:
                return wl
    return None


def wait_workload(kube: Kube, ns: str, kind: str, name: str, pred, what: str) -> dict:
    def check():
        wl = workload_of(kube, ns, kind, name)
        return wl if wl and pred(wl) else None
    return kube.wait_for(f"{kind} {ns}/{name} workload {what}", check, timeout=TIMEOUT)


def annotate_pods(kube: Kube, ns: str, selector: str, annotations: dict) -> None:
    for p in kube.list("Pod", ns, label_selector=selector):
        kube.patch("Pod", p["metadata"]["name"], ns, {"metadata": {"annotations": annotations}})


def admitted(wl: dict) -> bool:
    return has_condition(wl, "QuotaReserved") and has_condition(wl, "Admitted")


def jobset_pods(name: str) -> str:
    return f"jobset.sigs.k8s.io/jobset-name={name}"


def start_admitted_jobset(kube: Kube, ns: str, name: str, **kw) -> tuple[dict, dict]:
    kube.create(jobset(name, ns, **kw))
    wl = wait_workload(kube, ns, "JobSet", name, admitted, "admitted")
    js = kube.wait_for(f"JobSet {name} unsuspended", lambda: (
        lambda o: o if o["spec"].get("suspend") is False else None)(kube.get("JobSet", name, ns)),
        timeout=TIMEOUT)
    return wl, js


# ------------------------------------------------------------------------------- tier A


def test_apiserver_reports_a_semver_version_and_serves_the_crds(
        control_plane_tier_a: ControlPlane) -> None:
    kube = control_plane_tier_a.kube
    version = kube.request("GET", "/version")
    want = control_plane_tier_a.binaries.versions["K8S_VERSION"]
    assert version["gitVersion"] == want
    groups = {g["name"] for g in kube.request("GET", "/apis")["groups"]}
    assert {"jobset.x-k8s.io", "kueue.x-k8s.io"} <= groups


# ------------------------------------------------------------------------------- tier B


def test_unqueued_jobset_runs_on_kwok_nodes_and_completes_on_annotation(
        control_plane_tier_b: ControlPlane, make_namespace) -> None:
    kube = control_plane_tier_b.kube
    ns = make_namespace()
    created = kube.create(jobset("plain", ns, queue=None, priority=None, cpu=1))
    # The JobSet defaulting webhook answered.
    assert created["spec"]["successPolicy"]["operator"] == "All"
    pods = kube.wait_running_pods(ns, jobset_pods("plain"), 2)
    assert all(p["spec"]["nodeName"].startswith("kwok-node-") for p in pods)
    assert all(p["status"].get("podIP") for p in pods)
    annotate_pods(kube, ns, jobset_pods("plain"), {ANNOTATION_COMPLETE_AFTER: "0s"})
    kube.wait_for("JobSet plain Completed", lambda: has_condition(
        kube.get("JobSet", "plain", ns), "Completed"), timeout=TIMEOUT)


# ------------------------------------------------------------------------------- tier C


def test_queued_jobset_is_admitted_unsuspended_and_runs_on_kwok_nodes(
        control_plane_tier_c: ControlPlane, make_namespace) -> None:
    kube = control_plane_tier_c.kube
    ns = make_namespace()
    wl, js = start_admitted_jobset(kube, ns, "train")
    # v1beta2: priorityClassRef {group: kueue.x-k8s.io, kind: WorkloadPriorityClass, name}.
    assert wl["spec"]["priorityClassRef"]["name"] == "low", wl["spec"]
    assert wl["spec"]["priority"] == 100
    assert wl["status"]["admission"]["clusterQueue"] == "cluster-queue"
    capture("workload-admitted", wl)
    pods = kube.wait_running_pods(ns, jobset_pods("train"), 2)
    assert all(p["spec"]["nodeName"].startswith("kwok-node-") for p in pods)
    # waitForPodsReady is on by default in Kueue 0.19: PodsReady follows the pods' Ready.
    wl = wait_workload(kube, ns, "JobSet", "train",
                       lambda w: has_condition(w, "PodsReady"), "PodsReady")
    capture("workload-running", wl)
    capture("jobset-running", kube.get("JobSet", "train", ns))


def test_higher_priority_job_preempts_jobset_which_is_readmitted_after(
        control_plane_tier_c: ControlPlane, make_namespace) -> None:
    kube = control_plane_tier_c.kube
    ns = make_namespace()
    start_admitted_jobset(kube, ns, "victim")
    kube.wait_running_pods(ns, jobset_pods("victim"), 2)

    # 2 x NODE_CPU held by the JobSet + 3 x NODE_CPU > quota (4 x NODE_CPU): preempt.
    kube.create(batch_job("urgent", ns, parallelism=3))
    wl = wait_workload(kube, ns, "JobSet", "victim", lambda w: has_condition(w, "Evicted"), "evicted")
    evicted, preempted = condition(wl, "Evicted"), condition(wl, "Preempted")
    assert evicted["reason"] == "Preempted", evicted
    assert preempted and preempted["status"] == "True" and preempted["reason"] == "InClusterQueue", preempted
    capture("workload-evicted-preempted", wl)
    js = kube.wait_for("JobSet victim suspended", lambda: (
        lambda o: o if o["spec"].get("suspend") is True else None)(kube.get("JobSet", "victim", ns)),
        timeout=TIMEOUT)
    capture("jobset-suspended-preempted", js)

    # Quota released: the preemptor runs; the victim waits, requeued.
    wait_workload(kube, ns, "Job", "urgent", admitted, "admitted")
    wl = wait_workload(kube, ns, "JobSet", "victim",
                       lambda w: has_condition(w, "QuotaReserved", "False")
                       and has_condition(w, "Requeued", reason="Preempted"), "requeued, pending")
    urgent_pods = kube.wait_running_pods(ns, "batch.kubernetes.io/job-name=urgent", 3)
    assert len(urgent_pods) == 3

    # The preemptor completes; the victim is readmitted and unsuspended.
    annotate_pods(kube, ns, "batch.kubernetes.io/job-name=urgent", {ANNOTATION_COMPLETE_AFTER: "0s"})
    wl = wait_workload(kube, ns, "JobSet", "victim", admitted, "readmitted")
    capture("workload-readmitted", wl)
    js = kube.wait_for("JobSet victim unsuspended", lambda: (
        lambda o: o if o["spec"].get("suspend") is False else None)(kube.get("JobSet", "victim", ns)),
        timeout=TIMEOUT)
    kube.wait_running_pods(ns, jobset_pods("victim"), 2)
    capture("jobset-readmitted", kube.get("JobSet", "victim", ns))
    capture("workload-job-finished", workload_of(kube, ns, "Job", "urgent"))


def test_deactivated_workload_is_evicted_with_a_deactivated_reason(
        control_plane_tier_c: ControlPlane, make_namespace) -> None:
    kube = control_plane_tier_c.kube
    ns = make_namespace()
    wl, _ = start_admitted_jobset(kube, ns, "stopme", replicas=1)
    kube.patch("Workload", wl["metadata"]["name"], ns, {"spec": {"active": False}})
    wl = wait_workload(kube, ns, "JobSet", "stopme",
                       lambda w: has_condition(w, "Evicted"), "evicted by deactivation")
    assert condition(wl, "Evicted")["reason"].startswith("Deactivated"), condition(wl, "Evicted")
    assert wl["spec"]["active"] is False
    capture("workload-deactivated", wl)
    js = kube.wait_for("JobSet stopme suspended", lambda: (
        lambda o: o if o["spec"].get("suspend") is True else None)(kube.get("JobSet", "stopme", ns)),
        timeout=TIMEOUT)
    capture("jobset-suspended-deactivated", js)


@pytest.mark.parametrize(
    ("name", "max_restarts", "annotation", "jobset_condition", "finished_reason", "captured"),
    [
        pytest.param("done", None, ANNOTATION_COMPLETE_AFTER, "Completed", "Succeeded", "succeeded", id="pods-complete"),
        pytest.param("broken", 0, ANNOTATION_FAIL_AFTER, "Failed", "Failed", "failed", id="pods-fail"),
    ],
)
def test_pod_outcome_ends_the_jobset_and_finishes_its_workload(
        control_plane_tier_c: ControlPlane, make_namespace, name: str, max_restarts: int | None, annotation: str,
        jobset_condition: str, finished_reason: str, captured: str) -> None:
    kube = control_plane_tier_c.kube
    ns = make_namespace()
    start_admitted_jobset(kube, ns, name, max_restarts=max_restarts)
    kube.wait_running_pods(ns, jobset_pods(name), 2)
    annotate_pods(kube, ns, jobset_pods(name), {annotation: "0s"})
    js = kube.wait_for(f"JobSet {name} {jobset_condition}", lambda: (
        lambda o: o if has_condition(o, jobset_condition) else None)(kube.get("JobSet", name, ns)),
        timeout=TIMEOUT)
    capture(f"jobset-{captured}", js)
    wl = wait_workload(kube, ns, "JobSet", name, lambda w: has_condition(w, "Finished"), "finished")
    assert condition(wl, "Finished")["reason"] == finished_reason, condition(wl, "Finished")
    capture(f"workload-{captured}", wl)


def test_pods_that_never_get_ready_are_evicted_with_pods_ready_timeout(
        control_plane_tier_c: ControlPlane, make_namespace) -> None:
    kube = control_plane_tier_c.kube
    ns = make_namespace()
    start_admitted_jobset(kube, ns, "stuck", replicas=1, annotations={ANNOTATION_NEVER_READY: "yes"})
    capture("jobset-never-ready", kube.get("JobSet", "stuck", ns))
    # PODS_READY_TIMEOUT (45 s by default) after admission, plus slack.
    wl = kube.wait_for("Workload evicted by PodsReadyTimeout", lambda: (
        lambda w: w if w and has_condition(w, "Evicted") else None)(
            workload_of(kube, ns, "JobSet", "stuck")), timeout=TIMEOUT + 60)
    assert condition(wl, "Evicted")["reason"] == "PodsReadyTimeout", condition(wl, "Evicted")
    capture("workload-evicted-podsreadytimeout", wl)
    js = kube.wait_for("JobSet stuck suspended", lambda: (
        lambda o: o if o["spec"].get("suspend") is True else None)(kube.get("JobSet", "stuck", ns)),
        timeout=TIMEOUT)
    capture("jobset-suspended-podsreadytimeout", js)


def test_service_account_without_workload_rights_cannot_read_workloads(
        control_plane_tier_c: ControlPlane, make_namespace) -> None:
    from tests.harness.client import ApiError

    ns = make_namespace()
    kc = control_plane_tier_c.service_account_kubeconfig(
        ns, "limited",
        namespace_rules=[{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"],
                          "verbs": ["get", "list", "watch"]}])
    limited = Kube(kc)
    assert limited.list("JobSet", ns) == []
    with pytest.raises(ApiError) as e:
        limited.list("Workload", ns)
    assert e.value.status == 403


def test_spawned_process_reaches_the_api_with_the_official_client(
        control_plane_tier_a: ControlPlane) -> None:
    # The way a test runs `gangrun controller`: cp.spawn(...) with KUBECONFIG set.
    import sys

    code = ("from kubernetes import client, config; config.load_kube_config(); "
            "print(client.VersionApi().get_code().git_version)")
    proc = control_plane_tier_a.spawn("official-client", [sys.executable, "-c", code])
    proc.proc.wait(timeout=60)
    assert control_plane_tier_a.terminate(proc) == 0, proc.tail()
    assert control_plane_tier_a.binaries.versions["K8S_VERSION"] in proc.log.read_text()
