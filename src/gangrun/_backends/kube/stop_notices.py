"""Writing the stop notices a sync asks for (`AnnotatePods`) onto the worker pods: one-annotation patches,
every pod at once, alongside the status write (a notice is no part of the task's state, and for a stop
Kueue starts every millisecond counts against its suspend). Each notice is also pushed to the pod's
launcher (POST on its report port), where it lands in milliseconds, well before the kubelet projects
the annotation (`gangrun._worker.pod_notice`); a push that fails (a NetworkPolicy, a launcher not
serving yet) leaves the annotation to tell the worker.

When the same sync deletes a JobSet, every notice is on its pod before the delete; when Kueue stops
the gang instead, nothing is ordered after the notices and the sync moves on, a failed one logged.

A sync reads its pods from the informer's cache, which learns of a notice when the patch's watch event
comes back: a sync in between (the next event of the same stop, a drain's eviction right after its
cordon) would see the pod untold and tell it a cause the first notice is meant to outlive. So the
notices written stay known here from the moment they are asked for until the cache shows them, or the
write failed; `overlay` lays them over the cached pods a sync reads.

The launchers take one more kind of push the same way: an in-place restart's order (`OrderRestart`, POST
/restart; `in_place.py`). `ask` reads what launchers say on GET /round, all at once, each cut short: a
sync waits for it, at most `PUSH_TIMEOUT`.
"""

from __future__ import annotations

import http.client
import logging
import threading
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from gangrun._backends.kube import crd
from gangrun._backends.kube.client import PODS, KubeApi
from gangrun._backends.kube.in_place import OrderRestart
from gangrun._backends.kube.live_reports import http_get
from gangrun._backends.kube.reconcile import AnnotatePods
from gangrun._errors import NotFound

log = logging.getLogger(__name__)
FANOUT = 16  # pod patches of stop notices in flight at once
# Pushes wait on the pods, not the API server: more at once, each cut short (a launcher on the cluster
# network answers in milliseconds; an address nobody answers must not hold the next gang's pushes).
PUSH_FANOUT, PUSH_TIMEOUT = 64, 0.5
TOLD_LIMIT = 10_000  # notices written that no sync has seen cached yet, kept at most


class StopNotices:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._pool = ThreadPoolExecutor(max_workers=FANOUT, thread_name_prefix="stop-notice")
        self._pushes = ThreadPoolExecutor(max_workers=PUSH_FANOUT, thread_name_prefix="stop-notice-push")
        self._lock = threading.Lock()
        self._told: dict[tuple[str, str], str] = {}  # (namespace, pod) -> the notice written, not yet cached

    def write(self, namespace: str, actions: Sequence[Any]) -> list[Future[None]]:
        """Start writing the notices of `actions`, every pod at once, the pushes first. A pod already gone
        needs none; any other error of a patch surfaces from its future (a push's is only logged)."""
        def one(name: str, notice: str) -> None:
            try:
                self.api.patch(PODS, namespace, name, {"metadata": {"annotations": {
                    crd.STOP_NOTICE_ANNOTATION: notice}}})
            except NotFound:
                self._forget(namespace, name, notice)
            except BaseException:
                self._forget(namespace, name, notice)  # not written: the next sync tells it again
                raise

        notices = [a for a in actions if isinstance(a, AnnotatePods)]
        with self._lock:
            self._told.update({(namespace, name): a.notice for a in notices for name in a.names})
            for key in list(self._told)[:max(len(self._told) - TOLD_LIMIT, 0)]:
                del self._told[key]  # the oldest: a pod that went before a sync saw its notice cached
        for a in notices:  # first, and never waited for: a push lands in milliseconds or not at all
            for url in a.urls:
                self._pushes.submit(self.push, url, a.notice.encode())
        for order in (a for a in actions if isinstance(a, OrderRestart)):
            for url in order.urls:
                self._pushes.submit(self.push, url, order.body.encode())
        return [self._pool.submit(one, name, a.notice) for a in notices for name in a.names]

    def overlay(self, namespace: str, pods: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """`pods` as the cache holds them, each with the notice written to it that the cache does not
        show yet. A notice the cache shows is forgotten here."""
        out = []
        with self._lock:
            for pod in pods:
                md = pod.get("metadata") or {}
                key = (namespace, str(md.get("name") or ""))
                told = self._told.get(key)
                cached = (md.get("annotations") or {}).get(crd.STOP_NOTICE_ANNOTATION)
                if told is None or cached == told:
                    self._told.pop(key, None)
                    out.append(pod)
                    continue
                annotations = {**(md.get("annotations") or {}), crd.STOP_NOTICE_ANNOTATION: told}
                out.append({**pod, "metadata": {**md, "annotations": annotations}})
        return out

    def _forget(self, namespace: str, name: str, notice: str) -> None:
        with self._lock:
            if self._told.get((namespace, name)) == notice:
                del self._told[(namespace, name)]

    @staticmethod
    def push(url: str, body: bytes) -> None:
        request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=PUSH_TIMEOUT):
                pass
        except (OSError, ValueError, http.client.HTTPException) as e:  # urllib's own errors are OSErrors
            log.debug("stop notice not pushed to %s: %s", url, e)

    def ask(self, targets: Mapping[str, str]) -> dict[str, str]:
        """GET each of `targets` (pod name -> url) at once: the answers of those that gave one."""
        def get(url: str) -> str | None:
            try:
                return http_get(url, PUSH_TIMEOUT)
            except (OSError, ValueError, http.client.HTTPException) as e:
                log.debug("no round from %s: %s", url, e)
                return None

        asked = {name: self._pushes.submit(get, url) for name, url in targets.items()}
        return {name: text for name, done in asked.items() if (text := done.result()) is not None}

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._pushes.shutdown(wait=False)


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
