"""The web page's HTTP server: static files from the package, and JSON read from a backend.

    GET /                                  the page (static/index.html)
    GET /static/<file>                     its script and style sheet
    GET /api/tasks                         {"backend", "now", "tasks": [task_row, ...]}
    GET /api/tasks/<name>                  {"row", "timeline", "events"}: one task, its lanes and timeline
    GET /api/tasks/<name>/logs?rank=&attempt=   {"lines", "rank", "attempt", "attempts", "ranks"}

An unknown task answers 404, a backend that failed 502, each with {"error": "<the one-line message>"}.
Requests are served on threads; backend calls take turns (one lock), since a backend is not meant to
be called from several threads at once. It binds to 127.0.0.1 unless told otherwise: the page shows
commands, logs and paths, and has no login.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from gangrun._api.watch import world_size
from gangrun._backends.base import Backend
from gangrun._backends.clock import Clock, system_clock
from gangrun._core.lanes import task_row, timeline
from gangrun._errors import BackendError, GangrunError, UsageError

STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
LOG_LINES_MAX = 5000  # the newest lines of one rank and attempt: enough to read, small enough to redraw
EVENTS_MAX = 500


class Pages:
    """The JSON documents, read from one backend; no HTTP here."""

    def __init__(self, backend: Backend, *, clock: Clock = system_clock) -> None:
        self.backend, self.clock = backend, clock
        self._lock = threading.Lock()

    def tasks(self) -> dict[str, Any]:
        with self._lock:
            views = self.backend.list()
        return {"backend": getattr(self.backend, "name", ""), "now": self.clock().isoformat(),
                "tasks": [task_row(v) for v in views]}

    def task(self, name: str) -> dict[str, Any]:
        with self._lock:
            view = self.backend.get(name)
            events = [e.for_json() for e in self.backend.events(name)]
        return {"backend": getattr(self.backend, "name", ""), "row": task_row(view),
                "timeline": timeline(view, events, now=self.clock()),
                "events": events[-EVENTS_MAX:], "worldSize": world_size(view)}

    def logs(self, name: str, *, rank: int, attempt: int | None) -> dict[str, Any]:
        with self._lock:
            view = self.backend.get(name)
            lines = list(self.backend.logs(name, rank=rank, attempt=attempt))
        return {"lines": lines[-LOG_LINES_MAX:], "truncated": len(lines) > LOG_LINES_MAX, "rank": rank,
                "attempt": attempt or view["attempt"], "attempts": view["attempt"], "ranks": world_size(view)}


class UiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: Pages, host: str, port: int) -> None:
        self.pages = pages
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{'127.0.0.1' if shown == '0.0.0.0' else shown}:{port}/"


def serve(backend: Backend, *, host: str = "127.0.0.1", port: int = 8265) -> UiServer:
    """A server bound to `host`:`port` (0 picks a free port), not yet serving: call `serve_forever()`."""
    try:
        return UiServer(Pages(backend), host, port)
    except OSError as e:
        raise UsageError(f"--port {port}: cannot listen on {host}:{port}: {e.strerror or e}") from None


def start(backend: Backend, *, host: str = "127.0.0.1", port: int = 0) -> UiServer:
    """`serve`, serving from a daemon thread; `shutdown()` stops it."""
    server = serve(backend, host=host, port=port)
    threading.Thread(target=server.serve_forever, name="gangrun-ui", daemon=True).start()
    return server


class _Handler(BaseHTTPRequestHandler):
    server: UiServer

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        try:
            if path in ("/", "/index.html"):
                self._static("index.html")
            elif path.startswith("/static/") and path[len("/static/"):] in STATIC:
                self._static(path[len("/static/"):])
            elif path == "/api/tasks":
                self._json(200, self.server.pages.tasks())
            elif path.startswith("/api/tasks/"):
                self._task(unquote(path[len("/api/tasks/"):]), parse_qs(parts.query))
            else:
                self._json(404, {"error": f"no page {path}"})
        except UsageError as e:
            self._json(404, {"error": " ".join(str(e).split())})
        except BackendError as e:
            self._json(502, {"error": " ".join(str(e).split())})
        except GangrunError as e:
            self._json(400, {"error": " ".join(str(e).split())})

    def _task(self, rest: str, query: dict[str, list[str]]) -> None:
        name, _, sub = rest.partition("/")
        if not sub:
            self._json(200, self.server.pages.task(name))
        elif sub == "logs":
            self._json(200, self.server.pages.logs(name, rank=_number(query, "rank", 0),
                                                    attempt=_number(query, "attempt", None)))
        else:
            self._json(404, {"error": f"no page {rest}"})

    def _static(self, name: str) -> None:
        body = resources.files("gangrun._ui").joinpath("static", name).read_bytes()
        self._send(200, STATIC[name], body)

    def _json(self, status: int, doc: Any) -> None:
        self._send(status, "application/json", json.dumps(doc, default=str).encode())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # the page polls every second: no access log
        pass


def _number(query: dict[str, list[str]], key: str, default: int | None) -> Any:
    values = query.get(key)
    if not values or values[0] in ("", "current"):
        return default
    try:
        value = int(values[0])
    except ValueError:
        raise GangrunError(f"{key}: must be a whole number, got {values[0]!r}") from None
    if value < 0:
        raise GangrunError(f"{key}: must be >= 0, got {value}")
    return value
