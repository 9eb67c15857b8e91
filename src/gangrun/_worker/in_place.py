"""A launcher's side of an in-place gang restart: its pod stays, its worker starts again.

With `spec.failurePolicy.restartStrategy: InPlace` (GANGRUN_IN_PLACE_WAIT set in the pod) a launcher
whose worker fails does not end its pod. It says so on its report port and waits for the controller,
which restarts the whole gang in place: it POSTs to every launcher of the gang the order to run round
N (the gang's restart count after this restart) with the stop notice of the restart.

    Rounds(restart)            the round the worker runs in (JOBSET_RESTART_ATTEMPT at first)
      .ready() -> bool         GET /ready: False (503) while a failed worker (or a replacement) waits for
                               the order; the pod's readiness probe turns that into Ready=False, which
                               the controller watches
      .report() -> str         GET /round: {"restart": N, "failed": exit code or null, "at": when (epoch s)},
                               and "replaced": true while a replacement waits for its first order
      .ordered(body) -> bool   POST /restart {"restart": N, "notice": {...}, "recreate": false}: an
                               order for a later round. A running worker is stopped for it (`running`'s
                               stop: the notice written, SIGTERM, SIGKILL at its deadline); a failed
                               one's launcher goes on. `recreate`: the controller restarts the gang by
                               recreating its pods (a pod could not be restarted in place): a failed
                               worker's launcher leaves at once, with the worker's code
      .joined(wait=...)        a replacement pod's launcher (GANGRUN_REPLACED > 0: the Job made this pod
                               for one that was deleted under the gang) runs nothing until the
                               controller orders the round to join, or None in time: it leaves
      .running(stop)           a round's worker started; `stop(order)` stops it for an order
      .ended(code, wait=...)   the round's worker ended: the order to go on with (one that came while
                               it ran, or, for a failure, one that comes within `wait` seconds), or
                               None: the launcher leaves with the code. A launcher told nothing in time
                               leaves too, and JobSet restarts the gang by recreating it (as without
                               this option): a controller that is down or older costs time, never the
                               gang.

Orders are idempotent: one for a round this launcher has run or been told already changes nothing,
so the controller may repeat it (a push it could not confirm).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: How often a launcher waiting for an order looks whether it was told to stop (SIGTERM sets an Event,
#: which no condition hears).
LOOK = 0.05


@dataclass(frozen=True)
class Order:
    restart: int
    notice: dict[str, Any] | None = None
    recreate: bool = False


def parse(body: bytes) -> Order | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    restart, notice = doc.get("restart"), doc.get("notice")
    if not isinstance(restart, int) or isinstance(restart, bool) or restart < 0:
        return None
    if notice is not None and not isinstance(notice, dict):
        return None
    return Order(restart=restart, notice=notice, recreate=doc.get("recreate") is True)


class Rounds:
    def __init__(self, restart: int, *, stopping: threading.Event, replaced: bool = False) -> None:
        self.restart = restart
        self.replaced = replaced  # this pod replaces a lost one: it runs nothing until told the round to join
        self.failed: int | None = None
        self._failed_at = 0.0
        self._order: Order | None = None
        self._stop: Callable[[Order], object] | None = None
        self._stopping = stopping
        self._changed = threading.Condition()

    def ready(self) -> bool:
        with self._changed:
            return self.failed is None and not self.replaced

    def report(self) -> str:
        with self._changed:
            at = round(self._failed_at, 3) if self.failed is not None else None
            doc = {"restart": self.restart, "failed": self.failed, "at": at}
            return json.dumps({**doc, "replaced": True} if self.replaced else doc)

    def ordered(self, body: bytes) -> bool:
        order = parse(body)
        if order is None:
            return False
        with self._changed:
            # a replacement has run no round yet: its own is news too (a readmitted gang's pods start it together)
            told = self._order.restart if self._order is not None else self.restart - self.replaced
            waiting = self.failed is not None or self.replaced
            if order.restart <= told or (order.recreate and not waiting):
                return True  # known already, or a recreate for a worker that is running: nothing to do
            self._order = order
            self._changed.notify_all()
            stop = None if waiting else self._stop
        if stop is not None:
            stop(order)
        return True

    def running(self, stop: Callable[[Order], object]) -> None:
        with self._changed:
            self._stop = stop
            order = self._order
        if order is not None:  # it came while the round was starting
            stop(order)

    def ended(self, code: int, *, wait: float, now: Callable[[], float] = time.monotonic) -> Order | None:
        with self._changed:
            self._stop = None
            if self._order is None and code != 0:
                self.failed, self._failed_at = code, time.time()
                self._wait(wait, now)
            return self._go_on()

    def joined(self, *, wait: float, now: Callable[[], float] = time.monotonic) -> Order | None:
        """A replacement's first round: the order of the round to join, or None when none came in `wait`
        seconds (or a stop, or a recreate, came instead)."""
        with self._changed:
            self._wait(wait, now)
            return self._go_on()

    def _wait(self, wait: float, now: Callable[[], float]) -> None:
        deadline = now() + wait
        while self._order is None and not self._stopping.is_set() and now() < deadline:
            self._changed.wait(timeout=min(LOOK, max(deadline - now(), 0.0)))

    def _go_on(self) -> Order | None:
        order = self._order
        if order is None or order.recreate:
            return None
        self.restart, self.failed, self.replaced, self._order = order.restart, None, False, None
        return order
