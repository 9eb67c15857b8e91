"""The checkpoint-aware priority boost, as a table (gangrun._core.priority_boost)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from gangrun._core.accounting import Accounting, CheckpointMark
from gangrun._core.eviction import EvictionKind
from gangrun._core.priority_boost import (
    Boost,
    BoostPolicy,
    gang_boost,
    parse_annotation,
    running_boost,
    task_boost,
    waiting_boost,
)
from gangrun._core.state import EvictionRecord, TaskState
from gangrun._errors import UsageError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT = BoostPolicy()


@pytest.mark.parametrize(("unsaved", "nodes", "expected"), [
    (0.0, 1, Boost(3, 30.0)),  # just checkpointed: nothing to lose, the bottom level (above any waiting gang)
    (29.0, 1, Boost(3, 1.0)),
    (30.0, 1, Boost(27, 90.0)),  # first step
    (60.0, 1, Boost(27, 60.0)),
    (120.0, 1, Boost(51, 480.0)),
    (600.0, 1, Boost(75, 3000.0)),
    (3600.0, 1, Boost(99, None)),  # the top of the band: nothing further
    (10 ** 7, 1, Boost(99, None)),
    (15.0, 2, Boost(27, 45.0)),  # size counts: 2 nodes × 15 s = 30 node-seconds; next step at 60 s
    (60.0, 4, Boost(51, 90.0)),  # 240 node-seconds; 600 at 150 s
    (-5.0, 1, Boost(3, 30.0)),  # a clock skew never makes a negative risk
])
def test_the_boost_steps_up_with_unsaved_node_seconds(unsaved: float, nodes: int, expected: Boost) -> None:
    assert running_boost(DEFAULT, unsaved_seconds=unsaved, nodes=nodes) == expected


@pytest.mark.parametrize("policy", [
    BoostPolicy(),
    BoostPolicy(low=0, high=49),
    BoostPolicy(low=-20, high=79, steps=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)),
    BoostPolicy(low=10, high=10, starved_max=0),
])
def test_boost_never_crosses_a_priority_class(policy: BoostPolicy) -> None:
    """Whatever the risk, size or preemption count, the value stays in the admin's band; with the
    default band a boosted gang of class 100 never reaches class 200."""
    seen = {running_boost(policy, unsaved_seconds=s, nodes=n).value
            for s in (0, 1, 10, 100, 1000, 10 ** 6) for n in (1, 8, 1000)}
    seen |= {waiting_boost(policy, preemptions=k).value for k in range(0, 50)}
    assert all(policy.low <= v <= policy.high for v in seen)
    if policy == DEFAULT:
        assert 100 + max(seen) < 200


@pytest.mark.parametrize(("preemptions", "expected"), [(0, 0), (1, 1), (2, 2), (3, 3), (1000, 3)])
def test_a_starved_gang_gets_a_bounded_boost(preemptions: int, expected: int) -> None:
    assert waiting_boost(DEFAULT, preemptions=preemptions).value == expected


@pytest.mark.parametrize("policy", [BoostPolicy(), BoostPolicy(low=-10, high=10, starved_max=20),
                                    BoostPolicy(starved_max=0)])
def test_a_waiting_gang_never_outranks_a_running_peer(policy: BoostPolicy) -> None:
    """Kueue preempts only strictly lower: the starvation boost reorders the queue, never evicts a peer."""
    most_waiting = max(waiting_boost(policy, preemptions=k).value for k in range(100))
    least_running = min(running_boost(policy, unsaved_seconds=s, nodes=n).value for s in (0, 5, 10 ** 6) for n in (1, 9))
    assert most_waiting <= least_running


def test_the_boost_changes_at_most_once_per_step_between_two_commits() -> None:
    """Quantisation: second by second over a long unsaved stretch, the value changes len(steps) times;
    a commit brings it back to the bottom (one more change)."""
    values = [running_boost(DEFAULT, unsaved_seconds=s, nodes=1).value for s in range(0, 7200)]
    changes = sum(1 for a, b in pairwise(values) if a != b)
    assert changes == len(DEFAULT.steps)
    assert running_boost(DEFAULT, unsaved_seconds=0, nodes=1).value == DEFAULT.level(0)


@pytest.mark.parametrize(("admitted", "unsaved", "preemptions", "expected"), [
    (True, 0.0, 0, 3),
    (True, 60.0, 0, 27),
    (True, None, 0, 3),  # admitted, workers not up yet
    (False, 600.0, 0, 0),  # waiting: its unsaved work is gone already; only its preemptions count
    (False, None, 1, 1),
    (True, 0.0, 2, 3),  # admitted after two preemptions: the bottom running level, at least what it waited with
    (True, 700.0, 2, 75),
])
def test_a_gang_boost_is_its_risk_when_admitted_and_its_preemptions_when_waiting(
        admitted: bool, unsaved: float | None, preemptions: int, expected: int) -> None:
    since = None if unsaved is None else T0 - timedelta(seconds=unsaved)
    b = gang_boost(DEFAULT, admitted=admitted, unsaved_from=since, nodes=1, preemptions=preemptions, now=T0)
    assert b.value == expected


def test_unsaved_work_starts_at_the_newer_of_gang_up_and_the_checkpoint_of_the_same_attempt() -> None:
    up = Accounting(up_since=T0, up_attempt=2)
    assert up.unsaved_since() == T0
    newer = replace(up, last_checkpoint=CheckpointMark(attempt=2, step=5, at=T0 + timedelta(seconds=40)))
    assert newer.unsaved_since() == T0 + timedelta(seconds=40)
    restored = replace(up, last_checkpoint=CheckpointMark(attempt=2, step=5, at=T0 - timedelta(seconds=40)))
    assert restored.unsaved_since() == T0  # saved before this run came up: it restored from it
    other = replace(up, last_checkpoint=CheckpointMark(attempt=1, step=5, at=T0 + timedelta(seconds=40)))
    assert other.unsaved_since() == T0
    assert Accounting().unsaved_since() is None  # not up: nothing at risk


def test_a_task_boost_counts_only_its_preemptions() -> None:
    def ev(kind: EvictionKind) -> EvictionRecord:
        return EvictionRecord(attempt=1, kind=kind, reason="r", detail="", message="", at=T0)

    state = TaskState(evictions=(ev(EvictionKind.PREEMPTED), ev(EvictionKind.DEACTIVATED), ev(EvictionKind.PREEMPTED)))
    assert task_boost(DEFAULT, state, Accounting(), admitted=False, nodes=1, now=T0).value == 2
    running = Accounting(up_since=T0 - timedelta(seconds=700), up_attempt=1)
    assert task_boost(DEFAULT, TaskState(), running, admitted=True, nodes=1, now=T0).value == 75


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"low": 50, "high": 10}, "--boost-max"),
    ({"steps": ()}, "--boost-steps"),
    ({"steps": (60.0, 30.0)}, "--boost-steps"),
    ({"steps": (0.0, 30.0)}, "--boost-steps"),
    pytest.param({"steps": (float("nan"),)}, "--boost-steps", id="nan-would-turn-the-boost-off"),
    pytest.param({"steps": (30.0, float("inf"))}, "--boost-steps", id="inf-is-a-step-never-crossed"),
    ({"starved_max": 100}, "--boost-starved-max"),
    ({"starved_max": -1}, "--boost-starved-max"),
])
def test_a_bad_band_is_one_error_naming_the_flag(kwargs: dict, field: str) -> None:
    with pytest.raises(UsageError, match=field):
        BoostPolicy(**kwargs)


@pytest.mark.parametrize(("value", "expected"), [("25", 25), (" -3 ", -3), ("x", None), (None, None), (7, None)])
def test_the_annotation_reads_back_as_an_integer(value: object, expected: int | None) -> None:
    assert parse_annotation(value) == expected
