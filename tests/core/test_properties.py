"""Properties over arbitrary, partial and malformed observations: never raise, never wait forever,
never move a phase backwards within an attempt."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gangrun._core import jobset, kueue
from gangrun._core.conditions import Condition
from gangrun._core.engine import ActionKind, decide
from gangrun._core.observation import Gang, Observation, Workload, WorkloadRead
from gangrun._core.policy import Policy
from gangrun._core.state import TaskState
from tests.harness.builders import T0

TEXT = st.text(max_size=12)
REASONS = st.sampled_from([
    kueue.EVICTED_BY_PREEMPTION, kueue.EVICTED_BY_PODS_READY_TIMEOUT, kueue.DEACTIVATED,
    kueue.DEACTIVATED_DUE_TO_MAX_EXEC_TIME, kueue.EVICTED_DUE_TO_NODE_FAILURES, kueue.INADMISSIBLE,
    kueue.QUOTA_RESERVED_REASON, "", "Weird"]) | TEXT
TYPES = st.sampled_from([kueue.EVICTED, kueue.PREEMPTED, kueue.QUOTA_RESERVED, kueue.ADMITTED, jobset.COMPLETED,
                         jobset.FAILED, jobset.SUSPENDED, jobset.RESTARTING]) | TEXT
CONDITIONS = st.lists(st.builds(Condition, type=TYPES, status=st.sampled_from(["True", "False", "Unknown", ""]),
                                reason=REASONS, message=TEXT), max_size=5).map(tuple)
COUNT = st.integers(min_value=-2, max_value=5)
GANGS = st.builds(Gang, suspended=st.booleans(), conditions=CONDITIONS, restarts=COUNT,
                  restarts_count_towards_max=COUNT, expected_workers=COUNT, scheduled_workers=COUNT,
                  ready_workers=COUNT, jobs_ready=COUNT, jobs_succeeded=COUNT, jobs_failed=COUNT,
                  unscheduled_detail=TEXT, first_failure=TEXT, pending_failure=st.sampled_from(["", "bad image"]),
                  deleting=st.booleans())
WORKLOADS = st.builds(Workload, conditions=CONDITIONS, active=st.booleans(), queue_name=TEXT)
OBSERVATIONS = st.builds(Observation, gang=st.none() | GANGS, workload=st.none() | WORKLOADS,
                         workload_read=st.sampled_from(list(WorkloadRead)), workload_error=TEXT)
POLICIES = st.builds(Policy, retries=st.integers(0, 3), max_system_retries=st.integers(0, 3),
                     max_restarts=st.integers(0, 2), resume_after_preemption=st.booleans(),
                     max_runtime=st.none() | st.just(timedelta(minutes=5)))


@settings(max_examples=300, deadline=None)
@given(policy=POLICIES, observations=st.lists(OBSERVATIONS, min_size=1, max_size=25))
def test_malformed_observations_never_raise_and_phases_never_move_backwards(policy, observations):
    state = TaskState.new(now=T0)
    now = T0
    for obs in observations:
        now += timedelta(seconds=7)
        d = decide(policy, state, obs, now=now)
        if d.state.attempt == state.attempt and not d.state.phase.terminal:
            assert d.state.phase.rank >= state.phase.rank, (state.phase, d.state.phase)
        if d.state.phase == state.phase and d.state.attempt == state.attempt:
            assert d.state.info.version >= state.info.version
        assert d.state.user_retries_used <= policy.retries
        state = d.state
        # Round-trips through storage, as every backend persists it after each decision.
        assert TaskState.from_storage(state.for_storage()) == state


@settings(max_examples=200, deadline=None)
@given(policy=POLICIES, obs=OBSERVATIONS)
def test_a_repeated_observation_never_waits_forever(policy, obs):
    """Seen again and again, any observation of a started gang ends in a bounded wait or a decision:
    the engine either acts, or names a time to look again, or the observation itself is a steady state
    that a backend change (admission, readmission, pods) must end."""
    state = TaskState.new(now=T0).with_running(at=T0, restart_attempt=0)
    state = TaskState.from_storage({**state.for_storage(), "gangSeen": True, "phase": "Running"})
    now = T0
    for _ in range(10):
        now += policy.suspend_grace
        d = decide(policy, state, obs, now=now)
        if d.action.kind is not ActionKind.NONE or d.state.phase.terminal:
            return
        state = d.state
    # Still waiting after ten grace periods: it must be a state the outside world ends, never an
    # unexplained suspension (S7 gives up after one grace period).
    assert state.info.reason != "gang suspended; waiting for kueue to report why"
