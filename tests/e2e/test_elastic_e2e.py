"""Elastic gangs on the real Kueue and JobSet (issue 19, item 6).

A 4-node gang (4 CPU a node) with minNodes 2 fills the ClusterQueue (16 CPU). A `high` 2-node Job
arrives: Kueue preempts the whole gang; gangrun, reading the ClusterQueue's free quota (8 CPU), replaces
the suspended JobSet with one of 2 nodes in the same attempt, which Kueue admits at once. When the Job
ends the gang grows back to 4 (resizeCooldown 5s): its workers get the stop notice with cause `Resize`
and the JobSet is replaced again. No retry is used at any point.

kwok runs no processes. A worker's saves are what gangrun.launch leaves in its container's termination
message, so the test writes them there, as the other kwok tests do: one periodic save while the gang runs
small, and the final save during the grace period of the Resize stop (kwok keeps the deleted pods for
that long, as a kubelet does, through ANNOTATION_TERMINATE_AFTER).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from gangrun import _checkpoint_report
from tests.e2e import test_controller_e2e
from tests.e2e.test_controller_e2e import TIMEOUT, complete_pods, controller
from tests.e2e.test_priority_boost_e2e import WORKER, high_job
from tests.e2e.test_training_e2e import NOTICE, has_notice, timeline
from tests.harness.addons import NODE_CPU
from tests.harness.client import Kube
from tests.harness.kwok import ANNOTATION_TERMINATE_AFTER
from tests.harness.tasks import PodRecorder, task_path, wait_status

pytestmark = pytest.mark.e2e
crd_installed = test_controller_e2e.crd_installed
env = test_controller_e2e.env
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


def create_elastic_task(kube: Kube, ns: str) -> dict:
    body = {
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": "train", "namespace": ns},
        "spec": {"nodes": 4, "minNodes": 2, "resizeCooldown": "5s", "command": ["python", "train.py"],
                 "image": "example.invalid/trainer:1", "resources": {"cpu": str(NODE_CPU), "memory": "1Gi"},
                 "priorityClass": "low", "queue": "default", "terminationGracePeriod": "3s",
                 "failurePolicy": {"resumeAfterPreemption": True},
                 "podTemplate": {"metadata": {"annotations": {ANNOTATION_TERMINATE_AFTER: "2s"}}}},
    }
    return kube.request("POST", task_path(ns), body=body)


def running_at(size: int, jobset: str):
    def pred(s: dict) -> bool:
        return (s.get("phase") == "Running" and str(s.get("reason", "")).startswith("running (")
                and s.get("runningNodes") == size and s.get("jobSet") == jobset and not s.get("eviction"))
    return pred


def world_sizes(kube: Kube, ns: str, jobset: str, count: int) -> set[str]:
    """WORLD_SIZE in the env of each running worker pod of `jobset` (waits for `count` of them)."""
    pods = kube.wait_running_pods(ns, f"{JOBSET_NAME}={jobset}", count, timeout=TIMEOUT)
    return {e["value"] for p in pods for c in p["spec"]["containers"] if c["name"] == WORKER
            for e in c["env"] if e["name"] == "WORLD_SIZE"}


def parallelism(kube: Kube, ns: str, jobset: str) -> int:
    js = kube.get("JobSet", jobset, ns)
    return js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"]


def leave_commit(kube: Kube, ns: str, pod: dict, *, step: int, taken: datetime | None = None) -> None:
    """What gangrun.launch leaves for the controller when rank 0 committed `step` just now: the checkpoint
    in its container's termination message (here the last state of the container: kwok runs nothing)."""
    now = datetime.now(UTC)
    line = {"type": _checkpoint_report.COMMITTED, "task": "train", "attempt": 1, "rank": 0, "seq": step,
            "step": step, "uri": f"memory://ckpt/train/attempt-1/step-{step}", "time": now.timestamp()}
    if taken is not None:  # the final save in the grace period
        line.update(takenAt=taken.timestamp(), saveSeconds=round((now - taken).total_seconds(), 3), final=True)
    message = _checkpoint_report.report([json.dumps(line)])
    statuses = pod["status"].get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == WORKER:
            cs["lastState"] = {"terminated": {"exitCode": 0, "reason": "Completed", "message": message,
                                              "finishedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    kube.patch("Pod", pod["metadata"]["name"], ns, {"status": {"containerStatuses": statuses}}, subresource="status")


def rank0(kube: Kube, ns: str, jobset: str) -> dict:
    (pod,) = [p for p in kube.list("Pod", ns, label_selector=f"{JOBSET_NAME}={jobset}")
              if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == "0"]
    return pod


def test_elastic_gang_shrinks_to_2_when_preempted_and_grows_back_to_4_in_one_attempt(env) -> None:
    cp, ns, rec, _ = env
    kube = cp.kube
    pods_seen = PodRecorder(cp, ns)
    try:
        ctl = controller(env)
        create_elastic_task(kube, ns)
        wait_status(kube, ns, "train", running_at(4, "train-1"), "running at 4", ctl)
        assert parallelism(kube, ns, "train-1") == 4 and world_sizes(kube, ns, "train-1", 4) == {"4"}

        # A high-priority 2-node Job: Kueue preempts the whole gang; it resumes at 2 in attempt 1.
        asked = time.monotonic()
        kube.create(high_job(ns))
        s = wait_status(kube, ns, "train", running_at(2, "train-1-r1"), "resumed at 2", ctl)
        shrink_seconds = time.monotonic() - asked
        assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"]) == (1, 0, 0), s
        assert [e["kind"] for e in s["evictions"]] == ["Preempted"], s["evictions"]
        assert parallelism(kube, ns, "train-1-r1") == 2 and world_sizes(kube, ns, "train-1-r1", 2) == {"2"}
        assert kube.get_or_none("JobSet", "train-1", ns) is None or kube.get("JobSet", "train-1", ns)[
            "metadata"].get("deletionTimestamp")

        # The small gang saves step 40; then the Job ends and the gang grows back to 4.
        leave_commit(kube, ns, rank0(kube, ns, "train-1-r1"), step=40)
        wait_status(kube, ns, "train", lambda s: ((s.get("accounting") or {}).get("lastCheckpoint") or {}).get(
            "step") == 40, "step 40 accounted", ctl)
        small = rank0(kube, ns, "train-1-r1")
        complete_pods(kube, ns, "batch.kubernetes.io/job-name=urgent", 2)
        freed = time.monotonic()

        # The workers get the stop notice with cause Resize, and rank 0 makes its final save in the grace.
        def noticed() -> dict | None:
            ctl.check()
            pod = kube.get_or_none("Pod", small["metadata"]["name"], ns)
            return pod if pod is not None and has_notice(pod) else None

        pod = kube.wait_for("the Resize stop notice", noticed, timeout=TIMEOUT, interval=0.1)
        notice = json.loads(pod["metadata"]["annotations"][NOTICE])
        assert notice["cause"] == "Resize" and notice["message"] == (
            "growing the gang from 2 to 4 nodes: quota is free that no waiting gang of equal or higher priority needs")
        leave_commit(kube, ns, pod, step=41, taken=datetime.now(UTC))

        s = wait_status(kube, ns, "train", running_at(4, "train-1-r2"), "grown back to 4", ctl)
        grow_seconds = time.monotonic() - freed
        assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"]) == (1, 0, 0), s
        assert parallelism(kube, ns, "train-1-r2") == 4 and world_sizes(kube, ns, "train-1-r2", 4) == {"4"}
    finally:
        pods_seen.stop()

    # Each small pod was told before it was stopped.
    for name in {n for _rv, n, o in pods_seen.changes if o["metadata"]["labels"].get(JOBSET_NAME) == "train-1-r1"}:
        told = pods_seen.first(name, has_notice)
        gone = pods_seen.first(name, lambda o: bool(o["metadata"].get("deletionTimestamp")))
        assert told is not None and gone is not None and told < gone, (name, told, gone)
    events = timeline(kube, ns)
    resized = [e["message"] for e in events if e["reason"] == "Resized"]
    assert resized == ["shrinking the gang from 4 to 2 nodes: readmitted at what fits now",
                       "growing the gang from 2 to 4 nodes: quota is free that no waiting gang of equal or higher "
                       "priority needs"], resized
    assert not [e for e in events if e["reason"] in ("AttemptEnded", "Failed")]
    s = wait_status(kube, ns, "train", lambda s: ((s.get("accounting") or {}).get("lastCheckpoint") or {}).get(
        "step") == 41, "the final save accounted", ctl)
    acct = s["accounting"]
    resize_loss = [w for w in acct["workLost"] if w["cause"] == "Resize"]
    assert len(resize_loss) == 1 and resize_loss[0]["size"] == 0.5, acct["workLost"]
    time.sleep(0.5)
    assert sorted(name for _attempt, name in rec.seen.values()) == ["train-1", "train-1-r1", "train-1-r2"]
    assert {attempt for attempt, _name in rec.seen.values()} == {"1"}
    print(f"elastic e2e: shrink 4->2 took {shrink_seconds:.1f}s from the high Job's creation; "
          f"grow 2->4 took {grow_seconds:.1f}s from its pods' completion (resizeCooldown 5s)")
