"""A worker pod's live report: its checkpoints as the controller reads them while the gang runs.

`gangrun.launch` serves, over HTTP on GANGRUN_REPORT_PORT, exactly what the container's termination
message would say if the worker exited now (`gangrun._checkpoint_report`). The controller polls it
(`gangrun controller --priority-boost`), so it knows a running gang's newest commit as it happens,
without reading the checkpoint store and without the workers needing any access to the API.

    EventsTail(path).text()  → the report of the events file, reading only lines new since last time
    serve(port, tail, start, notice)
                             → a daemon HTTP server answering GET /start with `start.answer(query)` (the
                               first node's launcher: this start's id, for the other nodes' launchers),
                               then telling `start.answered(query)`, and every other GET with tail.text();
                               a POST /stop-notice (the controller's push of the stop notice, ahead of the
                               pod annotation's file) goes to `notice.pushed(body)` (`pod_notice.py`);
                               with `rounds` (an in-place restart, `in_place.py`): GET /ready (503 while
                               a failed worker waits), GET /round and POST /restart
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Protocol

from gangrun._checkpoint_report import Summary
from gangrun._core import worker_env as wenv

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer


class EventsTail:
    """The report of a growing events file. Only whole lines are read: a line being appended waits for
    the next look."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._offset = 0
        self._summary = Summary()
        self._lock = threading.Lock()

    def text(self) -> str:
        with self._lock:
            try:
                with open(self._path, "rb") as f:
                    f.seek(self._offset)
                    data = f.read()
            except OSError:
                return self._summary.text()  # nothing written yet
            end = data.rfind(b"\n") + 1
            for line in data[:end].decode("utf-8", errors="replace").splitlines():
                self._summary.add(line)
            self._offset += end
            return self._summary.text()


START_PATH = "/start"
NOTICE_LIMIT = 64 * 1024  # a notice is a cause, a message and a deadline


class NoticeTaker(Protocol):
    def pushed(self, body: bytes) -> bool:
        """A stop notice the controller pushed; False: the body is not one (400)."""
        ...


class RoundTaker(Protocol):
    def ready(self) -> bool: ...

    def report(self) -> str: ...

    def ordered(self, body: bytes) -> bool: ...


class StartAnswer(Protocol):
    def answer(self, query: str) -> str | None:
        """The body for GET /start?`query`; None: 503 (stopping)."""
        ...

    def answered(self, query: str) -> None:
        """The answer was sent (the process may leave once everyone it waits for was answered)."""
        ...


def serve(port: int, tail: EventsTail | None, start: StartAnswer | None = None,
          notice: NoticeTaker | None = None, rounds: RoundTaker | None = None) -> ThreadingHTTPServer | None:
    """Answer GET on `port` with the report (and GET /start?QUERY with `start`'s answer, 503 while it is
    None), POST /stop-notice with `notice`; None (and a line on stderr) when the port is taken.
    http.server is imported here, not by the launcher's start: a worker that has no first node's start
    id to serve starts before it."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                size = int(self.headers.get("Content-Length") or -1)
            except ValueError:
                size = -1
            take = {wenv.NOTICE_PATH: notice.pushed if notice is not None else None,
                    wenv.RESTART_PATH: rounds.ordered if rounds is not None else None}.get(self.path)
            if take is None:
                status = 404
            elif not 0 <= size <= NOTICE_LIMIT:
                status = 411 if size < 0 else 413
            else:
                status = 204 if take(self.rfile.read(size)) else 400
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            text: str | None = None
            if path == START_PATH and start is not None:
                text = start.answer(query)
                body, status = (text.encode(), 200) if text is not None else (b"stopping", 503)
            elif path == wenv.READY_PATH and rounds is not None:
                body, status = (b"ready", 200) if rounds.ready() else (b"worker failed", 503)
            elif path == wenv.ROUND_PATH and rounds is not None:
                body, status = rounds.report().encode(), 200
            elif tail is not None:
                body, status = tail.text().encode(), 200
            else:
                body, status = b"", 404
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            if text is not None and start is not None:
                start.answered(query)  # only now: a launcher that left at the ask would cut this answer off

        def log_message(self, format: str, *args: object) -> None:
            pass  # the worker's stderr is its log: a poll every few seconds does not belong there

    try:
        server = ThreadingHTTPServer(("", port), Handler)
    except OSError as e:
        print(f"gangrun.launch: cannot serve the live checkpoint report on port {port} ({e.strerror}); "
              f"the controller learns this worker's checkpoints when it exits", file=sys.stderr)
        return None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="live-report", daemon=True).start()
    return server
