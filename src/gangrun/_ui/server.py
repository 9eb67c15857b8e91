"""The web page's HTTP server: static files from the package, and JSON read from a backend.

    GET /                                  the page (static/index.html)
    GET /static/<file>                     its script and style sheet
    GET /api/tasks                         {"backend", "now", "tasks": [task_row, ...]}
    GET /api/tasks/<name>                  {"row", "timeline", "events"}: one task, its lanes and timeline
    GET /api/tasks/<name>/logs?rank=&attempt=   {"lines", "truncated", "rank", "attempt", "attempts", "ranks"}:
                                           the newest lines only (LOG_LINES_MAX, LOG_TAIL_BYTES)
    GET /api/tasks/<name>/logs.txt?rank=&attempt=   the whole output as text, streamed a chunk at a time

An unknown task answers 404, a backend that failed 502, each with {"error": "<the one-line message>"}.
Requests are served on threads, so a slow one never holds up another; a backend that is not
`threadsafe` is called by one thread at a time (one lock). It binds to 127.0.0.1 unless told
otherwise: the page shows commands, logs and paths, and has no login. A request whose Host header is
not a name of this server (see `Hosts`) is answered 421: a page of a foreign origin cannot read the
tasks through a DNS name it points at 127.0.0.1.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from gangrun._api.watch import world_size
from gangrun._backends.base import Backend, SupportsLogTail
from gangrun._backends.clock import Clock, system_clock
from gangrun._core.lanes import task_row, timeline
from gangrun._errors import BackendError, GangrunError, UsageError

STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
LOG_LINES_MAX = 5000  # the newest lines of one rank and attempt: enough to read, small enough to redraw
LOG_TAIL_BYTES = 2 << 20  # read from the end of the log for them, whatever its size
LINE_SHOWN_MAX = 4 * LOG_TAIL_BYTES // LOG_LINES_MAX  # a longer line is cut on the page (logs.txt has it whole)
STREAM_CHUNK = 1 << 16  # logs.txt is sent in pieces of about this size
EVENTS_MAX = 500
SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


class Pages:
    """The JSON documents, read from one backend; no HTTP here."""

    def __init__(self, backend: Backend, *, clock: Clock = system_clock) -> None:
        self.backend, self.clock = backend, clock
        self._lock: Any = nullcontext() if getattr(backend, "threadsafe", False) else threading.Lock()

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
        """The newest lines of one rank and attempt: read from the log's end where the backend can, else
        streamed through a window of LOG_LINES_MAX lines; never the whole log at once."""
        with self._lock:
            view = self.backend.get(name)
            if isinstance(self.backend, SupportsLogTail):
                lines, truncated = self.backend.log_tail(name, rank=rank, attempt=attempt, max_lines=LOG_LINES_MAX,
                                                         max_bytes=LOG_TAIL_BYTES)
            else:
                stream = self.backend.logs(name, rank=rank, attempt=attempt)
        if not isinstance(self.backend, SupportsLogTail):  # a log stream is read outside the lock
            window: deque[str] = deque(maxlen=LOG_LINES_MAX)
            seen = 0
            for line in stream:
                window.append(line[:LINE_SHOWN_MAX])
                seen += 1
            lines, truncated = list(window), seen > LOG_LINES_MAX
        return {"lines": lines, "truncated": truncated, "rank": rank,
                "attempt": attempt or view["attempt"], "attempts": view["attempt"], "ranks": world_size(view)}

    def log_text(self, name: str, *, rank: int | None, attempt: int | None) -> Iterator[bytes]:
        """The whole output, in pieces of about STREAM_CHUNK bytes. The backend is asked for the lines
        before the first piece, so that a mistake (an unknown task or rank) is an error, not a body."""
        with self._lock:
            self.backend.get(name)
            lines = self.backend.logs(name, rank=rank, attempt=attempt)
        first = next(lines, None)  # a log stream is read outside the lock: it holds no one up

        def pieces() -> Iterator[bytes]:
            if first is None:
                return
            buf, size = [first + "\n"], len(first) + 1
            for line in lines:
                buf.append(line + "\n")
                size += len(line) + 1
                if size >= STREAM_CHUNK:
                    yield "".join(buf).encode()
                    buf, size = [], 0
            yield "".join(buf).encode()

        return pieces()


class Hosts:
    """Which Host headers the server answers: the address it is bound to, the loopback names and
    addresses, any IP address (a page of a foreign origin cannot be reached under one of ours), this
    machine's name when bound to every address, and the names the user allows (`--allow-host`).
    A DNS name an attacker points at 127.0.0.1 is none of these."""

    def __init__(self, bound: str, allowed: Iterable[str] = ()) -> None:
        names = set(LOOPBACK_NAMES) | {bound.strip("[]").lower()} | {a.strip().lower() for a in allowed}
        if _wildcard(bound):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        self.names = frozenset(n for n in names if n)

    def allows(self, header: str | None) -> bool:
        if header is None:  # an HTTP/1.0 client that sends none is not a browser
            return True
        host = _strip_port(header.strip()).lower().rstrip(".")
        if host in self.names:
            return True
        try:
            ipaddress.ip_address(host)
            return True
        except ValueError:
            return False


class UiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: Pages, host: str, port: int, *, allow_hosts: Iterable[str] = ()) -> None:
        self.pages = pages
        self.hosts = Hosts(host, allow_hosts)
        self.address_family = _family(host, port)
        super().__init__((host.strip("[]"), port), _Handler)

    @property
    def exposed(self) -> bool:
        """Whether it listens on every address of the machine (--host 0.0.0.0 or ::), not one."""
        return _wildcard(str(self.server_address[0]))

    @property
    def url(self) -> str:
        """The address to open: when it listens on every address, one that other machines can reach
        (the first network interface's address, else this machine's name)."""
        host, port = str(self.server_address[0]), self.server_address[1]
        if self.exposed:
            host = next(iter(interface_addresses()), socket.gethostname())
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    @property
    def local_url(self) -> str:
        """The same page through the loopback (for tests and this machine's browser)."""
        host, port = str(self.server_address[0]), self.server_address[1]
        if self.exposed:
            host = "::1" if self.address_family == socket.AF_INET6 else "127.0.0.1"
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def serve(backend: Backend, *, host: str = "127.0.0.1", port: int = 8265,
          allow_hosts: Iterable[str] = ()) -> UiServer:
    """A server bound to `host`:`port` (0 picks a free port), not yet serving: call `serve_forever()`.
    `allow_hosts`: more names the page may be reached under (the Host header), past the loopback ones."""
    try:
        return UiServer(Pages(backend), host, port, allow_hosts=allow_hosts)
    except socket.gaierror as e:
        raise UsageError(f"--host {host}: not an address or a name this machine resolves ({e.strerror})") from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: already in use on {host}; choose another (--port 0 picks a "
                             "free one)") from None
        if e.errno == errno.EACCES:
            raise UsageError(f"--port {port}: not allowed to listen on it here (ports below 1024 need "
                             "privileges)") from None
        if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise UsageError(f"--host {host}: not an address of this machine ({e.strerror or e})") from None
        raise UsageError(f"cannot listen on {host} port {port}: {e.strerror or e}") from None


def start(backend: Backend, *, host: str = "127.0.0.1", port: int = 0, allow_hosts: Iterable[str] = ()) -> UiServer:
    """`serve`, serving from a daemon thread; `shutdown()` stops it."""
    server = serve(backend, host=host, port=port, allow_hosts=allow_hosts)
    threading.Thread(target=server.serve_forever, name="gangrun-ui", daemon=True).start()
    return server


def interface_addresses() -> list[str]:
    """The IPv4 addresses of this machine's network interfaces, loopback left out (Linux; [] elsewhere)."""
    found = []
    for _index, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # an interface without an IPv4 address
                continue
        address = socket.inet_ntoa(raw[20:24])
        if not ipaddress.ip_address(address).is_loopback:
            found.append(address)
    return found


def _family(host: str, port: int) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 address or a name that resolves only to one, else AF_INET. Raises gaierror."""
    infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    families = [info[0] for info in infos]
    return socket.AF_INET if socket.AF_INET in families else families[0]


def _wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def _strip_port(host: str) -> str:
    if host.startswith("["):  # [::1]:8265
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class _Handler(BaseHTTPRequestHandler):
    server: UiServer

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        host = self.headers.get("Host")
        if not self.server.hosts.allows(host):
            name = _strip_port(str(host).strip())
            self._json(421, {"error": f"this server does not answer to the name {name!r} (the Host header); "
                                      f"if it is yours, start it with `gangrun ui --allow-host {name}`"})
            return
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
        elif sub == "logs.txt":
            rank = query.get("rank", [""])[0]
            body = self.server.pages.log_text(name, rank=None if rank in ("all", "") else _number(query, "rank", 0),
                                              attempt=_number(query, "attempt", None))
            self._stream(body)
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

    def _stream(self, body: Iterator[bytes]) -> None:
        """200 and `body` as it comes, ended by closing the connection (HTTP/1.0: no length known)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            for piece in body:
                self.wfile.write(piece)
        except (BrokenPipeError, ConnectionResetError):  # the reader went away
            pass
        self.close_connection = True

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
