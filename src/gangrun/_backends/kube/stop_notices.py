"""Writing the stop notices a sync asks for (`AnnotatePods`) onto the worker pods: one-annotation patches,
every pod at once, alongside the status write (a notice is no part of the task's state, and for a stop
Kueue starts every millisecond counts against its suspend).

When the same sync deletes a JobSet, every notice is on its pod before the delete; when Kueue stops
the gang instead, nothing is ordered after the notices and the sync moves on, a failed one logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from gangrun._backends.kube.client import PODS, KubeApi
from gangrun._backends.kube.reconcile import AnnotatePods
from gangrun._errors import NotFound

log = logging.getLogger(__name__)
FANOUT = 16  # pod patches of stop notices in flight at once


class StopNotices:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._pool = ThreadPoolExecutor(max_workers=FANOUT, thread_name_prefix="stop-notice")

    def write(self, namespace: str, actions: Sequence[Any]) -> list[Future[None]]:
        """Start writing the notices of `actions`, every pod at once. A pod already gone needs none; any
        other error surfaces from its future."""
        def one(name: str, annotations: dict[str, str]) -> None:
            try:
                self.api.patch(PODS, namespace, name, {"metadata": {"annotations": annotations}})
            except NotFound:
                pass

        return [self._pool.submit(one, name, a.annotations)
                for a in actions if isinstance(a, AnnotatePods) for name in a.names]

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def settle(notices: Sequence[Future[None]], *, before_delete: bool) -> None:
    """`before_delete`: wait until every notice is on its pod (an error raises: the sync is retried);
    else let them finish on their own, logging those that fail."""
    for done in notices:
        if before_delete:
            done.result()
        else:
            done.add_done_callback(_log_failed)


def _log_failed(done: Future[None]) -> None:
    """A notice not written is a worker told no cause (it still gets SIGTERM and its grace): worth a line."""
    e = done.exception()
    if e is not None:
        log.warning("could not write a stop notice: %s", e)
