"""The adapter on real objects: Workloads and JobSets captured from Kueue v0.19.2 and JobSet v0.12.0.

The files in tests/fixtures/kube/ (see its README) are what a real API server returned in each state.
Each test asserts what the controller would observe from them, and for the eviction states what the
engine decides, so a Kueue or JobSet upgrade that changes a field or reason shows up here first.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gangrun._backends.kube.adapter import WorkloadLookup, observe, to_gang, to_workload, workload_job_uid
from gangrun._core.engine import ActionKind, decide
from gangrun._core.eviction import EvictionKind, classify_eviction
from gangrun._core.phases import Phase
from gangrun._core.policy import Policy
from gangrun._core.state import TaskState

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kube"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def eviction_of(name: str):
    return classify_eviction(to_workload(load(name)))


def test_the_fixtures_these_tests_name_exist() -> None:
    names = {p.stem for p in FIXTURES.glob("*.json")}
    assert set(WORKLOAD_NOT_EVICTED) | set(JOBSETS) | {"workload-evicted-preempted", "workload-deactivated"} <= names


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_every_fixture_gives_an_observation(path: Path) -> None:
    obj = json.loads(path.read_text())
    if obj["kind"] == "JobSet":
        gang = to_gang(obj)
        rj = obj["spec"]["replicatedJobs"][0]
        assert gang is not None and gang.expected_workers == rj["replicas"] * rj["template"]["spec"]["parallelism"]
        assert observe(obj, WorkloadLookup()).gang == gang
    else:
        assert obj["kind"] == "Workload"
        wl = to_workload(obj)
        assert wl is not None and classify_eviction(wl).kind is not EvictionKind.UNKNOWN


# -- Workloads ----------------------------------------------------------------------------------------

WORKLOAD_NOT_EVICTED = ("workload-admitted", "workload-running", "workload-readmitted", "workload-job-finished",
                        "workload-succeeded", "workload-failed")


@pytest.mark.parametrize("name", WORKLOAD_NOT_EVICTED)
def test_workloads_that_are_not_evicted_are_not_yet_an_eviction(name: str) -> None:
    wl = to_workload(load(name))
    assert wl is not None and wl.active and wl.queue_name == "default"
    assert classify_eviction(wl).kind is EvictionKind.NOT_YET


def test_readmitted_workload_keeps_requeued_but_evicted_is_false() -> None:
    # Kueue leaves Requeued=True/Preempted after readmission: only Evicted decides.
    wl = to_workload(load("workload-readmitted"))
    by_type = {c.type: c for c in wl.conditions}
    assert by_type["Requeued"].is_true and by_type["Requeued"].reason == "Preempted"
    assert not by_type["Evicted"].is_true and not by_type["Preempted"].is_true
    assert classify_eviction(wl).kind is EvictionKind.NOT_YET


def test_preempted_workload_is_a_user_caused_preemption_that_waits_for_readmission() -> None:
    ev = eviction_of("workload-evicted-preempted")
    assert ev.kind is EvictionKind.PREEMPTED
    assert (ev.reason, ev.detail) == ("Preempted", "InClusterQueue")
    assert ev.waits_for_readmission and ev.user_caused
    assert ev.summary().startswith("gang evicted by kueue (Preempted, InClusterQueue): ")
    assert ev.message  # Kueue's "Preempted to accommodate a workload ..." text


def test_deactivated_workload_is_a_system_caused_deactivation() -> None:
    wl = to_workload(load("workload-deactivated"))
    assert wl is not None and not wl.active
    ev = classify_eviction(wl)
    assert ev.kind is EvictionKind.DEACTIVATED and ev.reason == "Deactivated"
    assert not ev.user_caused and not ev.waits_for_readmission


@pytest.mark.parametrize("name", [*WORKLOAD_NOT_EVICTED, "workload-evicted-preempted", "workload-deactivated"])
def test_workloads_name_their_job_by_uid(name: str) -> None:
    wl = load(name)
    uid = workload_job_uid(wl)
    owner = wl["metadata"]["ownerReferences"][0]
    assert uid and uid == owner["uid"]


# -- JobSets ------------------------------------------------------------------------------------------

# name: (suspended, has_run, completed, failed reason or None)
JOBSETS = {
    "jobset-running": (False, True, False, None),
    "jobset-readmitted": (False, True, False, None),
    "jobset-suspended-preempted": (True, False, False, None),
    "jobset-suspended-deactivated": (True, False, False, None),
    "jobset-succeeded": (False, True, True, None),
    "jobset-failed": (False, False, False, "ReachedMaxRestarts"),
}


@pytest.mark.parametrize("name", JOBSETS)
def test_jobset_gang(name: str) -> None:
    suspended, has_run, completed, failed = JOBSETS[name]
    gang = to_gang(load(name))
    assert gang is not None
    assert (gang.suspended, gang.has_run, gang.completed) == (suspended, has_run, completed)
    assert (gang.failed.reason if gang.failed else None) == failed
    assert not gang.deleting and not gang.restarting


# -- what the engine decides on the real pairs ----------------------------------------------------------


def started_state() -> TaskState:
    state = TaskState.new(now=NOW - timedelta(minutes=5))
    return state.with_running(at=NOW - timedelta(minutes=4), restart_attempt=0)


def step(policy: Policy, state: TaskState, jobset: str, workload: str):
    obs = observe(load(jobset), WorkloadLookup.found([load(workload)]))
    return decide(policy, state, obs, now=NOW)


def test_preempted_pair_waits_for_readmission_with_resume() -> None:
    d = step(Policy(resume_after_preemption=True), started_state(), "jobset-suspended-preempted",
             "workload-evicted-preempted")
    assert d.action.kind is ActionKind.NONE
    assert d.state.phase is Phase.RUNNING and d.state.attempt == 1
    assert d.state.info.reason.startswith("gang evicted by kueue (Preempted, InClusterQueue): ")
    assert d.state.info.reason.endswith("; waiting for re-admission")
    # ... and the readmitted pair runs again on the same attempt.
    d2 = step(Policy(resume_after_preemption=True), d.state, "jobset-readmitted", "workload-readmitted")
    assert d2.action.kind is ActionKind.NONE and d2.state.eviction is None
    assert d2.state.info.reason == "running (restart attempt 0)" and d2.state.attempt == 1


def test_preempted_pair_is_a_user_retry_without_resume() -> None:
    d = step(Policy(retries=1), started_state(), "jobset-suspended-preempted", "workload-evicted-preempted")
    assert d.action.kind is ActionKind.RETRY and d.action.code == "GangEvicted"
    assert d.state.attempt == 2 and d.state.user_retries_used == 1


def test_deactivated_pair_is_a_system_retry_even_with_resume() -> None:
    d = step(Policy(resume_after_preemption=True), started_state(), "jobset-suspended-deactivated",
             "workload-deactivated")
    assert d.action.kind is ActionKind.RETRY and d.action.code == "GangEvicted"
    assert d.state.attempt == 2 and d.state.user_retries_used == 0 and d.state.system_retries_used == 1


def test_suspended_jobset_with_unreadable_workloads_is_a_system_retry() -> None:
    obs = observe(load("jobset-suspended-preempted"), WorkloadLookup.unreadable("403"))
    d = decide(Policy(resume_after_preemption=True), started_state(), obs, now=NOW)
    assert d.action.kind is ActionKind.RETRY and d.state.system_retries_used == 1


def test_succeeded_and_failed_pairs_end_the_attempt() -> None:
    d = step(Policy(), started_state(), "jobset-succeeded", "workload-succeeded")
    assert d.action.kind is ActionKind.SUCCEED and d.state.phase is Phase.SUCCEEDED
    d = step(Policy(), started_state(), "jobset-failed", "workload-failed")
    assert d.action.kind is ActionKind.FAIL and d.state.phase is Phase.FAILED
    # JobSet's ReachedMaxRestarts ends the attempt as what it is to a user, a worker that failed with no
    # restart allowed (the code the engine gives the same failure when it sees it first); with no retry
    # left the task's code says so.
    assert d.state.attempts[-1].code == "WorkerFailed" and d.state.code == "MaxRetriesExceeded"
    assert "(no restarts allowed: maxRestarts is 0)" in d.state.message, d.state.message
