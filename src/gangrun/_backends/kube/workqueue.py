"""A keyed work queue with client-go's semantics, for level-triggered reconciles.

* A key is queued at most once (`dirty`), and is never handed to two workers at once: a key added
  while it is being processed is queued again when `done(key)` is called.
* `add_after(key, delay)` is the timer behind the engine's `wake_at` (no polling loop per task).
* `add_rate_limited(key)` retries a failed reconcile with per-key exponential backoff;
  `forget(key)` resets it after a success.

Time is a parameter (`clock`) so tests drive it without sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, clock: Callable[[], float] = time.monotonic, base_delay: float = 0.05,
                 max_delay: float = 60.0) -> None:
        self._clock = clock
        self._base, self._max = base_delay, max_delay
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []  # (due, seq, key): a heap
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._shutdown = False

    def add(self, key: K) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: K) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            heapq.heappush(self._waiting, (self._clock() + delay, next(self._seq), key))
            self._cond.notify()

    def add_rate_limited(self, key: K) -> float:
        """Queue `key` again after its backoff; returns the delay used."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        delay = min(self._base * 2.0**n, self._max)  # a float base: int ** int is typed Any
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def _promote_due_locked(self) -> float | None:
        """Move due timers into the queue; return seconds until the next one (None if none)."""
        now = self._clock()
        while self._waiting and self._waiting[0][0] <= now:
            _, _, key = heapq.heappop(self._waiting)
            self._add_locked(key)
        return self._waiting[0][0] - now if self._waiting else None

    def get(self, timeout: float | None = None) -> K | None:
        """The next key to process, or None on shutdown or after `timeout` seconds without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                next_due = self._promote_due_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    return key
                if self._shutdown:
                    return None
                wait = next_due
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def pending_timers(self) -> int:
        with self._cond:
            return len(self._waiting)
