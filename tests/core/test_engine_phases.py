"""S2/S3: every row of the phase table, one decide() per row."""

from __future__ import annotations

import pytest

from gangrun._core import jobset, kueue
from gangrun._core.engine import ActionKind, decide
from gangrun._core.observation import NOT_FOUND, Observation, observed
from gangrun._core.phases import Phase
from gangrun._core.policy import Policy, RetryKind
from gangrun._core.state import TaskState
from tests.harness.builders import T0, at, make_gang, make_workload, state_in

P = Policy()


@pytest.mark.parametrize(
    ("state", "obs", "want_phase", "want_reason", "want_action"),
    [
        pytest.param(TaskState.new(now=T0), NOT_FOUND, Phase.QUEUED, "task submitted", ActionKind.CREATE_GANG,
                     id="just-created-is-queued-and-creates-the-gang"),
        pytest.param(state_in(Phase.QUEUED), observed(make_gang().suspended().obj()),
                     Phase.WAITING_FOR_RESOURCES, "waiting for gang admission", ActionKind.NONE,
                     id="suspended-never-started-first-poll-waits-for-admission"),
        pytest.param(state_in(Phase.QUEUED), observed(make_gang().suspended("jobset is suspended").obj()),
                     Phase.WAITING_FOR_RESOURCES, "waiting for gang admission: jobset is suspended", ActionKind.NONE,
                     id="suspended-with-gate-message-shows-it"),
        pytest.param(state_in(Phase.QUEUED),
                     observed(make_gang().suspended("jobset is suspended").obj(),
                              make_workload().quota("False", "Pending", "couldn't assign flavors: quota").obj()),
                     Phase.WAITING_FOR_RESOURCES, "waiting for gang admission: couldn't assign flavors: quota",
                     ActionKind.NONE, id="kueues-pending-message-says-why-it-waits"),
        pytest.param(state_in(Phase.INITIALIZING, "1 of 2 workers ready"), observed(make_gang().suspended().obj()),
                     Phase.INITIALIZING,
                     "released by admission gate before all workers were ready; waiting for re-admission",
                     ActionKind.NONE, id="s3-suspended-after-initializing-holds-initializing"),
        pytest.param(state_in(Phase.WAITING_FOR_RESOURCES), observed(make_gang().scheduled(1, "Unschedulable: 0/3 nodes are available").obj()),
                     Phase.WAITING_FOR_RESOURCES, "1 of 2 workers scheduled (Unschedulable: 0/3 nodes are available)",
                     ActionKind.NONE, id="fewer-workers-scheduled-than-needed"),
        pytest.param(state_in(Phase.INITIALIZING, "1 of 2 workers ready"), observed(make_gang().scheduled(1).obj()),
                     Phase.INITIALIZING, "1 of 2 workers scheduled", ActionKind.NONE,
                     id="fewer-scheduled-after-initializing-keeps-initializing"),
        pytest.param(state_in(Phase.WAITING_FOR_RESOURCES), observed(make_gang().ready(1).obj()),
                     Phase.INITIALIZING, "1 of 2 workers ready", ActionKind.NONE,
                     id="all-scheduled-not-all-ready-is-initializing"),
        pytest.param(state_in(Phase.INITIALIZING), observed(make_gang().ready().obj()),
                     Phase.RUNNING, "running (restart attempt 0)", ActionKind.NONE, id="started-is-running"),
        pytest.param(state_in(Phase.RUNNING, started=True), observed(make_gang().ready().restarts(1).restarting().obj()),
                     Phase.RUNNING, "restart in progress (attempt 1)", ActionKind.NONE,
                     id="restarting-condition-is-restart-in-progress"),
        pytest.param(state_in(Phase.RUNNING, started=True), observed(make_gang().ready().restarts(2).obj()),
                     Phase.RUNNING, "running (restart attempt 2)", ActionKind.NONE,
                     id="running-names-the-restart-attempt"),
        pytest.param(state_in(Phase.INITIALIZING), observed(make_gang().scheduled(1).pending_failure(
                         "pod train-workers-0-1: ErrImagePull: image not found").obj()),
                     Phase.FAILED, None, ActionKind.FAIL, id="fatal-pending-worker-fails-with-no-retry-left"),
        pytest.param(state_in(Phase.RUNNING, started=True), observed(make_gang().ready().worker_failed().obj()),
                     Phase.FAILED, None, ActionKind.FAIL, id="worker-failed-with-restart-budget-exhausted"),
        pytest.param(state_in(Phase.RUNNING, started=True), observed(make_gang().completed().obj()),
                     Phase.SUCCEEDED, "all workers succeeded", ActionKind.SUCCEED, id="jobset-completed-succeeds"),
        pytest.param(state_in(Phase.RUNNING, started=True), observed(make_gang().failed(jobset.REACHED_MAX_RESTARTS).obj()),
                     Phase.FAILED, None, ActionKind.FAIL, id="jobset-failed-is-a-user-failure"),
        pytest.param(state_in(Phase.RUNNING, started=True), NOT_FOUND, Phase.QUEUED, None, ActionKind.RETRY,
                     id="jobset-missing-is-a-system-retry"),
        pytest.param(state_in(Phase.RUNNING, started=True), observed(make_gang().ready().deleting().obj()),
                     Phase.QUEUED, None, ActionKind.RETRY, id="jobset-deleted-while-running-is-a-system-retry"),
    ],
)
def test_s2_phase_table(state, obs, want_phase, want_reason, want_action):
    d = decide(P, state, obs, now=at(10))
    assert d.state.phase is want_phase
    if want_reason is not None:
        assert d.state.info.reason == want_reason
    assert d.action.kind is want_action


@pytest.mark.parametrize(("max_restarts", "used", "want"), [
    pytest.param(0, 0, "WorkerFailed: pod train-workers-0-1: exit code 3 (no restarts allowed: maxRestarts is 0)",
                 id="max-restarts-0-says-no-restarts-are-allowed"),
    pytest.param(2, 2, "WorkerFailed: pod train-workers-0-1: exit code 3 (after 2 of 2 restarts)",
                 id="restarts-used-up-says-how-many"),
])
def test_a_gang_failed_for_reaching_max_restarts_says_the_worker_failed_not_jobsets_reason(
        max_restarts: int, used: int, want: str) -> None:
    gang = make_gang().ready().restarts(used).worker_failed().failed(
        jobset.REACHED_MAX_RESTARTS, jobset.reached_max_restarts_message("train-workers-0")).obj()
    d = decide(Policy(max_restarts=max_restarts), state_in(Phase.RUNNING, started=True), observed(gang), now=at(10))
    assert d.state.phase is Phase.FAILED and d.action.kind is ActionKind.FAIL
    assert d.state.message.startswith(want), d.state.message
    assert "ReachedMaxRestarts" not in d.state.message and "max number of restarts" not in d.state.message


def test_s2_queue_not_found_fails_permanently_before_start():
    wl = make_workload("team-a").quota("False", kueue.INADMISSIBLE, kueue.local_queue_missing_message("team-a")).obj()
    d = decide(Policy(retries=3), state_in(Phase.WAITING_FOR_RESOURCES), observed(make_gang().suspended().obj(), wl),
               now=at(1))
    assert d.state.phase is Phase.FAILED
    assert d.state.code == "KueueLocalQueueNotFound"
    assert '"team-a" does not exist' in d.state.message
    assert d.action.kind is ActionKind.FAIL


@pytest.mark.parametrize(
    "wl",
    [
        pytest.param(make_workload("team-a").quota("False", kueue.INADMISSIBLE, "LocalQueue team-a is inactive").obj(),
                     id="queue-inactive"),
        pytest.param(make_workload("team-a").quota("False", kueue.INADMISSIBLE, "LocalQueue team-b doesn't exist").obj(),
                     id="another-queue-missing"),
        pytest.param(make_workload().quota("False", kueue.PENDING, "waiting for quota").obj(), id="quota-pending"),
        pytest.param(None, id="no-workload-yet"),
        pytest.param(make_workload("").quota("False", kueue.INADMISSIBLE, "LocalQueue  doesn't exist").obj(),
                     id="no-queue-label"),
    ],
)
def test_s3_held_gang_keeps_waiting(wl):
    d = decide(P, state_in(Phase.WAITING_FOR_RESOURCES), observed(make_gang().suspended().obj(), wl), now=at(1))
    assert d.state.phase is Phase.WAITING_FOR_RESOURCES
    assert d.state.info.reason.startswith("waiting for gang admission")
    assert d.action.kind is ActionKind.NONE


@pytest.mark.parametrize("reason", [kueue.EVICTED_BY_PODS_READY_TIMEOUT, kueue.DEACTIVATED, kueue.EVICTED_BY_PREEMPTION])
def test_s3_eviction_before_start_is_a_hold_not_a_failure(reason):
    wl = make_workload().admitted().evicted(reason, "taken back").obj()
    d = decide(Policy(retries=0), state_in(Phase.INITIALIZING, "1 of 2 workers ready"),
               observed(make_gang().suspended().obj(), wl), now=at(1))
    assert d.state.phase is Phase.INITIALIZING
    assert d.action.kind is ActionKind.NONE
    assert d.state.user_retries_used == d.state.system_retries_used == 0


def test_s2_phase_version_bumps_on_a_new_reason_and_not_on_the_same_one():
    s = state_in(Phase.INITIALIZING, "1 of 2 workers ready", version=4)
    same = decide(P, s, observed(make_gang().ready(1).obj()), now=at(1))
    assert same.state.info.version == 4
    other = decide(P, s, observed(make_gang().scheduled(1).obj()), now=at(1))
    assert (other.state.phase, other.state.info.version) == (Phase.INITIALIZING, 5)
    running = decide(P, s, observed(make_gang().ready().obj()), now=at(1))
    assert (running.state.phase, running.state.info.version) == (Phase.RUNNING, 0)


def test_s2_started_is_sticky_within_the_attempt():
    s = decide(P, state_in(Phase.INITIALIZING), observed(make_gang().ready().obj()), now=at(1)).state
    assert s.started
    # The JobSet's own counters drop back (pods recreated on readmission) but the attempt stays started.
    again = decide(P, s, observed(make_gang().scheduled(1).obj()), now=at(2))
    assert again.state.phase is Phase.RUNNING
    assert again.state.info.reason == "running (restart attempt 0)"


def test_s2_the_phase_never_moves_backwards_within_an_attempt():
    s = state_in(Phase.INITIALIZING, "1 of 2 workers ready")
    d = decide(P, s, observed(make_gang().scheduled(0).obj()), now=at(1))
    assert d.state.phase is Phase.INITIALIZING


def test_s9_a_new_attempt_gets_a_fresh_gang():
    s = state_in(Phase.RUNNING, started=True)
    retry = decide(Policy(retries=1), s, observed(make_gang().failed().obj()), now=at(5))
    assert retry.action.kind is ActionKind.RETRY and retry.action.attempt == 1
    assert retry.state.attempt == 2 and not retry.state.started and not retry.state.gang_seen
    create = decide(Policy(retries=1), retry.state, NOT_FOUND, now=at(6))
    assert create.action.kind is ActionKind.CREATE_GANG and create.action.attempt == 2


def test_a_gang_its_backend_stopped_is_said_so_not_deleted_outside_gangrun():
    # The local control plane stopped (`local down`) ends its gangs: the next one finds them gone, and
    # the attempt's reason names that, not a deletion by someone else. Still a system retry.
    why = "was stopped with the local control plane"
    d = decide(Policy(retries=0), state_in(Phase.RUNNING, started=True), Observation(gang_gone=why), now=at(5))
    assert d.action.kind is ActionKind.RETRY and d.action.retry is RetryKind.SYSTEM
    ended = d.state.attempts[0]
    assert ended.code == "ControlPlaneStopped" and "outside gangrun" not in ended.reason
    assert ended.reason.startswith("the gang of attempt 1 was stopped with the local control plane")
    unknown = decide(Policy(retries=0), state_in(Phase.RUNNING, started=True), NOT_FOUND, now=at(5)).state.attempts[0]
    assert unknown.code == "ResourceDeletedExternally" and "deleted outside gangrun" in unknown.reason
