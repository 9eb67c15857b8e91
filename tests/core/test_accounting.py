"""B5 accounting folded from the timeline: queued time, gang-up time, work lost per stop, goodput."""

from __future__ import annotations

from functools import reduce

import pytest

from gangrun._core.accounting import Accounting
from gangrun._core.timeline import Event, EventType
from tests.harness.builders import T0, at

E = EventType


def ev(t: float, type_: EventType, attempt: int = 1, **data: object) -> Event:
    return Event(time=at(t), type=type_, message="", attempt=attempt, data=dict(data))


def ckpt(t: float, committed: float, attempt: int = 1, step: int = 1, *, taken: float | None = None,
         seconds: float | None = None, final: bool = False) -> Event:
    extra: dict[str, object] = {} if taken is None else {"takenAt": at(taken).isoformat()}
    if seconds is not None:
        extra.update(saveSeconds=seconds, final=final)
    return ev(t, E.CHECKPOINT, attempt, step=step, committedAt=at(committed).isoformat(), **extra)


def step(t: float, attempt: int = 1, *, seen: float | None = None) -> Event:
    """A worker's first step after its load at `t`, read by the backend at `seen` (default: then)."""
    return ev(t if seen is None else seen, E.FIRST_STEP, attempt, at=at(t).isoformat())


def running(t: float, attempt: int = 1, *, seen: float | None = None) -> Event:
    """Every worker running again from `t` (a container's startedAt), noticed at `seen`."""
    return ev(t if seen is None else seen, E.WORKERS_RUNNING, attempt, at=at(t).isoformat())


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
                ev(15, E.WORKERS_RUNNING, at=at(15).isoformat()), ev(20, E.SUCCEEDED))
    assert acct.queued(now=at(100)) == 2.0
    assert acct.gang_up(now=at(100)) == 15.0  # 3..13 and 15..20
    assert acct.lost_seconds() == 1.0
    assert acct.goodput(now=at(100)) == pytest.approx((15.0 - 1.0) / 20.0)  # until it ended, not until now


def test_b5_a_running_task_counts_up_to_now() -> None:
    acct = fold(*START)
    assert acct.gang_up(now=at(10)) == 7.0 and acct.goodput(now=at(10)) == pytest.approx(0.7)
    assert acct.view(now=at(10))["gangUpSeconds"] == 7.0


def test_accounting_round_trips_through_storage() -> None:
    acct = fold(*START, step(4), ckpt(9, 8, taken=7.5, seconds=0.5), ev(10, E.PREEMPTED, reason="Preempted"),
                ev(10, E.WAITING), ev(12, E.READMITTED))
    assert Accounting.from_storage(acct.for_storage()) == acct
    assert Accounting.from_storage(None) == Accounting()


def test_events_that_say_nothing_about_time_change_nothing() -> None:
    acct = fold(*START)
    for kind in (E.PHASE, E.WORKER_READY, E.WAITING):
        assert acct.apply(Event(time=T0, type=kind, message="")) is acct


# The badput of each case, by cause: (queued, waitingForReadmission, restoring, restarting, workLost).
BADPUT_CASES = [
    pytest.param((*START, step(4), ev(10, E.WORKER_EXITED, code=137), ev(12, E.RESTARTED), step(17),
                  ev(30, E.SUCCEEDED)), 5.0, (2.0, 0.0, 5.0, 3.0, 6.0), 14.0,
                 id="restoring-after-a-restart-is-not-productive"),
    pytest.param((*START, step(8), ev(20, E.SUCCEEDED)), 0.0, (2.0, 0.0, 0.0, 1.0, 0.0), 17.0,
                 id="the-tasks-first-start-is-not-restoring-an-uninterrupted-run-makes-it-too"),
    pytest.param((*START, ev(10, E.WORKER_EXITED, code=1), ev(12, E.RESTARTED), step(16), step(17),
                  ev(30, E.SUCCEEDED)), 5.0, (2.0, 0.0, 5.0, 3.0, 7.0), 13.0,
                 id="the-gang-steps-once-its-last-rank-does"),
    pytest.param((*START, ev(20, E.SUCCEEDED)), 0.0, (2.0, 0.0, 0.0, 1.0, 0.0), 17.0,
                 id="a-worker-that-never-reports-a-step-is-not-charged-for-restoring"),
    pytest.param((*START, step(8), ckpt(13, 15, taken=12), ev(16, E.PREEMPTED, reason="Preempted")), 0.0,
                 (2.0, 0.0, 0.0, 1.0, 4.0), 9.0, id="work-lost-counts-from-when-the-state-was-taken"),
    pytest.param((*START, ev(10, E.WORKER_EXITED, code=1), ev(12, E.RESTARTED), ev(20, E.PREEMPTED, reason="Preempted"),
                  step(15, seen=21)), 3.0, (2.0, 0.0, 3.0, 4.0, 12.0), 0.0,
                 id="a-first-step-reported-after-the-stop-corrects-that-period"),
    pytest.param((*START, step(8), ev(16, E.PREEMPTED, reason="Preempted"), ev(16, E.WAITING),
                  ev(30, E.READMITTED), running(34, seen=40), step(39, seen=41), ev(50, E.SUCCEEDED)),
                 5.0, (2.0, 14.0, 5.0, 5.0, 8.0), 16.0,
                 id="up-time-after-readmission-starts-when-workers-run"),
    pytest.param((*START, step(8), ev(16, E.WORKER_EXITED, code=137), ev(19, E.RESTARTED), step(22),
                  ev(30, E.SUCCEEDED)), 3.0, (2.0, 0.0, 3.0, 4.0, 8.0), 13.0,
                 id="the-time-between-a-crash-and-the-restart-is-restarting"),
    pytest.param((*START, step(8), ev(16, E.ATTEMPT_ENDED, code="GangEvicted"), ev(17, E.GANG_CREATED, attempt=2),
                  ev(20, E.ADMITTED, attempt=2), ev(21, E.GANG_STARTED, attempt=2), step(23, attempt=2),
                  ev(30, E.SUCCEEDED, attempt=2)), 2.0, (5.0, 0.0, 2.0, 3.0, 8.0), 12.0,
                 id="a-new-attempt-queues-again"),
    pytest.param((*START, step(8), ev(16, E.PREEMPTED, reason="Preempted"),
                  ckpt(17, 18, taken=16.5, seconds=1.5, final=True)), 0.0, (2.0, 0.0, 0.0, 2.0, 0.0), 13.0,
                 id="the-final-save-taken-in-the-grace-period-loses-nothing"),
]


@pytest.mark.parametrize(("events", "restoring", "badput", "productive"), BADPUT_CASES)
def test_badput_by_cause(events: tuple[Event, ...], restoring: float, badput: tuple[float, ...],
                         productive: float) -> None:
    acct = fold(*events)
    now = acct.ended_at or max(e.time for e in events)
    view = acct.view(now=now)
    assert view["restoringSeconds"] == restoring
    assert tuple(view["badputSeconds"][k] for k in ("queued", "waitingForReadmission", "restoring", "restarting",
                                                     "workLost")) == badput
    assert acct.productive(now=now) == pytest.approx(productive)


def test_restoring_time_is_not_productive() -> None:
    # Restarted at 12 after a crash at 10, the workers' first step after their load comes at 17.
    acct = fold(*START, step(4), ev(10, E.WORKER_EXITED, code=137), ev(12, E.RESTARTED), step(17), ev(30, E.SUCCEEDED))
    assert acct.restoring(now=at(30)) == 5.0
    assert acct.goodput(now=at(30)) == pytest.approx((25.0 - 5.0 - 6.0) / 30.0)  # up 3..10, 12..30; lost 4..10


def test_work_lost_counts_from_when_the_state_was_taken() -> None:
    # The state of step 10 was taken at 12 and its background write finished at 15.
    acct = fold(*START, step(8), ckpt(15, 15, taken=12), ev(16, E.WORKER_EXITED, code=137))
    assert [w.seconds for w in acct.work_lost] == [4.0]


def test_a_checkpoint_reported_after_the_next_attempt_began_still_shrinks_the_ended_attempts_loss() -> None:
    # resumeAfterPreemption off: preempted at 20, attempt 2 created at once and up at 25; attempt 1's
    # worker reports (as it exits) a commit whose state was taken at 17.
    acct = fold(*START, ev(20, E.PREEMPTED, reason="Preempted"), ev(20, E.GANG_CREATED, attempt=2),
                ev(25, E.GANG_STARTED, attempt=2), ckpt(26, 18, taken=17))
    assert [(w.attempt, w.seconds) for w in acct.work_lost] == [(1, 3.0)]  # 17..20, not 3..20


def test_a_save_of_a_later_period_says_nothing_of_an_earlier_stop() -> None:
    # Crashed at 10, restarted at 12 in the same attempt; its first save after that (taken at 14) is no
    # state of the period that was lost.
    acct = fold(*START, ev(10, E.WORKER_EXITED, code=137), ev(12, E.RESTARTED), ckpt(15, 15, taken=14))
    assert [w.seconds for w in acct.work_lost] == [7.0]


def test_up_time_after_readmission_starts_when_workers_run() -> None:
    acct = fold(*START, ev(16, E.PREEMPTED, reason="Preempted"), ev(16, E.WAITING), ev(30, E.READMITTED))
    assert acct.gang_up(now=at(33)) == 13.0  # not up again before its workers run
    acct = acct.apply(running(34, seen=40))  # noticed late: the time comes from the objects
    assert acct.gang_up(now=at(40)) == 19.0
    assert acct.badput(now=at(40))["waitingForReadmission"] == 14.0
    assert acct.badput(now=at(40))["restarting"] == 5.0  # 1 s from admission to gang up, then 30..34


def test_workers_running_before_the_readmission_is_seen_start_the_gang_then() -> None:
    """The local backend starts the workers in the same pass as it sees the readmission."""
    acct = fold(*START, ev(16, E.PREEMPTED, reason="Preempted"), ev(16, E.WAITING), running(30, seen=30),
                ev(30, E.READMITTED))
    assert acct.up_since == at(30)


def test_badput_and_goodput_add_up_to_the_tasks_life() -> None:
    for case in BADPUT_CASES:
        events = case.values[0]
        acct = fold(*events)
        if acct.ended_at is None or acct.submitted_at is None:
            continue
        life = (acct.ended_at - acct.submitted_at).total_seconds()
        now = acct.ended_at
        assert sum(acct.badput(now=now).values()) + acct.productive(now=now) == pytest.approx(life), case.id


def test_save_durations_are_kept_by_kind() -> None:
    acct = fold(*START, ckpt(5, 5, taken=4, seconds=1.0), ckpt(7, 7, taken=6.5, seconds=0.5, final=True))
    assert acct.periodic_saves == (1.0,) and acct.final_saves == (0.5,)
    assert acct.view(now=at(8))["finalSaveSeconds"] == [0.5]


def test_a_readmission_noticed_after_the_workers_ran_ends_the_wait_when_they_ran() -> None:
    acct = fold(*START, ev(16, E.PREEMPTED, reason="Preempted"), ev(16, E.WAITING), ev(40, E.READMITTED),
                running(34, seen=41))
    assert acct.up_since == at(34)
    assert acct.badput(now=at(41))["waitingForReadmission"] == 18.0  # 16..34, not 16..40
    assert acct.gang_up(now=at(41)) == 13.0 + 7.0


# -- elastic gangs: time up counts in node-seconds, as the fraction of the full size it runs at --------


def test_an_elastic_gang_running_on_half_its_nodes_is_half_as_productive() -> None:
    acct = fold(ev(0, E.SUBMITTED), ev(0, E.GANG_CREATED), ev(0, E.ADMITTED, nodes=2, of=4), ev(0, E.GANG_STARTED),
                ev(10, E.SUCCEEDED))
    assert acct.gang_up(now=at(10)) == pytest.approx(5.0)
    assert acct.goodput(now=at(10)) == pytest.approx(0.5)


def test_a_resize_while_up_is_a_stop_whose_loss_the_final_save_shrinks() -> None:
    acct = fold(ev(0, E.SUBMITTED), ev(0, E.GANG_CREATED), ev(0, E.ADMITTED, nodes=2, of=4), ev(0, E.GANG_STARTED),
                ev(10, E.RESIZED, **{"from": 2, "to": 4, "of": 4}), ckpt(10.5, 10.5, taken=10.2, seconds=0.3, final=True),
                ev(11, E.RESTARTED), ev(21, E.SUCCEEDED))
    assert [(w.cause, round(w.seconds, 3)) for w in acct.work_lost] == [("Resize", 0.0)]
    assert acct.gang_up(now=at(21)) == pytest.approx(10 * 0.5 + 10)  # node-seconds: half, then the whole gang
    assert acct.badput(now=at(21))["restarting"] == pytest.approx(1.0)
    assert Accounting.from_storage(acct.for_storage()) == acct


# The elastic run of the issue in small: admitted on 2 of 4 nodes, grown to 4 at 10 (final save at
# 10.2), up again at 11, done at 21.
ELASTIC = (ev(0, E.SUBMITTED), ev(0, E.GANG_CREATED), ev(1, E.ADMITTED, nodes=2, of=4), ev(2, E.GANG_STARTED),
           step(3), ev(10, E.RESIZED, **{"from": 2, "to": 4, "of": 4}),
           ckpt(10.5, 10.5, taken=10.2, seconds=0.3, final=True), ev(11, E.RESTARTED), step(12), ev(21, E.SUCCEEDED))


def test_b5_an_elastic_gang_keeps_the_badput_identity_the_unused_share_is_below_full_size() -> None:
    acct = fold(*ELASTIC)
    now = at(21)
    badput = acct.badput(now=now)
    assert badput["belowFullSize"] == pytest.approx(8 * 0.5)  # 2..10 on half its nodes
    assert sum(badput.values()) + acct.productive(now=now) == pytest.approx(21.0)
    assert acct.for_storage()["badputSeconds"] == badput  # the stored form, as of the newest event
    assert Accounting.from_storage(acct.for_storage()) == acct


def test_b5_below_full_size_counts_while_the_gang_runs_small() -> None:
    acct = fold(*ELASTIC[:5])
    assert acct.badput(now=at(6))["belowFullSize"] == pytest.approx(2.0)  # 2..6 on half its nodes
    assert sum(acct.badput(now=at(6)).values()) + acct.productive(now=at(6)) == pytest.approx(6.0)


# -- step time: goodput counts the task's first start as productive; step time does not -------------


def test_b5_step_seconds_leave_out_the_first_start_that_goodput_counts_as_productive() -> None:
    # Up at 3, first step at 8 (interpreter, imports: 5 s), crash at 16, restarted at 19, stepping
    # again at 22, done at 30. Productive: 3..30 less 3 s restarting, 3 s restoring and 8 s lost = 13.
    acct = fold(*START, step(8), ev(16, E.WORKER_EXITED, code=137), ev(19, E.RESTARTED), step(22), ev(30, E.SUCCEEDED))
    view = acct.view(now=at(30))
    assert acct.productive(now=at(30)) == pytest.approx(13.0)
    assert view["stepSeconds"] == pytest.approx(8.0)  # 22..30: the first period's steps (8..16) were lost
    assert view["stepSeconds"] <= view["goodput"] * 30
    assert Accounting.from_storage(acct.for_storage()) == acct


def test_b5_step_seconds_of_a_first_start_whose_step_is_reported_late() -> None:
    acct = fold(*START, ckpt(12, 12, taken=12), ev(13, E.PREEMPTED, reason="Preempted"), step(6, seen=14))
    assert acct.view(now=at(14))["stepSeconds"] == pytest.approx(6.0)  # 6..12 kept, 12..13 lost
    live = fold(*START, step(6))
    assert live.view(now=at(10))["stepSeconds"] == pytest.approx(4.0)


def test_b5_a_preemption_during_a_grow_is_charged_as_a_preemption_and_waits_from_the_preemption() -> None:
    # Running on 2 of 4 nodes, it grows at 10 (stop: Resize); 1 s into the grow, before the grown gang
    # is up, it is preempted; readmitted at 18 on 2 nodes, and only then is the grow's restart seen.
    acct = fold(ev(0, E.SUBMITTED), ev(0, E.GANG_CREATED), ev(1, E.ADMITTED, nodes=2, of=4), ev(2, E.GANG_STARTED),
                step(3), ev(10, E.RESIZED, **{"from": 2, "to": 4, "of": 4}),
                ev(11, E.RESIZED, **{"from": 4, "to": 2, "of": 4}), ev(11, E.PREEMPTED, reason="Preempted"),
                ev(11, E.WAITING), ev(18, E.ADMITTED, nodes=2, of=4), running(18), ev(18, E.READMITTED),
                ev(18.1, E.RESTARTED), ev(30, E.SUCCEEDED))
    assert [w.cause for w in acct.work_lost] == ["Resize"]  # no worker failed
    badput = acct.badput(now=at(30))
    assert badput["waitingForReadmission"] == 7.0  # 11..18: from the preemption, as waitingForReadmissionSeconds
    assert badput["restarting"] == 2.0  # 1..2 starting, 10..11 stopping for the grow
    assert sum(badput.values()) + acct.productive(now=at(30)) == pytest.approx(30.0)


def test_b5_a_restart_seen_while_up_after_a_readmission_is_still_a_stop_when_no_stop_awaits_it() -> None:
    acct = fold(*START, ev(10, E.PREEMPTED, reason="Preempted"), ev(10, E.WAITING), running(15), ev(15, E.READMITTED),
                ev(20, E.RESTARTED), ev(25, E.SUCCEEDED))
    assert [w.cause for w in acct.work_lost] == ["Preempted", "WorkerFailed"]


def test_b5_a_save_taken_after_the_stop_is_a_final_save_whatever_the_worker_knew() -> None:
    # The worker took its state at 10.2, after the preemption at 10, before its stop notice reached it
    # (its own SIGTERM came later): it says final=False, but the save was made in the grace period.
    acct = fold(*START, step(4), ckpt(9, 8.5, taken=8.4, seconds=0.1), ev(10, E.PREEMPTED, reason="Preempted"),
                ckpt(11, 10.5, step=2, taken=10.2, seconds=0.3, final=False))
    assert acct.final_saves == (0.3,) and acct.periodic_saves == (0.1,)
