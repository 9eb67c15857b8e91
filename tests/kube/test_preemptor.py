"""The preemptor named on a Kubernetes timeline (issue 27, item 11): Kueue's message gives a job UID;
gangrun's JobSet of that UID names a task, another job's Workload names its owner."""

from __future__ import annotations

import pytest

from gangrun._backends.kube import crd, preemptor
from gangrun._core import kueue
from tests.harness.kube_builders import PREEMPTION_MESSAGE, jobset_obj, workload_obj


@pytest.mark.parametrize(("message", "want"), [
    pytest.param(PREEMPTION_MESSAGE, "js-2", id="v0.15-and-later-with-paths"),
    pytest.param("Preempted to accommodate a workload (UID: wl-9, JobUID: job-9) due to reclamation within the "
                 "cohort", "job-9", id="before-v0.15-without-paths"),
    pytest.param(kueue.previously(PREEMPTION_MESSAGE), "", id="readmitted-previously-is-no-preemption-now"),
    pytest.param("The workload is deactivated", "", id="another-eviction"),
    pytest.param("", "", id="empty"),
])
def test_the_preemptors_job_uid_is_read_from_kueues_message(message: str, want: str) -> None:
    assert kueue.preemptor_job_uid(message) == want


def _gangrun_jobset(uid: str, task: str) -> dict:
    js = jobset_obj(uid=uid).obj()
    js["metadata"]["labels"][crd.TASK_LABEL] = task
    return js


def _foreign_workload(job_uid: str, kind: str, name: str) -> dict:
    wl = workload_obj(job_uid, name=f"{kind.lower()}-{name}-abcde").admitted().obj()
    wl["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": kind, "name": name, "uid": job_uid,
                                          "controller": True}]
    return wl


@pytest.mark.parametrize(("jobsets", "workloads", "want"), [
    pytest.param([_gangrun_jobset("js-2", "urgent")], [], ("task", "urgent"), id="a-gangrun-task"),
    pytest.param([], [_foreign_workload("js-2", "JobSet", "other")], ("JobSet", "other"), id="another-jobset"),
    pytest.param([], [_foreign_workload("js-2", "Job", "batch")], ("Job", "batch"), id="a-plain-job"),
    pytest.param([], [], ("", ""), id="gone-from-the-caches"),
])
def test_the_preemptor_is_named_by_its_task_or_its_owner(jobsets, workloads, want) -> None:
    got = preemptor.describe("js-2", jobsets_by_uid=lambda u: [j for j in jobsets if j["metadata"]["uid"] == u],
                             workloads_by_job_uid=lambda u: [w for w in workloads
                                                             if w["metadata"]["labels"][kueue.JOB_UID_LABEL] == u])
    assert got == want
