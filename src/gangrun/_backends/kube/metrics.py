"""Prometheus metrics and health endpoints, with no dependency beyond the standard library.

The controller needs five series and a text page; the text exposition format is small and stable,
so writing it here keeps the `kubernetes` extra to one package (docs/decisions/0001).

    gangrun_tasks{phase}                                   gauge   tasks by phase
    gangrun_preemptions_total{cause}                       counter evictions seen, by Kueue reason
    gangrun_readmission_wait_seconds                       histogram time from eviction to readmission
    gangrun_attempts_total{outcome}                        counter ended attempts by outcome
    gangrun_reconcile_seconds                              histogram reconcile latency
    gangrun_reconcile_errors_total                         counter
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    esc = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in values)
    return "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, esc, strict=True)) + "}"


class _Metric:
    kind = ""

    def __init__(self, name: str, help_: str, labels: tuple[str, ...] = ()) -> None:
        self.name, self.help, self.label_names = name, help_, labels
        self._lock = threading.Lock()
        self._values: dict[tuple[str, ...], float] = {}

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    kind = "counter"

    def inc(self, *labels: str, by: float = 1.0) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0.0) + by

    def value(self, *labels: str) -> float:
        return self._values.get(labels, 0.0)

    def render(self) -> list[str]:
        with self._lock:
            return self.header() + [f"{self.name}{_labels(self.label_names, k)} {v}" for k, v in
                                    sorted(self._values.items())]


class Gauge(Counter):
    kind = "gauge"

    def set_all(self, values: dict[tuple[str, ...], float]) -> None:
        with self._lock:
            self._values = dict(values)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_: str, buckets: tuple[float, ...]) -> None:
        super().__init__(name, help_)
        self.buckets = buckets
        self._counts = [0] * (len(buckets) + 1)
        self._sum = 0.0

    def observe(self, v: float) -> None:
        with self._lock:
            self._sum += v
            for i, b in enumerate(self.buckets):
                if v <= b:
                    self._counts[i] += 1
            self._counts[-1] += 1

    @property
    def count(self) -> int:
        return self._counts[-1]

    def render(self) -> list[str]:
        with self._lock:
            out = self.header()
            # _counts has one more slot than buckets (+Inf, written next): zip stops before it on purpose.
            out += [f'{self.name}_bucket{{le="{b}"}} {c}' for b, c in zip(self.buckets, self._counts, strict=False)]
            out += [f'{self.name}_bucket{{le="+Inf"}} {self._counts[-1]}', f"{self.name}_sum {self._sum}",
                    f"{self.name}_count {self._counts[-1]}"]
            return out


class Metrics:
    def __init__(self) -> None:
        self.tasks = Gauge("gangrun_tasks", "ClusteredTasks by phase", ("phase",))
        self.preemptions = Counter("gangrun_preemptions_total", "Kueue evictions of started gangs, by cause",
                                   ("cause",))
        self.readmission_wait = Histogram("gangrun_readmission_wait_seconds",
                                          "time from an eviction to the gang's readmission", WAIT_BUCKETS)
        self.attempts = Counter("gangrun_attempts_total", "ended attempts by outcome", ("outcome",))
        self.reconcile = Histogram("gangrun_reconcile_seconds", "reconcile latency", LATENCY_BUCKETS)
        self.errors = Counter("gangrun_reconcile_errors_total", "reconciles that failed and were retried")

    def render(self) -> str:
        parts: list[Counter | Histogram] = [self.tasks, self.preemptions, self.readmission_wait, self.attempts,
                                            self.reconcile, self.errors]
        return "\n".join(line for m in parts for line in m.render()) + "\n"


def serve(
    port: int, routes: dict[str, Callable[[], tuple[int, str]]], *, host: str = "127.0.0.1"
) -> ThreadingHTTPServer:
    """Serve GET routes (`path -> () -> (status, text)`) on `host`:`port` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?")[0])
            status, text = route() if route else (404, "not found\n")
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # probes every few seconds would flood the log
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    return server
