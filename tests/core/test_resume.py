"""S5/S7/S8/B4 with resumeAfterPreemption: the decision table, plus the story."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gangrun._core import kueue
from gangrun._core.engine import ActionKind, decide
from gangrun._core.observation import observed
from gangrun._core.phases import Phase
from gangrun._core.policy import Policy
from tests.harness.builders import PREEMPTION_MESSAGE, at, make_gang, make_workload, state_in

RESUME = Policy(retries=0, resume_after_preemption=True)
WAITING = f"gang evicted by kueue (Preempted, InClusterQueue): {PREEMPTION_MESSAGE}; waiting for re-admission"


def running():
    return state_in(Phase.RUNNING, "running (restart attempt 0)", started=True)


# resume_after_preemption=true, the gang already started, JobSet seen suspended.
@pytest.mark.parametrize(
    ("wl", "unreadable", "want_action", "want_retry", "want_reason"),
    [
        pytest.param(make_workload().preemption().obj(), "", ActionKind.NONE, None, WAITING,
                     id="preempted-keeps-the-attempt-and-waits"),
        pytest.param(make_workload().preemption().inactive().obj(), "", ActionKind.RETRY, "system", None,
                     id="deactivated-with-stale-preempted-ends-as-system"),
        pytest.param(make_workload().admitted().evicted(kueue.EVICTED_BY_PODS_READY_TIMEOUT, "x").obj(), "",
                     ActionKind.RETRY, "system", None, id="pods-ready-timeout-ends-as-system"),
        pytest.param(make_workload().admitted().evicted(kueue.EVICTED_DUE_TO_NODE_FAILURES, "x").obj(), "",
                     ActionKind.RETRY, "system", None, id="node-failures-ends-as-system"),
        pytest.param(make_workload().admitted().evicted(kueue.EVICTED_BY_CLUSTER_QUEUE_STOPPED, "x").obj(), "",
                     ActionKind.RETRY, "system", None, id="cluster-queue-stopped-ends-as-system"),
        pytest.param(make_workload().admitted().evicted(kueue.DEACTIVATED_DUE_TO_MAX_EXEC_TIME, "x").obj(), "",
                     ActionKind.FAIL, "user", None, id="max-exec-time-is-still-user"),
        pytest.param(None, "", ActionKind.RETRY, "system", None, id="workload-missing-ends-as-system"),
        pytest.param(None, "403 forbidden", ActionKind.RETRY, "system", None, id="workload-unreadable-ends-as-system"),
        pytest.param(make_workload().admitted().obj(), "", ActionKind.NONE, None,
                     "gang suspended; waiting for kueue to report why", id="s7-evicted-not-yet-true-waits"),
    ],
)
def test_s5_decision_table_with_resume_on(wl, unreadable, want_action, want_retry, want_reason):
    d = decide(RESUME, running(), observed(make_gang().suspended().obj(), wl, unreadable=unreadable), now=at(30))
    assert d.action.kind is want_action
    if want_retry:
        assert d.action.retry.value == want_retry
    if want_reason:
        assert d.state.phase is Phase.RUNNING and d.state.info.reason == want_reason
        assert d.state.attempt == 1


def test_s5_preempted_gang_waits_for_readmission_and_returns_to_running():
    s = running()
    preempted = decide(RESUME, s, observed(make_gang().suspended().obj(), make_workload().preemption().obj()), now=at(10))
    assert (preempted.state.phase, preempted.state.info.reason) == (Phase.RUNNING, WAITING)
    assert preempted.state.info.version == s.info.version + 1
    # W6/W7: quota released, then readmitted: Evicted flips to False/QuotaReserved before the JobSet resumes.
    readmitted_wl = make_workload().readmitted().obj()
    still = decide(RESUME, preempted.state, observed(make_gang().suspended().obj(), readmitted_wl), now=at(40))
    assert still.state.info.reason == WAITING and still.action.kind is ActionKind.NONE
    back = decide(RESUME, still.state, observed(make_gang().ready().obj(), readmitted_wl), now=at(45))
    assert (back.state.phase, back.state.info.reason, back.state.attempt) == (Phase.RUNNING, "running (restart attempt 0)", 1)
    assert back.state.info.version == preempted.state.info.version + 1
    assert back.state.eviction is None
    assert back.state.evictions[0].readmitted_at == at(45)
    assert back.state.waiting_for_readmission(now=at(100)) == timedelta(seconds=35)
    done = decide(RESUME, back.state, observed(make_gang().completed().obj(), readmitted_wl), now=at(50))
    assert done.state.phase is Phase.SUCCEEDED and done.state.attempt == 1
    assert done.state.user_retries_used == done.state.system_retries_used == 0


def test_s5_a_preempted_gang_waits_from_the_eviction_not_from_its_jobsets_suspension():
    evicted = decide(RESUME, running(), observed(make_gang().ready().obj(), make_workload().preemption().obj()),
                     now=at(10))
    assert (evicted.state.phase, evicted.state.info.reason, evicted.action.kind) == (Phase.RUNNING, WAITING,
                                                                                     ActionKind.NONE)
    assert evicted.state.waiting and evicted.state.eviction is not None
    suspended = decide(RESUME, evicted.state, observed(make_gang().suspended().obj(), make_workload().preemption().obj()),
                       now=at(200))
    assert suspended.state == evicted.state  # Kueue's suspension, minutes later at scale, changes nothing


def test_s5_only_preempted_waits():
    d = decide(RESUME, running(), observed(make_gang().suspended().obj(),
                                          make_workload().admitted().evicted(kueue.EVICTED_BY_PODS_READY_TIMEOUT, "t").obj()),
               now=at(5))
    assert d.action.kind is ActionKind.RETRY


def test_s5_with_the_setting_off_a_preemption_is_a_user_retry():
    d = decide(Policy(retries=1), running(), observed(make_gang().suspended().obj(), make_workload().preemption().obj()),
               now=at(5))
    assert d.action.kind is ActionKind.RETRY and d.action.retry.value == "user"
    assert d.action.code == "GangEvicted"
    assert d.state.attempt == 2


def test_s6_deactivating_a_waiting_gang_ends_the_attempt_as_a_system_retry():
    waiting = decide(RESUME, running(), observed(make_gang().suspended().obj(), make_workload().preemption().obj()),
                     now=at(10)).state
    deactivated = make_workload().admitted().evicted(kueue.DEACTIVATED, kueue.MSG_DEACTIVATED).inactive().obj()
    d = decide(RESUME, waiting, observed(make_gang().suspended().obj(), deactivated), now=at(20))
    assert d.action.kind is ActionKind.RETRY and d.action.retry.value == "system"
    assert (d.state.user_retries_used, d.state.system_retries_used, d.state.attempt) == (0, 1, 2)
    assert d.state.evictions[0].reason == "Preempted"  # the first one seen is kept in the history


@pytest.mark.parametrize("resume", [True, False], ids=["resume-on", "resume-off"])
def test_s7_suspended_before_evicted_waits_one_observation(resume):
    """The JobSet watch can deliver `suspend` before the Workload watch delivers `Evicted=True`."""
    policy = Policy(retries=1, resume_after_preemption=resume)
    first = decide(policy, running(), observed(make_gang().suspended().obj(), make_workload().admitted().obj()), now=at(10))
    assert first.action.kind is ActionKind.NONE
    assert first.state.phase is Phase.RUNNING
    assert first.wake_at == at(10) + policy.suspend_grace
    second = decide(policy, first.state, observed(make_gang().suspended().obj(), make_workload().preemption().obj()),
                    now=at(11))
    if resume:
        assert second.action.kind is ActionKind.NONE and second.state.info.reason == WAITING
    else:
        assert second.action.kind is ActionKind.RETRY and second.action.retry.value == "user"


def test_s7_an_unexplained_suspension_does_not_wait_forever():
    first = decide(RESUME, running(), observed(make_gang().suspended().obj(), make_workload().admitted().obj()), now=at(10))
    later = decide(RESUME, first.state, observed(make_gang().suspended().obj(), make_workload().admitted().obj()),
                   now=at(10) + RESUME.suspend_grace)
    assert later.action.kind is ActionKind.RETRY and later.action.retry.value == "system"
    assert "without an eviction reason" in later.action.message


def test_s8_max_runtime_counts_from_first_running_and_keeps_counting_while_waiting():
    policy = Policy(retries=0, resume_after_preemption=True, max_runtime=timedelta(minutes=10))
    s = decide(policy, state_in(Phase.INITIALIZING), observed(make_gang().ready().obj()), now=at(60)).state
    assert s.running_at == at(60)
    waiting = decide(policy, s, observed(make_gang().suspended().obj(), make_workload().preemption().obj()), now=at(120))
    assert waiting.wake_at == at(60 + 600)
    assert waiting.state.running_at == at(60)
    still = decide(policy, waiting.state, observed(make_gang().suspended().obj(), make_workload().preemption().obj()),
                   now=at(60 + 599))
    assert still.action.kind is ActionKind.NONE
    over = decide(policy, still.state, observed(make_gang().suspended().obj(), make_workload().preemption().obj()),
                  now=at(60 + 600))
    assert over.action.kind is ActionKind.FAIL
    assert over.state.attempts[0].code == "MaxRuntimeExceeded"
    assert "maxRuntime 10m" in over.state.message


def test_s8_max_runtime_does_not_count_before_running():
    policy = Policy(max_runtime=timedelta(seconds=5))
    d = decide(policy, state_in(Phase.WAITING_FOR_RESOURCES), observed(make_gang().suspended().obj()), now=at(3600))
    assert d.action.kind is ActionKind.NONE


def test_s8_max_runtime_restarts_with_each_attempt():
    policy = Policy(retries=1, max_runtime=timedelta(seconds=100))
    s = decide(policy, state_in(Phase.INITIALIZING), observed(make_gang().ready().obj()), now=at(0)).state
    retried = decide(policy, s, observed(make_gang().ready().obj()), now=at(100)).state
    assert retried.attempt == 2 and retried.running_at is None


@pytest.mark.parametrize(
    ("resume", "want_retry"), [(True, "system"), (False, "user")], ids=["resume-on", "resume-off"])
def test_b4_jobset_failed_during_eviction_window_is_not_an_application_failure(resume, want_retry):
    policy = Policy(retries=1, resume_after_preemption=resume)
    evicting = decide(policy, running(), observed(make_gang().ready().obj(), make_workload().preemption().obj()),
                      now=at(10)).state
    d = decide(policy, evicting, observed(make_gang().failed().obj(), make_workload().preemption().obj()), now=at(11))
    assert d.action.kind is ActionKind.RETRY
    assert d.action.retry.value == want_retry
    assert d.action.code == "GangEvicted"
    assert "failed while it was being evicted" in d.action.message


def test_b4_worker_failures_inside_the_eviction_window_do_not_end_the_attempt():
    evicting = decide(RESUME, running(), observed(make_gang().ready().obj(), make_workload().preemption().obj()),
                      now=at(10)).state
    d = decide(RESUME, evicting, observed(make_gang().ready().worker_failed().obj(), make_workload().preemption().obj()),
               now=at(11))
    assert d.action.kind is ActionKind.NONE


def test_b5_a_gang_preempted_before_it_was_up_counts_its_eviction_once_when_the_workload_lags():
    """Kueue readmits the Workload, then unsuspends the JobSet; the controller's two streams are not
    ordered, so the JobSet running again can arrive while the Workload still reads Preempted. That is
    the same eviction, not a new one: it closes when the Workload says readmitted, and counts once."""
    s = state_in(Phase.INITIALIZING, "workers starting")
    preempted_wl = make_workload().preemption().obj()
    evicted = decide(RESUME, s, observed(make_gang().suspended().obj(), preempted_wl), now=at(10)).state
    assert len(evicted.evictions) == 1 and evicted.eviction is not None
    lagging = decide(RESUME, evicted, observed(make_gang().obj(), preempted_wl), now=at(40)).state
    again = decide(RESUME, lagging, observed(make_gang().obj(), preempted_wl), now=at(41)).state
    back = decide(RESUME, again, observed(make_gang().obj(), make_workload().readmitted().obj()), now=at(42)).state
    assert len(back.evictions) == 1, back.evictions
    assert back.eviction is None and back.evictions[0].readmitted_at == at(42)
