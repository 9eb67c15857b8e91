"""The keyed work queue: one key at a time, deduplicated, timers and backoff on an injected clock."""

from __future__ import annotations

from gangrun._backends.kube.workqueue import WorkQueue


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_key_added_twice_is_processed_once() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.done("a")
    assert q.get(timeout=0) is None


def test_a_key_added_while_processing_is_handed_out_again_only_after_done() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")
    assert q.get(timeout=0) is None  # never two workers on one task
    q.done("a")
    assert q.get(timeout=0) == "a"


def test_add_after_waits_for_the_clock() -> None:
    clock = Clock()
    q = WorkQueue(clock=clock)
    q.add_after("a", 30)
    assert q.get(timeout=0) is None
    clock.t = 30
    assert q.get(timeout=0) == "a"


def test_rate_limited_retries_back_off_exponentially_and_forget_resets() -> None:
    q = WorkQueue(clock=Clock(), base_delay=1, max_delay=5)
    assert [q.add_rate_limited("a") for _ in range(5)] == [1, 2, 4, 5, 5]
    q.forget("a")
    assert q.add_rate_limited("a") == 1


def test_shutdown_releases_waiting_workers() -> None:
    q = WorkQueue()
    q.shutdown()
    assert q.get() is None
