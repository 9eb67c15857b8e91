"""B3, S5, S6: the lifecycle step both backends take (`gangrun._core.lifecycle`): the decisions of one
reconcile, what they ask of the gang, and the stop notice's cause, written once for both."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gangrun._core import kueue, lifecycle, stop_causes
from gangrun._core.accounting import Accounting
from gangrun._core.engine import ActionKind
from gangrun._core.observation import NOT_FOUND, Observation, observed
from gangrun._core.phases import Phase
from gangrun._core.policy import MAX_RETRIES_EXCEEDED
from gangrun._core.spec import TaskSpec, parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType
from tests.harness.builders import PREEMPTION_MESSAGE, at, make_gang, make_workload, state_in

RUNNING = state_in(Phase.RUNNING, "running (restart attempt 0)", started=True)
UP = make_gang().ready().obj()
SUSPENDED = make_gang().suspended().obj()
FAILED_WORKER = "worker rank 1 (node 1) exited with code 3"


def spec(**fields: object) -> TaskSpec:
    return parse_manifest({"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask",
                           "metadata": {"name": "train"},
                           "spec": {"nodes": 2, "command": ["python", "train.py"], "terminationGracePeriod": "20s",
                                    **fields}})


def test_s5_a_retry_and_the_next_attempt_s_create_are_one_step() -> None:
    evicted = observed(SUSPENDED, make_workload().preemption().obj())
    s = lifecycle.step(spec(retries=2), RUNNING, evicted, now=at(60))
    assert [p.decision.action.kind for p in s.parts] == [ActionKind.RETRY, ActionKind.CREATE_GANG]
    delete, create = (p.gang for p in s.parts)
    assert isinstance(delete, lifecycle.DeleteGang) and delete.attempt == 1
    assert delete.notice.cause == kueue.EVICTED_BY_PREEMPTION, "Kueue's reason, not the error code"
    assert create == lifecycle.CreateGang(2) and s.state.attempt == 2 and s.changed
    assert any(e.type is EventType.GANG_CREATED for e in s.parts[1].events)


def test_s6_a_preempted_gang_that_resumes_keeps_its_attempt_and_is_told_kueue_s_reason() -> None:
    evicted = observed(UP, make_workload().preemption().obj())
    s = lifecycle.step(spec(failurePolicy={"resumeAfterPreemption": True}), RUNNING, evicted, now=at(60))
    assert [p.gang for p in s.parts] == [None] and s.state.attempt == 1
    assert s.notice is not None and s.notice.cause == kueue.EVICTED_BY_PREEMPTION
    assert s.notice.message == PREEMPTION_MESSAGE
    assert s.notice.deadline == s.state.eviction.at + timedelta(seconds=20)  # type: ignore[union-attr]


def test_a_cancel_stops_the_gang_with_cause_aborted_whatever_was_observed() -> None:
    s = lifecycle.step(spec(), RUNNING, observed(UP), now=at(5), cancelled=True)
    (part,) = s.parts
    assert part.decision.action.kind is ActionKind.ABORT and s.state.phase is Phase.ABORTED
    assert isinstance(part.gang, lifecycle.DeleteGang)
    assert part.gang.notice == lifecycle.Notice(stop_causes.ABORTED, lifecycle.CANCELLED, at(25))
    assert s.notice == part.gang.notice


def test_a_cancel_of_an_ended_task_does_nothing() -> None:
    done = state_in(Phase.SUCCEEDED)
    s = lifecycle.step(spec(), done, Observation(), now=at(5), cancelled=True)
    assert not s.changed and [p.gang for p in s.parts] == [None] and s.notice is None


@pytest.mark.parametrize(("gang", "policy", "cause"), [
    pytest.param(make_gang().ready().worker_failed(FAILED_WORKER).obj(), {"failurePolicy": {"maxRestarts": 1}},
                 stop_causes.RESTART, id="a-worker-failed-with-a-restart-left"),
    pytest.param(make_gang().restarts(1).ready().worker_failed(FAILED_WORKER).obj(),
                 {"failurePolicy": {"maxRestarts": 1}}, MAX_RETRIES_EXCEEDED, id="no-restart-left-ends-the-attempt"),
    pytest.param(make_gang().ready().disrupted().obj(), {}, stop_causes.NODE_DISRUPTION,
                 id="a-worker-lost-with-its-node"),
    pytest.param(make_gang().ready().obj(), {}, None, id="a-healthy-gang-is-told-nothing"),
])
def test_b3_the_peers_of_a_stopping_gang_are_told_why(gang, policy, cause) -> None:
    s = lifecycle.step(spec(**policy), RUNNING, observed(gang), now=at(10))
    assert (s.notice.cause if s.notice is not None else None) == cause
    if cause is stop_causes.RESTART:
        assert FAILED_WORKER in s.notice.message  # type: ignore[union-attr]


def test_an_attempt_that_ends_with_no_error_code_says_attempt_ended() -> None:
    first = lifecycle.step(spec(), TaskState.new(now=at(0)), NOT_FOUND, now=at(0))
    assert first.parts[0].gang == lifecycle.CreateGang(1)
    failed = make_gang().failed().obj()
    s = lifecycle.step(spec(retries=0), RUNNING, observed(failed), now=at(10))
    (part,) = s.parts
    assert isinstance(part.gang, lifecycle.DeleteGang) and part.decision.action.kind is ActionKind.FAIL
    assert part.gang.notice.cause == (part.decision.action.code or stop_causes.ATTEMPT_ENDED)


def test_b5_the_fold_warns_once_when_a_final_save_outgrows_the_grace_period() -> None:
    def final_save(seconds: float, t: float) -> Event:
        return Event(time=at(t), type=EventType.CHECKPOINT, attempt=1, message="",
                     data={"step": 1, "takenAt": at(t - seconds).isoformat(), "committedAt": at(t).isoformat(),
                           "saveSeconds": seconds, "final": True})

    ledger, warnings = lifecycle.fold(Accounting(), [final_save(1.0, 10)], grace_seconds=5.0)
    assert warnings == [] and ledger.final_saves == (1.0,)
    ledger, warnings = lifecycle.fold(ledger, [final_save(4.5, 20), final_save(4.6, 30)], grace_seconds=5.0)
    assert [w.type for w in warnings] == [EventType.GRACE_TOO_SHORT], "said once, not at every save"


@pytest.mark.parametrize(("phase", "attempts", "already", "want"), [
    (Phase.RUNNING, [2], [], []),  # the current attempt's gang runs on
    (Phase.RUNNING, [1, 2], [], [1]),  # an ended attempt's gang left behind (a crash before its delete)
    (Phase.QUEUED, [1, 1, 2], [], [1]),  # each attempt once, however many gangs it has
    (Phase.RUNNING, [3, 1], [], [3, 1]),  # in the order given; a gang of no attempt stored is garbage too
    (Phase.RUNNING, [1, 2], [1], []),  # being deleted already: not asked again
    (Phase.SUCCEEDED, [2], [], []),  # a succeeded task's gang stays for its logs
    (Phase.FAILED, [1, 2], [], [1, 2]),  # a failed task keeps no gang
    (Phase.ABORTED, [2], [], [2]),  # nor a cancelled one
    (Phase.ABORTED, [2], [2], []),
    (Phase.RUNNING, [], [], []),
])
def test_which_gangs_are_garbage(phase: Phase, attempts: list[int], already: list[int], want: list[int]) -> None:
    state = state_in(phase, attempt=2)
    assert lifecycle.garbage(state, attempts, already=already) == want
