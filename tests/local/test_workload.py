"""The Workload twin writes Kueue's conditions in Kueue's order, so the engine's one classifier reads it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core import kueue
from gangrun._core.conditions import find_condition
from gangrun._core.eviction import EvictionKind, classify_eviction

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)
MSG = kueue.preemption_message(workload_uid="u", job_uid="j", reason=kueue.IN_CLUSTER_QUEUE,
                               preemptor_path="/local", preemptee_path="/local")


def twin() -> WorkloadTwin:
    wl = WorkloadTwin(task="train", attempt=1, queue="default", priority=100, priority_class="low",
                      resources={"cpu": "2", "memory": "0", "gpu": "0"}, order=1)
    wl.reserve(now=NOW)
    return wl


def cond(wl: WorkloadTwin, type_: str) -> tuple[str, str, str]:
    c = find_condition(wl.conditions, type_)
    assert c is not None, type_
    return c.status, c.reason, c.message


def test_preemption_keeps_quota_until_released_then_requeues_and_readmits_with_previously() -> None:
    wl = twin()
    assert cond(wl, kueue.ADMITTED) == ("True", "Admitted", "The workload is admitted")
    wl.evict(kueue.EVICTED_BY_PREEMPTION, MSG, now=NOW, preempted_reason=kueue.IN_CLUSTER_QUEUE, preemptor="urgent")
    assert wl.reserved  # W1: quota still held while the gang stops
    assert cond(wl, kueue.EVICTED) == ("True", "Preempted", MSG)
    assert cond(wl, kueue.PREEMPTED) == ("True", "InClusterQueue", MSG)
    ev = classify_eviction(wl.observed())
    assert (ev.kind, ev.detail) == (EvictionKind.PREEMPTED, kueue.IN_CLUSTER_QUEUE)
    wl.release(now=at(2.0), backoff_base=timedelta(seconds=1.0))  # W6
    assert not wl.reserved and wl.pending(at(2.0))
    assert cond(wl, kueue.REQUEUED) == ("True", "Preempted", MSG)
    assert cond(wl, kueue.QUOTA_RESERVED) == ("False", "Pending", MSG)
    assert cond(wl, kueue.ADMITTED) == ("False", "NoReservation", "The workload has no reservation")
    wl.reserve(now=NOW)  # W7
    assert cond(wl, kueue.EVICTED) == ("False", "QuotaReserved", "Previously: " + MSG)
    assert cond(wl, kueue.PREEMPTED) == ("False", "QuotaReserved", "Previously: " + MSG)
    assert cond(wl, kueue.REQUEUED)[0] == "True"  # Kueue never clears Requeued
    assert classify_eviction(wl.observed()).kind is EvictionKind.NOT_YET


def test_s6_deactivation_while_waiting_beats_the_stale_preempted() -> None:
    wl = twin()
    wl.evict(kueue.EVICTED_BY_PREEMPTION, MSG, now=NOW, preempted_reason=kueue.IN_CLUSTER_QUEUE)
    wl.release(now=at(2.0), backoff_base=timedelta(seconds=1.0))
    wl.deactivate(now=NOW)
    assert not wl.pending(at(3.0))
    assert classify_eviction(wl.observed()).kind is EvictionKind.DEACTIVATED
    assert cond(wl, kueue.REQUEUED) == ("False", "Deactivated", "The workload is deactivated")
    wl.activate(now=NOW)
    assert wl.pending(at(3.0))
    assert cond(wl, kueue.REQUEUED) == ("True", "Reactivated", "The workload was reactivated")


def test_pods_ready_timeout_is_not_requeued_until_its_backoff_is_over() -> None:
    wl = twin()
    wl.evict(kueue.EVICTED_BY_PODS_READY_TIMEOUT, kueue.pods_ready_timeout_message("local", wl.name), now=NOW)
    assert classify_eviction(wl.observed()).kind is EvictionKind.OTHER
    wl.release(now=at(10.0), backoff_base=timedelta(seconds=1.0))
    assert cond(wl, kueue.REQUEUED)[:2] == ("False", "PodsReadyTimeout")
    assert not wl.pending(at(10.5))
    assert wl.backoff_finished(now=at(11.0))
    assert cond(wl, kueue.REQUEUED) == ("True", "BackoffFinished", "The workload backoff was finished")
    assert wl.pending(at(11.0))


def test_node_failures_are_requeued_at_once() -> None:
    wl = twin()
    wl.evict(kueue.EVICTED_DUE_TO_NODE_FAILURES, kueue.node_failures_message("local-node-0"), now=NOW)
    wl.release(now=at(2.0), backoff_base=timedelta(seconds=1.0))
    assert cond(wl, kueue.REQUEUED)[:2] == ("True", "NodeFailures") and wl.pending(at(2.0))


def test_twin_round_trips_through_json() -> None:
    wl = twin()
    wl.evict(kueue.EVICTED_BY_PREEMPTION, MSG, now=NOW, preempted_reason=kueue.IN_CLUSTER_QUEUE, preemptor="u")
    assert WorkloadTwin.from_json(wl.for_json()) == wl
