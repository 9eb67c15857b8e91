"""Builders of real-shaped API objects (dicts) for the Kubernetes backend tests.

Shapes follow Kueue v0.17–v0.19 `kueue.x-k8s.io/v1beta2` Workloads and JobSet v0.11–v0.12
`jobset.x-k8s.io/v1alpha2` (as captured from the real controllers in tests/fixtures/kube), e.g.

    workload_obj("js-uid").admitted().evicted("Preempted", PREEMPTION_MESSAGE).preempted("InClusterQueue").obj()
    jobset_obj(spec, attempt=1).admitted().running(ready=1).obj()
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any

from gangrun import _checkpoint_report
from gangrun._backends.kube import crd
from gangrun._backends.kube.render import render_jobset
from gangrun._core import jobset, kueue
from gangrun._core.spec import TaskSpec, parse_manifest
from tests.harness.builders import PREEMPTION_MESSAGE, T0, at  # noqa: F401 - re-exported for the kube tests


def ts(t: datetime = T0) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest(name: str = "train", *, namespace: str = "ml", **spec: Any) -> dict[str, Any]:
    body = {"nodes": 2, "command": ["python", "train.py"], "image": "registry.invalid/train:1", **spec}
    return {"apiVersion": crd.API_VERSION, "kind": crd.KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": body}


def task_spec(name: str = "train", **spec: Any) -> TaskSpec:
    return parse_manifest(manifest(name, **spec))


def task_obj(name: str = "train", *, namespace: str = "ml", status: dict | None = None, uid: str = "task-uid",
             **spec: Any) -> dict[str, Any]:
    obj = manifest(name, namespace=namespace, **spec)
    obj["metadata"].update(uid=uid, resourceVersion="1", generation=1, creationTimestamp=ts(),
                           finalizers=[], managedFields=[{"manager": "kubectl"}])
    if status is not None:
        obj["status"] = status
    return obj


def _cond(type_: str, status: str, reason: str, message: str = "", t: datetime = T0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": ts(t), "observedGeneration": 1}


class _Builder:
    def __init__(self, obj: dict[str, Any]) -> None:
        self._o = obj

    def cond(self, type_: str, status: str, reason: str, message: str = "") -> _Builder:
        conds = [c for c in self._o.setdefault("status", {}).setdefault("conditions", []) if c["type"] != type_]
        self._o["status"]["conditions"] = conds + [_cond(type_, status, reason, message)]
        return self

    def set(self, path: str, value: Any) -> _Builder:
        cur = self._o
        *head, last = path.split(".")
        for p in head:
            cur = cur.setdefault(p, {})
        cur[last] = value
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._o)


class WorkloadObj(_Builder):
    def admitted(self) -> WorkloadObj:
        self.cond(kueue.QUOTA_RESERVED, "True", kueue.QUOTA_RESERVED_REASON, kueue.quota_reserved_message("cq"))
        self.cond(kueue.ADMITTED, "True", kueue.ADMITTED, kueue.MSG_ADMITTED)
        self._o["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "workers", "flavors": {"cpu": "default"}, "count": 2}]}
        return self

    def pending(self, message: str = "") -> WorkloadObj:
        self.cond(kueue.QUOTA_RESERVED, "False", kueue.PENDING, message)
        self.cond(kueue.ADMITTED, "False", kueue.NO_RESERVATION, kueue.MSG_NO_RESERVATION)
        self._o["status"].pop("admission", None)
        return self

    def evicted(self, reason: str, message: str = "") -> WorkloadObj:
        return self.cond(kueue.EVICTED, "True", reason, message)

    def preempted(self, reason: str = kueue.IN_CLUSTER_QUEUE, message: str = PREEMPTION_MESSAGE) -> WorkloadObj:
        return self.cond(kueue.PREEMPTED, "True", reason, message)

    def readmitted(self) -> WorkloadObj:
        """W7: Evicted/Preempted flip to False/QuotaReserved with `Previously: ...`."""
        for c in self._o["status"]["conditions"]:
            if c["type"] in (kueue.EVICTED, kueue.PREEMPTED):
                c.update(status="False", reason=kueue.QUOTA_RESERVED_REASON, message=kueue.previously(c["message"]))
        return self.admitted()

    def inactive(self) -> WorkloadObj:
        self._o["spec"]["active"] = False
        return self


def workload_obj(job_uid: str, *, name: str = "jobset-train-1-ab12c", namespace: str = "ml",
                 created: datetime = T0, queue: str = "default") -> WorkloadObj:
    return WorkloadObj({
        "apiVersion": kueue.API_VERSION, "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "uid": f"wl-{name}", "creationTimestamp": ts(created),
                     "labels": {kueue.JOB_UID_LABEL: job_uid}, "finalizers": ["kueue.x-k8s.io/resource-in-use"],
                     "ownerReferences": [{"apiVersion": jobset.API_VERSION, "kind": jobset.KIND, "name": "x",
                                          "uid": job_uid, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"queueName": queue, "podSets": [{"name": "workers", "count": 2, "template": {"spec": {}}}],
                 "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "low"},
                 "priority": 100},
        "status": {"conditions": []},
    })


class JobSetObj(_Builder):
    def suspended(self) -> JobSetObj:
        self._o["spec"]["suspend"] = True
        self.cond(jobset.SUSPENDED, "True", jobset.SUSPENDED_JOBS, jobset.MSG_SUSPENDED)
        return self

    def admitted(self) -> JobSetObj:
        self._o["spec"]["suspend"] = False
        self.cond(jobset.SUSPENDED, "False", jobset.RESUME_JOBS, jobset.MSG_RESUMED)
        return self

    def jobs(self, *, ready: int = 0, succeeded: int = 0, failed: int = 0, active: int = 0,
             suspended: int = 0) -> JobSetObj:
        self._o.setdefault("status", {})["replicatedJobsStatus"] = [{
            "name": "workers", "ready": ready, "succeeded": succeeded, "failed": failed, "active": active,
            "suspended": suspended}]
        return self

    def restarts(self, n: int, towards_max: int | None = None) -> JobSetObj:
        self._o.setdefault("status", {})["restarts"] = n
        self._o["status"]["restartsCountTowardsMax"] = n if towards_max is None else towards_max
        return self

    def completed(self) -> JobSetObj:
        self._o.setdefault("status", {})["terminalState"] = "Completed"
        return self.cond(jobset.COMPLETED, "True", jobset.ALL_JOBS_COMPLETED, jobset.MSG_COMPLETED)

    def failed(self) -> JobSetObj:
        self._o.setdefault("status", {})["terminalState"] = "Failed"
        return self.cond(jobset.FAILED, "True", jobset.FAILED_JOBS,
                         jobset.failed_jobs_message("train-1-workers-0"))


def jobset_obj(spec: TaskSpec | None = None, *, attempt: int = 1, uid: str = "js-uid",
               owner_uid: str = "task-uid") -> JobSetObj:
    spec = spec or task_spec()
    obj = render_jobset(spec, attempt=attempt, owner_uid=owner_uid)
    obj["metadata"].update(uid=uid, resourceVersion="5", creationTimestamp=ts(), generation=1)
    obj["status"] = {"restarts": 0, "conditions": []}
    return JobSetObj(obj)


def pod_obj(jobset_name: str, index: int, *, task: str = "train", attempt: int = 1, restart: int = 0,
            phase: str = "Running", ready: bool = True, node: str | None = "node-1",
            namespace: str = "ml", started_at: datetime | None = None) -> dict[str, Any]:
    name = f"{jobset_name}-workers-0-{index}-abcde"
    labels = {crd.TASK_LABEL: task, crd.ATTEMPT_LABEL: str(attempt), jobset.JOBSET_NAME_KEY: jobset_name,
              jobset.REPLICATED_JOB_NAME_KEY: "workers", jobset.RESTART_ATTEMPT_KEY: str(restart),
              jobset.JOB_COMPLETION_INDEX_KEY: str(index)}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "creationTimestamp": ts(),
                     "annotations": {jobset.RESTART_ATTEMPT_KEY: str(restart),
                                     jobset.JOB_COMPLETION_INDEX_KEY: str(index)}},
        "spec": {"hostname": f"{jobset_name}-workers-0-{index}", "subdomain": jobset_name},
        "status": {"phase": phase, "conditions": []},
    }
    if node:
        pod["spec"]["nodeName"] = node
        pod["status"]["conditions"].append({"type": "PodScheduled", "status": "True"})
    else:
        pod["status"]["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": "0/3 nodes are available: 3 Insufficient cpu."})
    pod["status"]["conditions"].append({"type": "Ready", "status": "True" if ready else "False"})
    if started_at is not None:
        pod["status"]["containerStatuses"] = [{"name": "worker", "state": {"running": {"startedAt": ts(started_at)}}}]
    return pod


def disrupted(pod: dict[str, Any], reason: str = jobset.DISRUPTION_EVICTION_API,
              message: str = jobset.MSG_EVICTION_API, *, failed: bool = True, t: datetime = T0) -> dict[str, Any]:
    """The pod as a drain leaves it: DisruptionTarget=True, then Failed once the kubelet stopped it (exit 143)."""
    pod = copy.deepcopy(pod)
    pod["status"]["conditions"].append({"type": jobset.DISRUPTION_TARGET, "status": "True", "reason": reason,
                                        "message": message, "lastTransitionTime": ts(t)})
    if failed:
        pod["status"]["phase"] = "Failed"
        pod["status"]["containerStatuses"] = [{"name": "worker", "state": {"terminated": {
            "exitCode": 143, "reason": "Error", "finishedAt": ts(t)}}}]
    return pod


def restarting_for_disruption(js: dict[str, Any]) -> dict[str, Any]:
    """A JobSet object (as read from the API) as JobSet leaves it when gangrun's disruption rule restarts the
    gang: restart 1, not counted toward maxRestarts, RestartingJobSet=True. Changed in place and returned."""
    js["status"].update(restarts=1, restartsCountTowardsMax=0, conditions=[
        {"type": "RestartingJobSet", "status": "True", "reason": "FailurePolicy_restartOnDisruption",
         "message": "applying RestartJobSetAndIgnoreMaxRestarts failure policy action (first failed job: x)"}])
    return js


def terminated(pod: dict[str, Any], *, code: int = 0, message: str = "", t: datetime = T0) -> dict[str, Any]:
    """The pod after its worker container exited, leaving `message` as its termination message."""
    pod = copy.deepcopy(pod)
    pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
    term: dict[str, Any] = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": ts(t)}
    if message:
        term["message"] = message
    pod["status"]["containerStatuses"] = [{"name": "worker", "state": {"terminated": term}}]
    return pod


def commit_report(*, step: int, t: datetime, attempt: int = 1, rank: int = 0, seq: int | None = None,
                  taken: datetime | None = None, final: bool = False, first_step: datetime | None = None) -> str:
    """A termination message as gangrun.launch writes it for a worker whose newest commit was `step`
    (its state taken at `taken`), and whose first step after its load was at `first_step`."""
    line: dict[str, Any] = {"type": "checkpoint_committed", "task": "train", "attempt": attempt, "rank": rank,
                            "seq": step if seq is None else seq, "step": step,
                            "uri": f"s3://b/train/attempt-{attempt}/step-{step}", "time": t.timestamp()}
    if taken is not None:
        line.update(takenAt=taken.timestamp(), saveSeconds=round((t - taken).total_seconds(), 3), final=final)
    lines = [json.dumps(line)]
    if first_step is not None:
        lines.append(json.dumps({"type": "first_step", "task": "train", "attempt": attempt, "rank": rank,
                                 "step": 1, "time": first_step.timestamp()}))
    return _checkpoint_report.report(lines)


def started(pod: dict[str, Any], t: datetime) -> dict[str, Any]:
    """The pod with its worker container running since `t`."""
    pod = copy.deepcopy(pod)
    pod["status"]["containerStatuses"] = [{"name": "worker", "state": {"running": {"startedAt": ts(t)}}}]
    return pod
