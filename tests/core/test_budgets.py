"""S9: separate user and system retry budgets, kept by gangrun; the final failure codes."""

from __future__ import annotations

import pytest

from gangrun._core import kueue
from gangrun._core.engine import ActionKind, cancel, decide
from gangrun._core.observation import NOT_FOUND, observed
from gangrun._core.phases import Phase
from gangrun._core.policy import Policy
from gangrun._core.state import TaskState
from tests.harness.builders import T0, at, make_gang, make_workload

NODE_FAILURE = make_workload().admitted().evicted(kueue.EVICTED_DUE_TO_NODE_FAILURES, "node n1 lost").obj()


def run_attempt(policy, state, t):
    """Drive one attempt from creation to Running."""
    state = decide(policy, state, NOT_FOUND, now=at(t)).state
    return decide(policy, state, observed(make_gang().ready().obj()), now=at(t + 1)).state


def evicted(policy, state, wl, t):
    return decide(policy, state, observed(make_gang().suspended().obj(), wl), now=at(t))


def test_s9_system_retry_does_not_use_a_user_retry():
    policy = Policy(retries=1)
    s = run_attempt(policy, TaskState.new(now=T0), 0)
    d = evicted(policy, s, NODE_FAILURE, 10)
    assert (d.state.user_retries_used, d.state.system_retries_used) == (0, 1)
    assert d.state.attempt == 2


def test_s9_max_system_retries_bounds_system_retries_in_a_row():
    policy = Policy(retries=5, max_system_retries=2)
    s = TaskState.new(now=T0)
    outcomes = []
    for i in range(3):
        # The gang never gets up: each attempt is lost to the infrastructure before it runs.
        s = decide(policy, s, NOT_FOUND, now=at(i * 10)).state
        s = decide(policy, s, observed(make_gang().suspended().obj()), now=at(i * 10 + 1)).state
        d = decide(policy, s, NOT_FOUND, now=at(i * 10 + 2))
        outcomes.append(d.action.kind)
        s = d.state
    assert outcomes == [ActionKind.RETRY, ActionKind.RETRY, ActionKind.FAIL]
    assert s.phase is Phase.FAILED and s.code == "MaxSystemFailuresExceeded"
    assert "3 system failures in a row exceed maxSystemRetries (2)" in s.message
    assert s.user_retries_used == 0


def test_s9_a_gang_that_ran_resets_the_system_failures_in_a_row():
    policy = Policy(max_system_retries=1)
    s = run_attempt(policy, TaskState.new(now=T0), 0)
    s = evicted(policy, s, NODE_FAILURE, 10).state
    assert s.consecutive_system_failures == 1
    s = run_attempt(policy, s, 20)
    assert s.consecutive_system_failures == 0
    d = evicted(policy, s, NODE_FAILURE, 30)
    assert d.action.kind is ActionKind.RETRY and d.state.system_retries_used == 2


@pytest.mark.parametrize(("retries", "failures", "want"), [
    pytest.param(0, 1, Phase.FAILED, id="no-retries-first-failure-fails"),
    pytest.param(2, 2, Phase.QUEUED, id="two-retries-two-failures-goes-on"),
    pytest.param(2, 3, Phase.FAILED, id="two-retries-three-failures-fails"),
])
def test_s9_user_retries_allow_retries_plus_one_attempts(retries, failures, want):
    policy = Policy(retries=retries)
    s = TaskState.new(now=T0)
    for i in range(failures):
        s = run_attempt(policy, s, i * 10)
        s = decide(policy, s, observed(make_gang().failed().obj()), now=at(i * 10 + 5)).state
    assert s.phase is want
    if want is Phase.FAILED:
        assert s.code == "MaxRetriesExceeded"
        assert len(s.attempts) == retries + 1


def test_s9_attempt_history_records_each_outcome():
    policy = Policy(retries=1)
    s = run_attempt(policy, TaskState.new(now=T0), 0)
    s = evicted(policy, s, NODE_FAILURE, 10).state
    s = run_attempt(policy, s, 20)
    s = decide(policy, s, observed(make_gang().failed().obj()), now=at(30)).state
    s = run_attempt(policy, s, 40)
    s = decide(policy, s, observed(make_gang().completed().obj()), now=at(50)).state
    assert [(a.number, a.outcome.value, a.code) for a in s.attempts] == [
        (1, "SystemRetry", "GangEvicted"), (2, "UserRetry", "FailedJobs"), (3, "Succeeded", None)]
    assert s.phase is Phase.SUCCEEDED


def test_cancel_aborts_from_any_live_phase_and_is_idempotent():
    s = run_attempt(Policy(), TaskState.new(now=T0), 0)
    d = cancel(s, now=at(5))
    assert d.state.phase is Phase.ABORTED and d.action.kind is ActionKind.ABORT
    assert cancel(d.state, now=at(6)).action.kind is ActionKind.NONE
    assert decide(Policy(), d.state, NOT_FOUND, now=at(7)).action.kind is ActionKind.NONE
