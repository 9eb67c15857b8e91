"""S4/S6: classifying Kueue evictions after start, with the exact messages."""

from __future__ import annotations

import pytest

from gangrun._core import kueue
from gangrun._core.engine import ActionKind, decide
from gangrun._core.eviction import EvictionKind, classify_eviction
from gangrun._core.observation import WorkloadRead, observed
from gangrun._core.phases import Phase
from gangrun._core.policy import Policy
from gangrun._core.state import Outcome
from tests.harness.builders import PREEMPTION_MESSAGE, at, make_gang, make_workload, state_in

SUSPENDED = make_gang().suspended().obj()


def after_start_eviction(wl, *, retries: int = 2, attempt: int = 1, user_used: int = 0, resume: bool = False,
                         unreadable: str = ""):
    state = state_in(Phase.RUNNING, "running (restart attempt 0)", started=True, attempt=attempt,
                     user_retries_used=user_used)
    return decide(Policy(retries=retries, resume_after_preemption=resume), state,
                  observed(SUSPENDED, wl, unreadable=unreadable), now=at(60))


# Every Kueue Evicted reason of v0.17-v0.19 and the retry class it maps to.
@pytest.mark.parametrize(
    ("reason", "want_kind", "user_caused"),
    [
        pytest.param(kueue.EVICTED_BY_PREEMPTION, EvictionKind.PREEMPTED, True, id="Preempted"),
        pytest.param(kueue.DEACTIVATED_DUE_TO_MAX_EXEC_TIME, EvictionKind.MAX_EXECUTION_TIME, True,
                     id="DeactivatedDueToMaximumExecutionTimeExceeded"),
        pytest.param(kueue.EVICTED_BY_PODS_READY_TIMEOUT, EvictionKind.OTHER, False, id="PodsReadyTimeout"),
        pytest.param(kueue.EVICTED_BY_ADMISSION_CHECK, EvictionKind.OTHER, False, id="AdmissionCheck"),
        pytest.param(kueue.EVICTED_BY_CLUSTER_QUEUE_STOPPED, EvictionKind.OTHER, False, id="ClusterQueueStopped"),
        pytest.param(kueue.EVICTED_BY_LOCAL_QUEUE_STOPPED, EvictionKind.OTHER, False, id="LocalQueueStopped"),
        pytest.param(kueue.EVICTED_DUE_TO_NODE_FAILURES, EvictionKind.OTHER, False, id="NodeFailures"),
        pytest.param(kueue.EVICTED_ON_MANAGER_CLUSTER, EvictionKind.OTHER, False, id="EvictedOnManagerCluster"),
        pytest.param(kueue.EVICTED_BY_FLAVOR_MIGRATION, EvictionKind.OTHER, False, id="FlavorMigration"),
        pytest.param(kueue.DEACTIVATED, EvictionKind.DEACTIVATED, False, id="Deactivated"),
        pytest.param("DeactivatedDueToRequeuingLimitExceeded", EvictionKind.DEACTIVATED, False,
                     id="DeactivatedDueToRequeuingLimitExceeded"),
        pytest.param("DeactivatedDueToAdmissionCheck", EvictionKind.DEACTIVATED, False, id="DeactivatedDueToAdmissionCheck"),
        pytest.param("DeactivatedDueToEvictedOnManagerCluster", EvictionKind.DEACTIVATED, False,
                     id="DeactivatedDueToEvictedOnManagerCluster"),
        pytest.param("DeactivatedDueToEvictedOnWorkerCluster", EvictionKind.DEACTIVATED, False,
                     id="DeactivatedDueToEvictedOnWorkerCluster"),
        pytest.param(kueue.INACTIVE_WORKLOAD_LEGACY, EvictionKind.DEACTIVATED, False, id="InactiveWorkload-legacy"),
        pytest.param("SomethingNewInKueue", EvictionKind.OTHER, False, id="unknown-future-reason-is-system"),
    ],
)
def test_s4_every_kueue_evicted_reason_is_classified(reason, want_kind, user_caused):
    ev = classify_eviction(make_workload().admitted().evicted(reason, "why").obj())
    assert ev.kind is want_kind
    assert ev.user_caused is user_caused
    d = after_start_eviction(make_workload().admitted().evicted(reason, "why").obj())
    assert d.action.kind is ActionKind.RETRY
    assert d.action.code == "GangEvicted"
    assert d.state.attempts[0].outcome is (Outcome.USER_RETRY if user_caused else Outcome.SYSTEM_RETRY)


# The test-pinned outcomes, with their exact messages.
@pytest.mark.parametrize(
    ("wl", "retries", "user_used", "unreadable", "want_outcome", "want_in_message"),
    [
        pytest.param(make_workload().preemption().obj(), 2, 0, "", Outcome.USER_RETRY,
                     [f"gang evicted by kueue (Preempted, InClusterQueue): {PREEMPTION_MESSAGE}",
                      "; this uses one of the task's retries (1 left after it)"], id="preempted-first-of-three-attempts"),
        pytest.param(make_workload().preemption().obj(), 2, 2, "", Outcome.FAILED,
                     ["; this counts against the task's retries and none are left, so the task fails"],
                     id="preempted-on-the-last-attempt-fails"),
        pytest.param(make_workload().admitted().evicted(kueue.DEACTIVATED_DUE_TO_MAX_EXEC_TIME, "").obj(), 1, 0, "",
                     Outcome.USER_RETRY, ["(DeactivatedDueToMaximumExecutionTimeExceeded)", "; this uses the task's last retry"],
                     id="max-exec-time-uses-the-last-retry"),
        pytest.param(make_workload().admitted().evicted(kueue.DEACTIVATED, kueue.MSG_DEACTIVATED).inactive().obj(), 2, 0, "",
                     Outcome.SYSTEM_RETRY, ["(Deactivated): The workload is deactivated",
                                            "; this does not count against the task's retries"], id="deactivated-is-system"),
        pytest.param(make_workload().admitted().evicted(kueue.EVICTED_BY_CLUSTER_QUEUE_STOPPED, "The ClusterQueue is stopped").obj(),
                     2, 0, "", Outcome.SYSTEM_RETRY, ["(ClusterQueueStopped)"], id="cluster-queue-stopped-is-system"),
        pytest.param(make_workload().admitted().evicted(kueue.EVICTED_DUE_TO_NODE_FAILURES, "node n1").obj(), 2, 0, "",
                     Outcome.SYSTEM_RETRY, ["(NodeFailures): node n1"], id="node-failures-is-system"),
        pytest.param(None, 2, 0, "", Outcome.SYSTEM_RETRY,
                     ["gang evicted by kueue; this does not count against the task's retries"], id="no-workload-is-system"),
        pytest.param(None, 2, 0, "workloads.kueue.x-k8s.io is forbidden", Outcome.SYSTEM_RETRY,
                     ["gang evicted by kueue; this does not count against the task's retries"], id="unreadable-workload-is-system"),
    ],
)
def test_s4_eviction_after_start_ends_the_attempt(wl, retries, user_used, unreadable, want_outcome, want_in_message):
    d = after_start_eviction(wl, retries=retries, user_used=user_used, unreadable=unreadable)
    ended = d.state.attempts[0] if d.state.attempts[0].outcome else d.state.current
    assert ended.outcome is want_outcome
    assert ended.code == "GangEvicted"
    for text in want_in_message:
        assert text in d.action.message
    if want_outcome is Outcome.FAILED:
        assert d.state.phase is Phase.FAILED and d.state.code == "MaxRetriesExceeded"
        assert d.action.kind is ActionKind.FAIL
    else:
        assert d.state.phase is Phase.QUEUED and d.state.attempt == 2


def test_s4_evicted_false_after_start_waits_first():
    """`Evicted=False` on a suspended started gang is not yet an eviction: S7 waits before calling it unknown."""
    d = after_start_eviction(make_workload().admitted().not_evicted().obj())
    assert d.action.kind is ActionKind.NONE and d.state.phase is Phase.RUNNING


def test_s4_a_preemption_uses_a_user_retry_and_not_a_system_one():
    d = after_start_eviction(make_workload().preemption().obj(), retries=1)
    assert (d.state.user_retries_used, d.state.system_retries_used) == (1, 0)


@pytest.mark.parametrize("resume", [True, False], ids=["resume-on", "resume-off"])
def test_s6_deactivation_beats_stale_preempted(resume):
    stale = make_workload().preemption().inactive().obj()
    assert classify_eviction(stale).kind is EvictionKind.DEACTIVATED
    d = after_start_eviction(stale, resume=resume)
    assert d.action.kind is ActionKind.RETRY and d.action.retry.value == "system"
    assert "(Deactivated): The workload is deactivated" in d.action.message
    assert d.state.user_retries_used == 0 and d.state.system_retries_used == 1


def test_s4_eviction_reason_is_recorded_the_first_time_it_is_seen():
    s = state_in(Phase.RUNNING, started=True)
    # W1: Evicted=True while the gang still runs; Kueue overwrites it at readmission, so it is kept now.
    d = decide(Policy(resume_after_preemption=True), s, observed(make_gang().ready().obj(), make_workload().preemption().obj()),
               now=at(5))
    assert d.state.eviction is not None
    assert (d.state.eviction.reason, d.state.eviction.detail) == ("Preempted", "InClusterQueue")
    assert d.state.eviction.message == PREEMPTION_MESSAGE
    assert d.state.phase is Phase.RUNNING and d.action.kind is ActionKind.NONE


def test_s4_workload_read_state_without_a_workload_is_unknown():
    assert classify_eviction(None, WorkloadRead.UNREADABLE).kind is EvictionKind.UNKNOWN
    assert classify_eviction(None, WorkloadRead.NOT_FOUND).kind is EvictionKind.UNKNOWN
