"""The daemon's Prometheus endpoint, 127.0.0.1:<metrics port> when one is configured: served in the
daemon's own selector, with no HTTP thread, since the workers are started with a preexec_fn, which
threads would make unsafe.

    MetricsEndpoint.serve(port)        listen on `port` (0: not at all), again when it changed
    MetricsEndpoint.accept()           a scraper connected: read its request as it comes
    MetricsEndpoint.answer(conn, buf)  its request complete: the page
"""

from __future__ import annotations

import logging
import selectors
import socket
from collections.abc import Callable

from gangrun._backends.local import protocol
from gangrun._backends.metrics import http_answer

log = logging.getLogger("gangrun.local")
LISTEN = "http"  # the selector's key data of the listening socket
CONNECTION = "httpconn"  # and of a scraper's connection, with the request read so far


class MetricsEndpoint:
    def __init__(self, sel: selectors.BaseSelector, render: Callable[[], str]) -> None:
        self.sel, self.render = sel, render
        self.sock: socket.socket | None = None
        self.port = 0

    def serve(self, port: int) -> None:
        if port == self.port:
            return
        if self.sock is not None:
            self.sel.unregister(self.sock)
            self.sock.close()
            self.sock, self.port = None, 0
        if not port:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as e:
            sock.close()
            log.error("gangrun local control plane: cannot serve metrics on 127.0.0.1:%d: %s", port, e)
            return
        sock.listen(16)
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, (LISTEN,))
        self.sock, self.port = sock, port

    def accept(self) -> None:
        if self.sock is None:
            return
        conn, _ = self.sock.accept()
        conn.setblocking(False)
        self.sel.register(conn, selectors.EVENT_READ, (CONNECTION, conn, bytearray()))

    def answer(self, conn: socket.socket, buf: bytearray) -> None:
        if not protocol.received(conn, buf, end=b"\r\n\r\n", limit=1 << 16):
            return
        self.sel.unregister(conn)
        conn.setblocking(True)
        conn.settimeout(5)
        protocol.reply(conn, http_answer(bytes(buf), self.render))
