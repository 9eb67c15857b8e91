"""B5: the event timeline derived from engine transitions, and the task view both backends print."""

from __future__ import annotations

from gangrun._core.engine import cancel, decide
from gangrun._core.observation import NOT_FOUND, observed
from gangrun._core.policy import Policy
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType, transition_events
from gangrun._core.view import state_view
from tests.harness.builders import T0, at, make_gang, make_workload

RESUME = Policy(retries=0, resume_after_preemption=True)


def replay(policy, steps):
    state, timeline = TaskState.new(now=T0), []
    for t, obs in steps:
        d = decide(policy, state, obs, now=at(t))
        timeline += transition_events(state, d.state, d.action, now=at(t))
        state = d.state
    return state, timeline


def test_b5_the_preemption_story_reads_as_one_timeline():
    state, timeline = replay(RESUME, [
        (0, NOT_FOUND),
        (1, observed(make_gang().suspended().obj())),
        (2, observed(make_gang().ready(1).obj(), make_workload().admitted().obj())),
        (3, observed(make_gang().ready().obj(), make_workload().admitted().obj())),
        (10, observed(make_gang().suspended().obj(), make_workload().preemption().obj())),
        (40, observed(make_gang().ready().obj(), make_workload().readmitted().obj())),
        (50, observed(make_gang().completed().obj(), make_workload().readmitted().obj())),
    ])
    assert [e.type for e in timeline] == [
        EventType.GANG_CREATED, EventType.PHASE, EventType.PHASE, EventType.GANG_STARTED, EventType.PREEMPTED,
        EventType.WAITING, EventType.READMITTED, EventType.SUCCEEDED]
    readmitted = next(e for e in timeline if e.type is EventType.READMITTED)
    assert readmitted.data["waitedSeconds"] == 30
    assert all(e.attempt == 1 for e in timeline)
    assert Event.from_json(readmitted.for_json()) == readmitted


def test_b5_an_attempt_that_ends_says_why_and_what_it_cost():
    _, timeline = replay(Policy(retries=1), [
        (0, NOT_FOUND),
        (1, observed(make_gang().ready().obj(), make_workload().admitted().obj())),
        (5, observed(make_gang().suspended().obj(), make_workload().preemption().obj())),
    ])
    ended = timeline[-1]
    assert ended.type is EventType.ATTEMPT_ENDED
    assert ended.data == {"outcome": "UserRetry", "code": "GangEvicted"}
    assert "this uses the task's last retry" in ended.message


def test_task_view_has_the_interface_fields():
    state, _ = replay(RESUME, [
        (0, NOT_FOUND),
        (3, observed(make_gang().ready().obj(), make_workload().admitted().obj())),
        (10, observed(make_gang().suspended().obj(), make_workload().preemption().obj())),
    ])
    view = state_view("train", state, now=at(20))
    assert view["name"] == "train" and view["phase"] == "Running" and view["attempt"] == 1
    assert view["reason"].endswith("; waiting for re-admission")
    assert (view["userRetriesUsed"], view["systemRetriesUsed"], view["restartAttempt"]) == (0, 0, 0)
    assert view["attempts"][0]["number"] == 1 and view["attempts"][0]["endedAt"] is None
    assert view["evictionsByCause"] == {"Preempted": 1}
    assert view["waitingForReadmissionSeconds"] == 10
    assert view["eviction"]["detail"] == "InClusterQueue"


def test_cancel_is_on_the_timeline():
    state, _ = replay(Policy(), [(0, NOT_FOUND)])
    d = cancel(state, now=at(1))
    events = transition_events(state, d.state, d.action, now=at(1))
    assert [e.type for e in events] == [EventType.ABORTED]


def test_b5_an_eviction_that_ends_the_attempt_is_on_the_timeline_too():
    _, timeline = replay(Policy(retries=1), [
        (0, NOT_FOUND),
        (1, observed(make_gang().ready().obj(), make_workload().admitted().obj())),
        (5, observed(make_gang().suspended().obj(), make_workload().preemption().obj())),
    ])
    assert [e.type for e in timeline[-2:]] == [EventType.PREEMPTED, EventType.ATTEMPT_ENDED]


def test_waiting_for_readmission_is_read_from_the_state_not_from_the_reasons_wording() -> None:
    from dataclasses import replace

    from gangrun._core.engine import NOTHING
    from gangrun._core.phases import Phase, PhaseInfo
    from gangrun._core.state import TaskState

    running = TaskState.new(now=T0)
    running = replace(running, started=True, info=PhaseInfo(phase=Phase.RUNNING, version=0, reason="running"))
    worded = running.with_info(running.info.advance(Phase.RUNNING, "user text: waiting for re-admission"))
    assert [e.type for e in transition_events(running, worded, NOTHING, now=T0)] == [EventType.PHASE]
    waiting = worded.with_waiting()
    assert [e.type for e in transition_events(worded, waiting.with_info(waiting.info.advance(Phase.RUNNING, "x")),
                                              NOTHING, now=T0)] == [EventType.WAITING]
