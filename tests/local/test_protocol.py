"""The client side of the daemon's RPC against a stand-in server."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from gangrun._backends.local import protocol
from gangrun._errors import BackendError, DaemonUnavailable, SpecError, UsageError, WorkerEnvError


def answer_once(path: Path, reply: bytes) -> threading.Thread:
    """A server that reads one request, sends `reply` and closes the connection."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                conn.recv(1 << 16)
                conn.sendall(reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_an_answer_cut_short_is_daemon_unavailable_not_a_json_traceback(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    t = answer_once(path, b'{"ok": true, "res')  # the daemon died while it answered
    with pytest.raises(DaemonUnavailable, match="closed the connection during 'status'"):
        protocol.call(path, "status", timeout=5.0)
    t.join(5)


def test_a_whole_answer_is_returned(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    t = answer_once(path, protocol.ok({"pid": 7}))
    assert protocol.call(path, "ping", timeout=5.0) == {"pid": 7}
    t.join(5)


@pytest.mark.parametrize("raised", [
    pytest.param(SpecError("spec.nodes", "must be >= 1, got 0"), id="spec-error-keeps-its-field"),
    pytest.param(UsageError('unknown task "x"'), id="usage-error"),
    pytest.param(WorkerEnvError("RANK", "must be a whole number"), id="worker-env-error-keeps-its-variable"),
    pytest.param(DaemonUnavailable("shutting down"), id="backend-error"),
])
def test_an_error_raised_in_the_daemon_arrives_with_its_type_and_fields(tmp_path: Path, raised) -> None:
    path = tmp_path / "s.sock"
    t = answer_once(path, protocol.error(raised))
    with pytest.raises(type(raised)) as got:
        protocol.call(path, "submit", timeout=5.0)
    t.join(5)
    assert type(got.value) is type(raised) and str(got.value) == str(raised)
    assert vars(got.value) == vars(raised)


def test_an_unexpected_exception_arrives_as_a_backend_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    t = answer_once(path, protocol.error(KeyError("name")))
    with pytest.raises(BackendError, match="KeyError: 'name'"):
        protocol.call(path, "get", timeout=5.0)
    t.join(5)
