"""The controller's live view of running workers' checkpoints: it polls each running gang's first worker.

A worker's termination message tells the controller its newest checkpoint when it exits. While it
runs, `gangrun.launch` serves the same report on the pod's `gangrun-report` port
(`gangrun._worker.live_report`). The controller polls it (unless `--no-live-reports`), so each commit reaches
the task's timeline (`gangrun events`, `describe`, the web page) and accounting while the gang runs, and
a gang's work at risk, and with it its boost under `--priority-boost`, falls at each commit rather than
at the gang's next stop. The workers need no
access to the API for it; the controller needs to reach pod IPs, as any metrics scraper does. A
worker that does not answer (a NetworkPolicy, an image with an older gangrun) has no live report,
and its termination message still corrects the figures at its stop.

    target(pod) -> url | None           a running first-node worker's report URL
    LiveReports(pods, on_change).poll_once()   one round: every target at once, changes noted
    LiveReports.run(stop)               a round every PERIOD seconds until `stop`
    LiveReports.of(pods) -> {uid: text} the newest report each of `pods` served
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gangrun._backends.kube.informer import Informer
from gangrun._backends.kube.render import report_url
from gangrun._checkpoint_report import LIMIT
from gangrun._core import jobset

log = logging.getLogger(__name__)
PERIOD = 5.0  # seconds between rounds: a boost steps at tens of node-seconds, a commit matters within a few
TIMEOUT = 1.0  # per request: a worker on the cluster network answers in milliseconds
FANOUT = 16  # requests in flight at once; a round of a thousand gangs takes well under PERIOD

Fetch = Callable[[str, float], str]


def http_get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read(4 * LIMIT)).decode("utf-8", errors="replace")


def target(pod: dict[str, Any]) -> str | None:
    """The live report's URL of a running worker of a gang's first node, whose rank 0 takes part in
    every commit; None for any other pod (`render.report_url`)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(jobset.JOB_COMPLETION_INDEX_KEY) != "0":
        return None
    return report_url(pod)


def _uid(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class LiveReports:
    def __init__(self, pods: Informer, on_change: Callable[[dict[str, Any]], None], *, fetch: Fetch = http_get,
                 period: float = PERIOD, timeout: float = TIMEOUT) -> None:
        self._pods, self._on_change, self._fetch = pods, on_change, fetch
        self._period, self._timeout = period, timeout
        self._lock = threading.Lock()
        self._reports: dict[str, str] = {}  # pod uid -> the newest report it served
        self._pool = ThreadPoolExecutor(max_workers=FANOUT, thread_name_prefix="live-report")

    def of(self, pods: Iterable[dict[str, Any]]) -> dict[str, str]:
        with self._lock:
            return {uid: text for pod in pods if (text := self._reports.get(uid := _uid(pod)))}

    def _get(self, url: str) -> str | None:
        try:
            return self._fetch(url, self._timeout)
        except (OSError, ValueError):  # not up yet, gone, unreachable: the termination message remains
            return None

    def poll_once(self) -> None:
        pods = self._pods.items()
        asked = [(pod, self._pool.submit(self._get, url)) for pod in pods if (url := target(pod))]
        answers = [(pod, answer.result()) for pod, answer in asked]  # syncs read `of` meanwhile, unblocked
        changed = []
        with self._lock:
            for pod, text in answers:
                if text and self._reports.get(_uid(pod)) != text:
                    self._reports[_uid(pod)] = text
                    changed.append(pod)
            alive = {_uid(p) for p in pods}
            for uid in [u for u in self._reports if u not in alive]:
                del self._reports[uid]
        for pod in changed:
            self._on_change(pod)

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(self._period):
                try:
                    self.poll_once()
                except Exception:  # a round that fails is tried again next period, never the controller's end
                    log.exception("polling the workers' live checkpoint reports failed")
        finally:
            self._pool.shutdown(wait=False)
