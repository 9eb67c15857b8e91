"""The controller's health and metrics endpoints; the series themselves are `gangrun._backends.metrics`
(on `prometheus-client`), shared with the local backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gangrun._backends.metrics import CONTENT_TYPE, Metrics

__all__ = ["Metrics", "serve"]


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
