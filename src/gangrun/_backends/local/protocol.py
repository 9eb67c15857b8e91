"""The RPC between `LocalBackend` and the daemon: one JSON line each way over a Unix socket.

    request   {"op": "submit", "args": {...}}\\n
    response  {"ok": true, "result": ...}\\n  |  {"ok": false, "error": {"type": "UsageError", "message": "..."}}\\n

One request per connection keeps the daemon's single-threaded loop simple. Errors travel by the
name of their class in `gangrun._errors` with their attributes, so the client re-raises the very
error the daemon raised (a `SpecError` keeps its `field`, a user mistake stays a `UsageError`).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from gangrun import _errors
from gangrun._errors import DaemonUnavailable, GangrunError

MAX_LINE = 64 * 2**20


def received(conn: socket.socket, buf: bytearray, *, end: bytes, limit: int) -> bool:
    """Read what the non-blocking `conn` has into `buf`. Returns True once the request is whole (`end`
    arrived, the peer closed, or `limit` bytes came: the caller stops watching `conn`), False to wait."""
    try:
        chunk = conn.recv(1 << 16)
    except BlockingIOError:
        return False
    except OSError:
        chunk = b""
    buf += chunk
    return not (chunk and end not in buf and len(buf) < limit)


def reply(conn: socket.socket, data: bytes) -> None:
    """Send a whole answer and close the connection; a client gone already is no error."""
    try:
        conn.sendall(data)
    except OSError:
        pass
    finally:
        conn.close()


def encode(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, separators=(",", ":"), default=str) + "\n").encode()


def ok(result: Any) -> bytes:
    return encode({"ok": True, "result": result})


def error(exc: BaseException) -> bytes:
    if isinstance(exc, GangrunError):
        fields = {k: v for k, v in vars(exc).items() if isinstance(v, str | int | float | bool | None)}
        return encode({"ok": False, "error": {"type": type(exc).__name__, "message": str(exc), "fields": fields}})
    return encode({"ok": False, "error": {"type": "BackendError", "message": f"{type(exc).__name__}: {exc}"}})


def decode_error(err: dict[str, Any]) -> GangrunError:
    """The error the daemon raised: same class, message and attributes (a BackendError if unknown)."""
    cls = getattr(_errors, str(err.get("type", "")), None)
    if not (isinstance(cls, type) and issubclass(cls, GangrunError)):
        cls = _errors.BackendError
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(err.get("message", "")))
    fields = err.get("fields")
    if isinstance(fields, dict):
        exc.__dict__.update(fields)
    return exc


def call(path: Path, op: str, args: dict[str, Any] | None = None, *, timeout: float = 30.0) -> Any:
    """Send one request and return its result. Raises DaemonUnavailable when nobody answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(encode({"op": op, "args": args or {}}))
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > MAX_LINE:
                    raise DaemonUnavailable("the local control plane sent an oversized answer")
    except (FileNotFoundError, ConnectionRefusedError) as e:
        raise DaemonUnavailable(f"the local control plane is not running ({e.strerror})") from e
    except OSError as e:  # timeouts included
        raise DaemonUnavailable(f"the local control plane did not answer {op!r}: {e}") from e
    if not buf.endswith(b"\n"):  # no answer, or one cut short by the daemon's death
        raise DaemonUnavailable(f"the local control plane closed the connection during {op!r}")
    doc = json.loads(buf)
    if not doc.get("ok"):
        raise decode_error(doc.get("error") or {})
    return doc.get("result")
