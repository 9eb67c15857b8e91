"""Node loss is never charged (failurePolicy.restartOnDisruption): a worker lost to a drain, a spot
reclaim or an eviction restarts the gang inside the attempt, charged to neither maxRestarts nor the
user budget, and more than maxSystemRetries such restarts in a row fail the task."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangrun._core.engine import ActionKind, decide
from gangrun._core.observation import NOT_FOUND, Gang, observed
from gangrun._core.phases import Phase
from gangrun._core.policy import Policy
from gangrun._core.state import TaskState
from gangrun._core.timeline import EventType, transition_events
from tests.harness.builders import T0, at, make_gang

LOST = ("worker lost to node disruption (EvictionByEvictionAPI): Eviction API: evicting "
        "(pod train-1-workers-0-1-abcde); restarting the gang (not counted)")

# The rounds of one attempt as a JobSet with gangrun's disruption rule shows them (maxRestarts 0).
UP = make_gang().ready().obj()
PENDING = make_gang().ready().disrupted().worker_failed("pod train-1-workers-0-1-abcde exited with code 143").obj()
RESTARTING_1 = make_gang().disrupted(restart_attempt=0).restarting_for_disruption().obj()
UP_1 = replace(make_gang().restarts(1, towards_max=0).ready().obj(), disruption=RESTARTING_1.disruption)
PENDING_1 = make_gang().restarts(1, towards_max=0).disrupted().worker_failed().obj()
RESTARTING_2 = replace(RESTARTING_1, restarts=2)
UP_2 = replace(UP_1, restarts=2)
RESTARTING_3 = replace(RESTARTING_1, restarts=3)
UNSEEN = replace(make_gang().restarts(1, towards_max=0).restarting().obj(), disruption=None)


def drive(policy: Policy, *gangs: Gang | None) -> tuple[TaskState, list[ActionKind]]:
    """Create the gang, then feed each observation one second apart."""
    d = decide(policy, TaskState.new(now=T0), NOT_FOUND, now=at(0))
    state, kinds = d.state, []
    for i, gang in enumerate(gangs, start=1):
        d = decide(policy, state, observed(gang), now=at(i))
        state = d.state
        kinds.append(d.action.kind)
    return state, kinds


def test_a_pod_lost_to_a_node_disruption_restarts_the_gang_in_the_same_attempt_with_no_budget_spent() -> None:
    policy = Policy(max_restarts=0, retries=0)  # any counted failure would end the task
    state, kinds = drive(policy, UP, PENDING)
    assert state.phase is Phase.RUNNING and state.info.reason == LOST  # told why, and that it costs nothing
    state, kinds = drive(policy, UP, PENDING, RESTARTING_1, UP_1)
    assert set(kinds) == {ActionKind.NONE}
    assert (state.attempt, state.user_retries_used, state.system_retries_used) == (1, 0, 0)
    assert state.info.reason == "running (restart attempt 1)" and state.restart_attempt == 1
    assert [(d.attempt, d.restart_attempt, d.reason) for d in state.disruptions] == [(1, 1, "EvictionByEvictionAPI")]
    assert state.disruptions_in_a_row == 0  # the gang came back up


@pytest.mark.parametrize("max_system_retries,gangs,want_kinds,failed", [
    pytest.param(1, (UP, RESTARTING_1, RESTARTING_2), [ActionKind.NONE, ActionKind.NONE, ActionKind.FAIL], True,
                 id="second-in-a-row-past-one"),
    pytest.param(0, (UP, RESTARTING_1), [ActionKind.NONE, ActionKind.FAIL], True, id="zero-allows-none"),
    pytest.param(2, (UP, RESTARTING_1, RESTARTING_2), [ActionKind.NONE] * 3, False, id="two-allowed"),
    pytest.param(1, (UP, RESTARTING_1, UP_1, RESTARTING_2, UP_2, RESTARTING_3), [ActionKind.NONE] * 6, False,
                 id="the-gang-up-in-between-resets-the-row"),
    pytest.param(1, (UP, RESTARTING_2), [ActionKind.NONE, ActionKind.FAIL], True, id="two-seen-at-once"),
])
def test_disruptions_in_a_row_are_bounded_by_max_system_retries(max_system_retries, gangs, want_kinds, failed) -> None:
    state, kinds = drive(Policy(max_system_retries=max_system_retries), *gangs)
    assert kinds == want_kinds
    assert (state.phase is Phase.FAILED) is failed
    if failed:
        assert state.code == "MaxSystemFailuresExceeded"
        n = max_system_retries + 1
        assert state.message.startswith("worker lost to node disruption (EvictionByEvictionAPI): Eviction API: evicting")
        assert state.message.endswith(f"{n} node disruptions in a row exceed maxSystemRetries ({max_system_retries})")
        assert state.attempts[-1].code == "WorkerLostToNodeDisruption"
        assert (state.user_retries_used, state.system_retries_used) == (0, 0)


def test_without_restart_on_disruption_a_disrupted_worker_is_a_worker_failure() -> None:
    state, kinds = drive(Policy(restart_on_disruption=False, retries=1), UP, PENDING)
    assert kinds[-1] is ActionKind.RETRY and state.user_retries_used == 1
    assert state.attempts[0].code == "WorkerFailed"


def test_a_disruption_before_the_gang_ever_ran_is_a_hold_not_a_failure() -> None:
    starting = make_gang().scheduled(2).disrupted().worker_failed().obj()
    state, kinds = drive(Policy(), make_gang().scheduled(1).obj(), starting)
    assert kinds == [ActionKind.NONE, ActionKind.NONE]
    assert state.phase is Phase.WAITING_FOR_RESOURCES and state.info.reason == LOST


def test_a_restart_whose_disrupted_pod_was_never_seen_still_says_why() -> None:
    state, _ = drive(Policy(), UP, UNSEEN)
    assert state.disruptions[-1].reason == "DisruptionTarget"
    assert state.info.reason == ("worker lost to node disruption (DisruptionTarget): a worker was lost to a node "
                                 "disruption; restarting the gang (not counted)")


def test_the_counted_restarts_still_bound_real_worker_failures() -> None:
    # One disruption (uncounted), then a worker of the restarted round fails: maxRestarts 0 applies to it.
    state, kinds = drive(Policy(max_restarts=0), UP, RESTARTING_1, UP_1,
                         replace(UP_1, jobs_failed=1, first_failure="pod x exited with code 1"))
    assert kinds[-1] is ActionKind.FAIL and state.attempts[0].code == "WorkerFailed"


def test_the_timeline_says_once_that_a_worker_was_lost_and_it_was_not_counted() -> None:
    policy = Policy()
    state, _ = drive(policy, UP)
    events = []
    for i, gang in enumerate((RESTARTING_1, RESTARTING_1, UP_1), start=10):
        d = decide(policy, state, observed(gang), now=at(i))
        events += transition_events(state, d.state, d.action, now=at(i))
        state = d.state
    lost = [e for e in events if e.type is EventType.DISRUPTED]
    assert len(lost) == 1 and lost[0].message == LOST and lost[0].data["reason"] == "EvictionByEvictionAPI"
    assert [e.type for e in events if e.type is EventType.RESTARTED] == [EventType.RESTARTED]


def test_disruptions_survive_storage() -> None:
    state, _ = drive(Policy(max_system_retries=5), UP, RESTARTING_1)
    back = TaskState.from_storage(state.for_storage())
    assert back == state and back.disruptions_in_a_row == 1 and back.disruption_restarts == 1


def test_a_new_attempt_starts_with_no_disruptions_in_a_row() -> None:
    state, _ = drive(Policy(max_system_retries=5), UP, RESTARTING_1)
    nxt = state.with_next_attempt(at=at(99))
    assert (nxt.disruption_restarts, nxt.disruptions_in_a_row, len(nxt.disruptions)) == (0, 0, 1)
