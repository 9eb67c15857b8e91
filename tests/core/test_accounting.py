"""B5 accounting folded from the timeline: queued time, gang-up time, work lost per stop, goodput."""

from __future__ import annotations

from functools import reduce

import pytest

from builders import T0, at
from gangrun._core.accounting import Accounting
from gangrun._core.timeline import Event, EventType

E = EventType


def ev(t: float, type_: EventType, attempt: int = 1, **data: object) -> Event:
    return Event(time=at(t), type=type_, message="", attempt=attempt, data=dict(data))


def ckpt(t: float, committed: float, attempt: int = 1, step: int = 1) -> Event:
    return ev(t, E.CHECKPOINT, attempt, step=step, committedAt=at(committed).isoformat())


def fold(*events: Event) -> Accounting:
    return reduce(Accounting.apply, events, Accounting())


START = (ev(0, E.SUBMITTED), ev(0, E.GANG_CREATED), ev(2, E.ADMITTED), ev(3, E.GANG_STARTED))


@pytest.mark.parametrize(("events", "lost", "up"), [
    pytest.param((*START, ckpt(9, 8), ev(10, E.PREEMPTED, reason="Preempted")), [("Preempted", 2.0)], 7.0,
                 id="preemption-loses-the-work-since-the-newest-checkpoint"),
    pytest.param((*START, ev(10, E.PREEMPTED, reason="Preempted")), [("Preempted", 7.0)], 7.0,
                 id="without-a-checkpoint-everything-since-the-gang-came-up-is-lost"),
    pytest.param((*START, ckpt(9, 8), ev(10, E.PREEMPTED, reason="Preempted"), ckpt(11, 10.5, step=2)),
                 [("Preempted", 0.0)], 7.0, id="the-final-save-in-the-grace-period-saves-the-work"),
    pytest.param((*START, ckpt(10.4, 9.9), ev(10, E.PREEMPTED, reason="Preempted")), [("Preempted", 0.1)], 7.0,
                 id="a-commit-read-after-the-stop-still-counts-at-its-commit-time"),
    pytest.param((*START, ev(5, E.ATTEMPT_ENDED, code="GangEvicted"), ev(5, E.GANG_CREATED, attempt=2),
                   ev(6, E.ADMITTED, attempt=2), ev(7, E.GANG_STARTED, attempt=2), ckpt(8, 7.5, attempt=1),
                   ev(9, E.EVICTED, attempt=2, reason="NodeFailures")),
                 [("GangEvicted", 2.0), ("NodeFailures", 2.0)], 4.0,
                 id="a-checkpoint-of-another-attempt-does-not-shorten-this-ones-loss"),
    pytest.param((*START, ev(5, E.WORKER_EXITED, code=3), ev(6, E.RESTARTED), ev(8, E.SUCCEEDED)),
                 [("WorkerFailed", 2.0)], 4.0,
                 id="a-worker-failure-is-a-stop-and-the-restart-a-start"),
    pytest.param((*START, ev(6, E.RESTARTED), ev(8, E.SUCCEEDED)), [("WorkerFailed", 3.0)], 5.0,
                 id="a-restart-seen-without-a-worker-exit-is-a-stop-too"),
    pytest.param((*START, ckpt(5, 4), ev(31, E.CONTROL_PLANE, downFrom=at(10).isoformat(), downTo=at(31).isoformat())),
                 [("ControlPlaneDown", 6.0)], 7.0, id="time-the-control-plane-was-down-is-not-gang-up-time"),
    pytest.param((*START, ev(10, E.SUCCEEDED)), [], 7.0, id="success-loses-nothing"),
    pytest.param((*START, ev(10, E.ABORTED)), [("Aborted", 7.0)], 7.0, id="a-cancel-loses-the-unsaved-work"),
])
def test_b5_work_lost_per_stop_and_gang_up_time(events: tuple[Event, ...], lost: list[tuple[str, float]],
                                               up: float) -> None:
    acct = fold(*events)
    assert [(w.cause, round(w.seconds, 3)) for w in acct.work_lost] == lost
    assert acct.gang_up(now=at(100)) == up


def test_b5_queued_until_admitted_and_goodput_over_the_tasks_life() -> None:
    acct = fold(*START, ckpt(12, 12), ev(13, E.PREEMPTED, reason="Preempted"), ev(15, E.READMITTED),
                ev(20, E.SUCCEEDED))
    assert acct.queued(now=at(100)) == 2.0
    assert acct.gang_up(now=at(100)) == 15.0  # 3..13 and 15..20
    assert acct.lost_seconds() == 1.0
    assert acct.goodput(now=at(100)) == pytest.approx((15.0 - 1.0) / 20.0)  # until it ended, not until now


def test_b5_a_running_task_counts_up_to_now() -> None:
    acct = fold(*START)
    assert acct.gang_up(now=at(10)) == 7.0 and acct.goodput(now=at(10)) == pytest.approx(0.7)
    assert acct.view(now=at(10))["gangUpSeconds"] == 7.0


def test_accounting_round_trips_through_storage() -> None:
    acct = fold(*START, ckpt(9, 8), ev(10, E.PREEMPTED, reason="Preempted"), ev(12, E.READMITTED))
    assert Accounting.from_storage(acct.for_storage()) == acct
    assert Accounting.from_storage(None) == Accounting()


def test_events_that_say_nothing_about_time_change_nothing() -> None:
    acct = fold(*START)
    for kind in (E.PHASE, E.WORKER_READY, E.WAITING):
        assert acct.apply(Event(time=T0, type=kind, message="")) is acct
