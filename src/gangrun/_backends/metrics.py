"""The Prometheus series of gangrun, on `prometheus-client`, for any backend's process to export.

    gangrun_tasks{phase}                       gauge     tasks by phase
    gangrun_queue_pending_gangs{queue}         gauge     gangs waiting for admission or re-admission, by queue
    gangrun_task_goodput_ratio{task}           gauge     each task's goodput, where the backend accounts it (B5)
    gangrun_preemptions_total{cause}           counter   evictions of started gangs, by Kueue reason
    gangrun_readmission_wait_seconds           histogram time from an eviction to the gang's readmission
    gangrun_attempts_total{outcome}            counter   ended attempts by outcome
    gangrun_reconcile_seconds                  histogram reconcile latency
    gangrun_reconcile_errors_total             counter   reconciles that failed and were retried

Counters and histograms are fed as things happen (`preemptions.inc(cause)`); the gauges are set from
the task views at scrape time (`observe_views(views)`), so a process that holds its tasks' views (the
Kubernetes controller's cache, the local daemon's table) exports the same series from the same
documents: a `TaskView`, or the few fields of it the gauges read (`GaugedTask`), typed either way.
Each `Metrics` has its own registry: two in one process (tests) never collide. `serve` answers
`/metrics` (and health probes) over HTTP from a daemon thread.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypedDict

import prometheus_client as prom

from gangrun._core.timeline import Event, EventType
from gangrun._core.view_types import TaskView

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)
CONTENT_TYPE = prom.CONTENT_TYPE_LATEST
WAITING_PHASES = frozenset({"Queued", "WaitingForResources"})


class Goodput(TypedDict):
    goodput: float


class GaugedTask(TypedDict):
    """The fields of a task view the gauges read, for a process that has the task but not its whole view."""

    name: str | None
    phase: str | None
    queue: str | None
    eviction: object  # open while the gang waits for re-admission
    accounting: Goodput | None


class LabeledCounter:
    """A counter incremented with its label values in order: `inc("Preempted")`."""

    def __init__(self, name: str, help_: str, labels: tuple[str, ...], registry: prom.CollectorRegistry) -> None:
        self._name, self._labels, self._registry = name, labels, registry
        self._counter = prom.Counter(name, help_, labels, registry=registry)

    def inc(self, *values: str, by: float = 1.0) -> None:
        (self._counter.labels(*values) if self._labels else self._counter).inc(by)

    def value(self, *values: str) -> float:
        found = self._registry.get_sample_value(f"{self._name}_total", dict(zip(self._labels, values, strict=True)))
        return found or 0.0


class LabeledGauge:
    """A gauge whose label sets are replaced together (`set_all`): a phase with no task left disappears."""

    def __init__(self, name: str, help_: str, labels: tuple[str, ...], registry: prom.CollectorRegistry) -> None:
        self._gauge = prom.Gauge(name, help_, labels, registry=registry)

    def set_all(self, values: Mapping[tuple[str, ...], float]) -> None:
        self._gauge.clear()
        for labels, v in values.items():
            self._gauge.labels(*labels).set(v)


class Timing:
    """A histogram with a count for tests and probes."""

    def __init__(self, name: str, help_: str, buckets: tuple[float, ...], registry: prom.CollectorRegistry) -> None:
        self._name, self._registry = name, registry
        self._histogram = prom.Histogram(name, help_, buckets=buckets, registry=registry)

    def observe(self, v: float) -> None:
        self._histogram.observe(v)

    @property
    def count(self) -> int:
        return int(self._registry.get_sample_value(f"{self._name}_count") or 0)


class Metrics:
    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self.tasks = LabeledGauge("gangrun_tasks", "ClusteredTasks by phase", ("phase",), r)
        self.queue_length = LabeledGauge("gangrun_queue_pending_gangs",
                                         "gangs waiting for admission or re-admission, by queue", ("queue",), r)
        self.goodput = LabeledGauge("gangrun_task_goodput_ratio",
                                    "time the gang ran minus work lost, over the time since submission", ("task",), r)
        self.preemptions = LabeledCounter("gangrun_preemptions", "Kueue evictions of started gangs, by cause",
                                          ("cause",), r)
        self.readmission_wait = Timing("gangrun_readmission_wait_seconds",
                                       "time from an eviction to the gang's readmission", WAIT_BUCKETS, r)
        self.attempts = LabeledCounter("gangrun_attempts", "ended attempts by outcome", ("outcome",), r)
        self.reconcile = Timing("gangrun_reconcile_seconds", "reconcile latency", LATENCY_BUCKETS, r)
        self.errors = LabeledCounter("gangrun_reconcile_errors", "reconciles that failed and were retried", (), r)

    def observe_views(self, views: Iterable[TaskView | GaugedTask]) -> None:
        """Set the gauges from the tasks' `get -o json` views: phases, waiting gangs per queue, goodput."""
        phases: Tally[tuple[str, ...]] = Tally()
        waiting: Tally[tuple[str, ...]] = Tally()
        goodput: dict[tuple[str, ...], float] = {}
        for v in views:
            phase = str(v.get("phase") or "Pending")
            phases[(phase,)] += 1
            if phase in WAITING_PHASES or (phase == "Running" and v.get("eviction")):
                waiting[(str(v.get("queue") or "default"),)] += 1
            accounting = v.get("accounting")
            if isinstance(accounting, Mapping) and isinstance(accounting.get("goodput"), (int, float)):
                goodput[(str(v.get("name")),)] = float(accounting["goodput"])
        self.tasks.set_all(phases)
        self.queue_length.set_all(waiting)
        self.goodput.set_all(goodput)

    def count(self, event: Event) -> None:
        """Feed the counters from one timeline event as it is recorded: both backends record the same
        typed events for the same transitions, so they count the same."""
        kind = event.type
        if kind in (EventType.PREEMPTED, EventType.EVICTED):
            self.preemptions.inc(str(event.data.get("reason") or kind.value))
        elif kind is EventType.READMITTED:
            self.readmission_wait.observe(float(event.data.get("waitedSeconds") or 0.0))
        elif kind is EventType.ATTEMPT_ENDED:
            self.attempts.inc(str(event.data.get("outcome") or "Ended"))
        elif kind in (EventType.SUCCEEDED, EventType.FAILED, EventType.ABORTED):
            self.attempts.inc(kind.value)

    def render(self) -> str:
        """The text exposition (Content-Type `CONTENT_TYPE`)."""
        return prom.generate_latest(self.registry).decode()


def http_answer(request: bytes, render: Callable[[], str]) -> bytes:
    """The whole HTTP/1.0 answer to `request` (its head at least): `render()` for GET /metrics, else 404.
    For a single-threaded server that cannot use `serve`'s thread."""
    line = request.split(b"\r\n", 1)[0].split()
    path = line[1].split(b"?")[0] if len(line) > 1 else b""
    if path == b"/metrics":
        status, ctype, body = "200 OK", CONTENT_TYPE, render().encode()
    else:
        status, ctype, body = "404 Not Found", "text/plain; charset=utf-8", b"not found\n"
    return f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def serve(port: int, routes: dict[str, Callable[[], tuple[int, str]]], *,
          host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve GET routes (`path -> () -> (status, text)`) on `host`:`port` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            route = routes.get(path)
            status, text = route() if route else (404, "not found\n")
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE if path == "/metrics" else "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # probes every few seconds would flood the log
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    return server
