"""The pure Kueue-like admission: a table of quotas, admitted and pending gangs → admissions and preemptions."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gangrun._backends.local.admission import Plan, Request, Resources, plan

Q4 = Resources(cpu=Decimal(4), memory=Decimal(16), gpu=Decimal(0))


def r(cpu: int, memory: int = 1, gpu: int = 0) -> Resources:
    return Resources(cpu=Decimal(cpu), memory=Decimal(memory), gpu=Decimal(gpu))


def running(name: str, cpu: int, priority: int, admitted_at: float, *, evicting: bool = False,
            boost: int = 0) -> Request:
    return Request(name=name, priority=priority, order=0, resources=r(cpu), admitted_at=admitted_at, evicting=evicting,
                   boost=boost)


def waiting(name: str, cpu: int, priority: int, order: int, *, gpu: int = 0, boost: int = 0) -> Request:
    return Request(name=name, priority=priority, order=order, resources=r(cpu, gpu=gpu), boost=boost)


CASES = [
    pytest.param([], [waiting("a", 2, 0, 1), waiting("b", 2, 0, 2)], Plan(admit=("a", "b")),
                 id="both-fit-in-submission-order"),
    pytest.param([], [waiting("a", 3, 0, 1), waiting("b", 3, 100, 2)], Plan(admit=("b",)),
                 id="higher-priority-first-even-if-submitted-later"),
    pytest.param([], [waiting("a", 5, 0, 1)], Plan(), id="bigger-than-quota-never-admitted"),
    pytest.param([], [waiting("a", 3, 0, 1), waiting("b", 1, 0, 2)], Plan(admit=("a", "b")),
                 id="all-or-nothing-fills-exactly"),
    pytest.param([running("low", 4, 100, 1.0)], [waiting("high", 1, 10000, 1)],
                 Plan(preempt=(("low", "high"),), waiting=("high",)), id="lower-priority-preempted"),
    pytest.param([running("peer", 4, 1000, 1.0)], [waiting("same", 1, 1000, 1)], Plan(),
                 id="equal-priority-never-preempted"),
    pytest.param([running("old", 2, 100, 1.0), running("new", 2, 100, 2.0)], [waiting("high", 2, 10000, 1)],
                 Plan(preempt=(("new", "high"),), waiting=("high",)), id="most-recently-admitted-goes-first"),
    pytest.param([running("mid", 2, 1000, 1.0), running("low", 2, 100, 2.0)], [waiting("high", 2, 10000, 1)],
                 Plan(preempt=(("low", "high"),), waiting=("high",)), id="lowest-priority-goes-first"),
    pytest.param([running("s1", 1, 100, 3.0), running("big", 3, 100, 1.0)], [waiting("high", 3, 10000, 1)],
                 Plan(preempt=(("big", "high"),), waiting=("high",)), id="fewest-victims-after-minimal-pass"),
    pytest.param([running("low", 4, 100, 1.0, evicting=True)], [waiting("high", 2, 10000, 1)],
                 Plan(waiting=("high",)), id="waits-for-victims-already-stopping"),
    pytest.param([running("low", 4, 100, 1.0, evicting=True)], [waiting("high", 4, 10000, 1), waiting("x", 1, 0, 2)],
                 Plan(waiting=("high",)), id="room-on-its-way-is-kept-for-the-preemptor"),
    pytest.param([running("low", 2, 100, 1.0)], [waiting("high", 6, 10000, 1), waiting("small", 2, 0, 2)],
                 Plan(admit=("small",)), id="best-effort-fifo-skips-an-inadmissible-head"),
    pytest.param([], [waiting("g", 1, 0, 1, gpu=1)], Plan(), id="gpu-quota-zero-blocks-gpu-gang"),
    # Effective priority = priority + boost (checkpoint-aware preemption).
    pytest.param([running("unsaved", 2, 100, 1.0, boost=25), running("saved", 2, 100, 2.0)],
                 [waiting("high", 2, 10000, 1)],
                 Plan(preempt=(("saved", "high"),), waiting=("high",)), id="the-gang-that-just-checkpointed-goes-first"),
    pytest.param([running("saved", 2, 100, 1.0), running("unsaved", 2, 100, 2.0, boost=25)],
                 [waiting("high", 2, 10000, 1)],
                 Plan(preempt=(("saved", "high"),), waiting=("high",)),
                 id="a-boost-outweighs-being-the-most-recently-admitted"),
    pytest.param([running("old", 2, 100, 1.0, boost=25), running("new", 2, 100, 2.0, boost=25)],
                 [waiting("high", 2, 10000, 1)],
                 Plan(preempt=(("new", "high"),), waiting=("high",)), id="equal-effective-most-recently-admitted-first"),
    pytest.param([running("low", 4, 100, 1.0, boost=99)], [waiting("mid", 1, 200, 1)],
                 Plan(preempt=(("low", "mid"),), waiting=("mid",)), id="a-boost-never-crosses-a-priority-class"),
    pytest.param([running("peer", 4, 1000, 1.0)], [waiting("starved", 1, 1000, 1, boost=25)],
                 Plan(preempt=(("peer", "starved"),), waiting=("starved",)),
                 id="a-higher-effective-priority-may-preempt-a-peer"),
    pytest.param([running("peer", 4, 1000, 1.0, boost=25)], [waiting("starved", 1, 1000, 1, boost=25)], Plan(),
                 id="equal-effective-priority-never-preempted"),
    pytest.param([], [waiting("new", 3, 0, 1), waiting("starved", 3, 0, 2, boost=25)], Plan(admit=("starved",)),
                 id="a-starved-gang-goes-ahead-of-newer-work-of-its-priority"),
]


@pytest.mark.parametrize(("admitted", "pending", "want"), CASES)
def test_admission_plan(admitted: list[Request], pending: list[Request], want: Plan) -> None:
    got = plan(Q4, admitted, pending)
    assert (got.admit, got.preempt, got.waiting) == (want.admit, want.preempt, want.waiting)
    # Every gang left waiting is told why; an admitted one is not.
    assert set(got.waiting_reasons) == {p.name for p in pending} - set(got.admit)


@pytest.mark.parametrize(("admitted", "pending", "why"), [
    pytest.param([], [waiting("a", 5, 0, 1)], "the gang needs 5 cpu, 1 memory, more than the whole quota (4 cpu",
                 id="bigger-than-the-quota"),
    pytest.param([running("peer", 4, 1000, 1.0)], [waiting("a", 1, 1000, 1)],
                 "waiting for quota: the gang needs 1 cpu, 1 memory and the gangs running have the same or a higher",
                 id="no-lower-priority-to-preempt"),
    pytest.param([running("low", 4, 100, 1.0)], [waiting("a", 1, 10000, 1)],
                 "preempting 1 lower-priority gang(s); waiting for them to stop", id="preempting"),
    pytest.param([running("low", 4, 100, 1.0, evicting=True)], [waiting("a", 2, 10000, 1)],
                 "waiting for preempted gangs to stop and give their quota back", id="room-on-its-way"),
])
def test_a_waiting_gang_is_told_why(admitted: list[Request], pending: list[Request], why: str) -> None:
    assert plan(Q4, admitted, pending).waiting_reasons["a"].startswith(why)


def test_first_exceeding_names_the_resource() -> None:
    assert r(2, memory=32).first_exceeding(Q4) == "memory"
    assert r(2).first_exceeding(Q4) is None


# -- elastic gangs (spec.minNodes): per node 1 cpu, the quota has 4 --------------------------------------


def elastic_waiting(name: str, nodes: int, least: int, priority: int, order: int) -> Request:
    return Request(name=name, priority=priority, order=order, resources=r(nodes), per_node=r(1), nodes=nodes,
                   least_nodes=least, full_nodes=nodes)


def elastic_running(name: str, nodes: int, full: int, priority: int, admitted_at: float, *,
                    may_grow: bool = True) -> Request:
    return Request(name=name, priority=priority, order=0, resources=r(nodes), admitted_at=admitted_at,
                   per_node=r(1), nodes=nodes, least_nodes=1, full_nodes=full, may_grow=may_grow)


ELASTIC = [
    pytest.param([], [elastic_waiting("e", 4, 2, 100, 1)], Plan(admit=("e",)), id="full-size-when-it-fits"),
    pytest.param([running("peer", 1, 100, 1.0)], [elastic_waiting("e", 4, 2, 100, 1)],
                 Plan(admit=("e",), sizes={"e": 3}), id="largest-smaller-size-without-preempting"),
    pytest.param([running("peer", 3, 100, 1.0)], [elastic_waiting("e", 4, 2, 100, 1)], Plan(),
                 id="waits-below-min-nodes"),
    pytest.param([running("low", 2, 10, 1.0)], [elastic_waiting("e", 4, 2, 100, 1)],
                 Plan(preempt=(("low", "e"),), waiting=("e",)), id="full-size-by-preempting-lower-priority-first"),
    pytest.param([running("high", 2, 10000, 1.0)], [elastic_waiting("e", 4, 2, 100, 1)],
                 Plan(admit=("e",), sizes={"e": 2}), id="shrinks-instead-of-waiting-for-a-higher-priority-gang"),
    pytest.param([running("peer", 1, 100, 1.0)], [elastic_waiting("e", 6, 2, 100, 1)],
                 Plan(admit=("e",), sizes={"e": 3}), id="larger-than-the-quota-still-starts-on-what-fits"),
    pytest.param([elastic_running("e", 2, 4, 100, 1.0)], [], Plan(grow=(("e", 4),)), id="grows-into-free-quota"),
    pytest.param([elastic_running("e", 2, 4, 100, 1.0), running("x", 1, 100, 2.0)], [],
                 Plan(grow=(("e", 3),)), id="grows-as-far-as-the-quota-allows"),
    pytest.param([elastic_running("e", 2, 4, 100, 1.0, may_grow=False)], [], Plan(), id="no-growth-in-cooldown"),
    pytest.param([elastic_running("e", 2, 4, 100, 1.0), running("x", 1, 100, 2.0)], [waiting("w", 2, 100, 1)],
                 Plan(), id="no-growth-into-quota-a-peer-waits-for"),
    pytest.param([elastic_running("e", 2, 4, 1000, 1.0), running("x", 1, 100, 2.0)], [waiting("w", 2, 100, 1)],
                 Plan(grow=(("e", 3),)), id="grows-over-a-lower-priority-waiter"),
]


@pytest.mark.parametrize(("admitted", "pending", "want"), ELASTIC)
def test_elastic_admission_plan(admitted: list[Request], pending: list[Request], want: Plan) -> None:
    got = plan(Q4, admitted, pending)
    assert (got.admit, got.preempt, got.waiting, got.sizes, got.grow) == \
        (want.admit, want.preempt, want.waiting, want.sizes, want.grow)
