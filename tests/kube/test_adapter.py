"""JobSet + pods + Workload objects → Observation: realistic objects in, engine values out, never a raise."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangrun._backends.kube import adapter, fields, reports
from gangrun._backends.kube.adapter import WorkloadLookup, newest_workload, observe, to_gang, to_workload
from gangrun._core import jobset, kueue
from gangrun._core.engine import decide
from gangrun._core.eviction import EvictionKind, classify_eviction
from gangrun._core.observation import Gang, Observation, WorkloadRead
from gangrun._core.policy import Policy
from gangrun._core.state import TaskState
from tests.harness.kube_builders import (
    PREEMPTION_MESSAGE,
    T0,
    at,
    commit_report,
    disrupted,
    jobset_obj,
    pod_obj,
    terminated,
    ts,
    workload_obj,
)


def test_suspended_jobset_just_created_is_a_suspended_gang_that_has_not_run() -> None:
    gang = to_gang(jobset_obj().obj())
    assert gang is not None and gang.suspended and not gang.has_run
    assert gang.expected_workers == 2


def test_jobset_suspended_condition_message_is_kept_for_the_hold_reason() -> None:
    gang = to_gang(jobset_obj().suspended().obj())
    assert gang.suspended_message == "jobset is suspended"


def test_running_jobset_counts_ready_jobs_and_pods_of_this_round() -> None:
    js = jobset_obj().admitted().jobs(ready=1, active=1).obj()
    pods = [pod_obj("train-1", 0), pod_obj("train-1", 1, ready=False)]
    gang = to_gang(js, pods)
    assert not gang.suspended and gang.has_run
    assert (gang.scheduled_workers, gang.ready_workers, gang.jobs_ready) == (2, 1, 1)


def test_pods_of_an_earlier_restart_round_and_terminating_pods_are_ignored() -> None:
    js = jobset_obj().admitted().restarts(1).obj()
    old = pod_obj("train-1", 0, restart=0)
    terminating = pod_obj("train-1", 1, restart=1)
    terminating["metadata"]["deletionTimestamp"] = ts()
    gang = to_gang(js, [old, terminating, pod_obj("train-1", 0, restart=1)])
    assert gang.scheduled_workers == 1 and gang.restarts == 1


def test_unscheduled_pod_reason_is_reported() -> None:
    gang = to_gang(jobset_obj().admitted().obj(), [pod_obj("train-1", 0, phase="Pending", node=None, ready=False)])
    assert gang.scheduled_workers == 0
    assert gang.unscheduled_detail == "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."


def test_earliest_failed_pod_is_the_root_cause() -> None:
    late, early = pod_obj("train-1", 0, phase="Failed"), pod_obj("train-1", 1, phase="Failed")
    for pod, code, t in ((late, 143, at(10)), (early, 1, at(5))):
        pod["status"]["containerStatuses"] = [{"name": "worker", "state": {"terminated": {
            "exitCode": code, "reason": "Error", "finishedAt": ts(t)}}}]
    gang = to_gang(jobset_obj().admitted().jobs(failed=1).obj(), [late, early])
    assert gang.first_failure.startswith("pod train-1-workers-0-1-abcde exited with code 1")
    assert gang.jobs_failed == 1


def test_invalid_image_is_a_pending_failure_but_image_pull_backoff_is_not() -> None:
    bad, slow = pod_obj("train-1", 0, phase="Pending", ready=False), pod_obj("train-1", 1, phase="Pending", ready=False)
    bad["status"]["containerStatuses"] = [{"state": {"waiting": {"reason": "InvalidImageName", "message": "bad"}}}]
    slow["status"]["containerStatuses"] = [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}]
    assert "InvalidImageName" in to_gang(jobset_obj().admitted().obj(), [bad]).pending_failure
    assert to_gang(jobset_obj().admitted().obj(), [slow]).pending_failure == ""


def test_completed_and_failed_jobsets() -> None:
    assert to_gang(jobset_obj().completed().obj()).completed
    assert to_gang(jobset_obj().failed().obj()).failed.reason == "FailedJobs"


def test_jobset_v011_without_restarting_condition_and_counts_towards_max() -> None:
    js = jobset_obj().admitted().obj()
    js["status"] = {"restarts": 2, "replicatedJobsStatus": [{"name": "workers", "ready": 1, "succeeded": 0,
                                                              "failed": 0, "active": 1, "suspended": 0}]}
    gang = to_gang(js)
    assert gang.restarts == 2 and gang.restarts_count_towards_max == 0 and not gang.restarting


def test_jobset_being_deleted() -> None:
    js = jobset_obj().admitted().set("metadata.deletionTimestamp", ts()).obj()
    assert to_gang(js).deleting


# -- Workloads --------------------------------------------------------------------------------------


@pytest.mark.parametrize("build,kind,reason,detail", [
    pytest.param(lambda w: w.admitted().evicted("Preempted", PREEMPTION_MESSAGE).preempted("InClusterQueue"),
                 EvictionKind.PREEMPTED, "Preempted", "InClusterQueue", id="preempted-in-cluster-queue"),
    pytest.param(lambda w: w.admitted().evicted("Preempted", PREEMPTION_MESSAGE).preempted("InCohortReclamation"),
                 EvictionKind.PREEMPTED, "Preempted", "InCohortReclamation", id="preempted-cohort-reclamation"),
    pytest.param(lambda w: w.pending("The workload is deactivated due to exceeding the maximum number of "
                                     "re-queuing retries").evicted("DeactivatedDueToRequeuingLimitExceeded",
                                                                   "The workload is deactivated").inactive(),
                 EvictionKind.DEACTIVATED, "DeactivatedDueToRequeuingLimitExceeded", "", id="v019-requeue-limit"),
    pytest.param(lambda w: w.admitted().evicted("PodsReadyTimeout", "Exceeded the PodsReady timeout ml/x"),
                 EvictionKind.OTHER, "PodsReadyTimeout", "", id="pods-ready-timeout"),
    pytest.param(lambda w: w.admitted().evicted("Preempted", PREEMPTION_MESSAGE).preempted().inactive(),
                 EvictionKind.DEACTIVATED, "Deactivated", "", id="s6-deactivated-beats-stale-preempted"),
    pytest.param(lambda w: w.admitted().evicted("DeactivatedDueToMaximumExecutionTimeExceeded", "m"),
                 EvictionKind.MAX_EXECUTION_TIME, "DeactivatedDueToMaximumExecutionTimeExceeded", "",
                 id="max-exec-time"),
    pytest.param(lambda w: w.admitted().evicted("Preempted", PREEMPTION_MESSAGE).preempted().readmitted(),
                 EvictionKind.NOT_YET, "", "", id="readmitted-previously"),
    pytest.param(lambda w: w.admitted(), EvictionKind.NOT_YET, "", "", id="s7-not-evicted-yet"),
])
def test_real_workloads_classify_through_the_one_classifier(build: Any, kind: EvictionKind, reason: str,
                                                            detail: str) -> None:
    wl = to_workload(build(workload_obj("js-uid")).obj())
    ev = classify_eviction(wl)
    assert (ev.kind, ev.reason, ev.detail) == (kind, reason, detail)


def test_workload_active_defaults_to_true_and_queue_is_read() -> None:
    obj = workload_obj("js-uid", queue="team-a").obj()
    obj["spec"].pop("active", None)
    wl = to_workload(obj)
    assert wl.active and wl.queue_name == "team-a"


def test_newest_workload_wins() -> None:
    old = workload_obj("u", name="old", created=at(0)).obj()
    new = workload_obj("u", name="new", created=at(60)).obj()
    assert newest_workload([new, old])["metadata"]["name"] == "new"
    assert newest_workload([old, new])["metadata"]["name"] == "new"


def test_observation_reads_found_missing_and_unreadable_workloads() -> None:
    js = jobset_obj().suspended().obj()
    wl = workload_obj("js-uid").admitted().obj()
    assert observe(js, WorkloadLookup.found([wl])).workload_read is WorkloadRead.FOUND
    assert observe(js, WorkloadLookup.found([])).workload_read is WorkloadRead.NOT_FOUND
    forbidden = observe(js, WorkloadLookup.unreadable("403 forbidden"))
    assert forbidden.workload_read is WorkloadRead.UNREADABLE and forbidden.workload_error == "403 forbidden"
    assert observe(None, WorkloadLookup.found([wl])).gang is None


@pytest.mark.parametrize("obj", [
    pytest.param(None, id="none"), pytest.param([], id="list"), pytest.param("x", id="string"),
    pytest.param({}, id="empty"), pytest.param({"status": "weird"}, id="status-string"),
    pytest.param({"status": {"conditions": "nope"}}, id="conditions-not-list"),
    pytest.param({"status": {"conditions": [None, 3, {"type": 5}, {"type": "Evicted"}]}}, id="odd-conditions"),
    pytest.param({"spec": {"replicatedJobs": [None, {"name": "workers", "replicas": "x"}], "suspend": "yes"},
                  "status": {"restarts": "two", "replicatedJobsStatus": [{"name": "workers", "ready": None}]}},
                 id="wrong-types"),
    pytest.param({"metadata": {"labels": ["a"]}, "spec": None}, id="labels-list"),
])
def test_malformed_objects_never_raise(obj: Any) -> None:
    adapter.to_gang(obj, [obj, {"status": {"containerStatuses": [None, {"state": {"terminated": {}}}]}}])
    adapter.to_workload(obj)
    fields.conditions(obj)
    adapter.attempt_of(obj)
    observe(obj, WorkloadLookup.found([obj]))


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(
                               st.sampled_from(["metadata", "spec", "status", "conditions", "type", "status",
                                                "replicatedJobs", "replicatedJobsStatus", "name", "labels",
                                                "active", "suspend", "containerStatuses", "state", "phase"]),
                               c, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(js=json_values, wl=json_values, pod=json_values)
def test_arbitrary_json_never_raises(js: Any, wl: Any, pod: Any) -> None:
    obs = observe(js, WorkloadLookup.found([wl]), [pod])
    # Whatever the API sent, the engine gets well-typed values it can decide on.
    assert isinstance(obs, Observation) and (obs.gang is None or isinstance(obs.gang, Gang))
    if obs.gang is not None:
        assert all(isinstance(getattr(obs.gang, f), int) for f in ("restarts", "scheduled_workers", "ready_workers"))
        assert all(isinstance(c.type, str) and isinstance(c.message, str) for c in obs.gang.conditions)
    decision = decide(Policy(), TaskState.new(now=T0), obs, now=T0)
    assert decision.state.attempt == 1


def test_job_uid_label_links_a_workload_to_its_jobset() -> None:
    assert adapter.workload_job_uid(workload_obj("abc").obj()) == "abc"
    assert kueue.JOB_UID_LABEL == "kueue.x-k8s.io/job-uid"


# -- node disruptions and checkpoints (issue 9) ------------------------------------------------------


def test_a_pod_with_disruption_target_is_the_gang_s_disruption_still_pending_in_its_round() -> None:
    js = jobset_obj().admitted().jobs(failed=1).obj()
    gang = to_gang(js, [pod_obj("train-1", 0), disrupted(pod_obj("train-1", 1))])
    assert gang.disruption is not None and gang.disruption_pending
    assert (gang.disruption.reason, gang.disruption.message) == ("EvictionByEvictionAPI", "Eviction API: evicting")
    assert gang.disruption.worker == "pod train-1-workers-0-1-abcde"


def test_a_disrupted_pod_of_the_previous_round_explains_the_uncounted_restart() -> None:
    js = jobset_obj().admitted().restarts(1, towards_max=0).cond(
        jobset.RESTARTING, "True", jobset.RESTARTING_REASON_DISRUPTION,
        jobset.restarting_ignoring_max_message("train-1-workers-0")).obj()
    old = disrupted(pod_obj("train-1", 1, restart=0), jobset.DISRUPTION_TAINT_MANAGER,
                    "Taint manager: deleting due to NoExecute taint")
    gang = to_gang(js, [old, pod_obj("train-1", 0, restart=1)])
    assert gang.restarts_not_counted == 1 and not gang.disruption_pending
    assert gang.disruption.reason == "DeletionByTaintManager" and gang.disruption.restart_attempt == 0


def test_when_the_disrupted_pod_is_gone_the_jobset_s_rule_still_names_the_disruption() -> None:
    message = jobset.restarting_ignoring_max_message("train-1-workers-0")
    js = jobset_obj().admitted().restarts(1, towards_max=0).cond(
        jobset.RESTARTING, "True", jobset.RESTARTING_REASON_DISRUPTION, message).obj()
    d = to_gang(js, []).disruption
    assert (d.reason, d.message, d.restart_attempt) == ("DisruptionTarget", message, 0)
    plain = jobset_obj().admitted().restarts(1).cond(jobset.RESTARTING, "True", jobset.DEFAULT_FAILURE_POLICY,
                                                    jobset.restarting_message("train-1-workers-0")).obj()
    assert to_gang(plain, []).disruption is None  # a counted restart is no disruption


def test_the_newest_checkpoint_comes_from_the_workers_termination_messages() -> None:
    pods = [terminated(pod_obj("train-1", 0), code=143, message=commit_report(step=6, t=at(20))),
            terminated(pod_obj("train-1", 1), code=143), pod_obj("train-1", 2),
            terminated(pod_obj("train-1", 3), code=1, message="Traceback (most recent call last): ...")]
    (commit,) = reports.checkpoints(pods)
    assert (commit.attempt, commit.step, commit.at, commit.rank) == (1, 6, at(20), 0)


def test_an_explicit_unsuspend_wins_over_a_suspended_condition_the_jobset_controller_has_not_updated_yet() -> None:
    resuming = jobset_obj().suspended().set("spec.suspend", False).obj()  # Kueue readmitted; the status lags
    assert not to_gang(resuming).suspended
    unset = jobset_obj().suspended().obj()
    del unset["spec"]["suspend"]  # a spec that says nothing: the condition tells
    assert to_gang(unset).suspended
