"""No orphaned processes: what a worker starts in another session or process group ends with it, with
`local down`, and at the next `local up` after its daemon was killed."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangrun._backends.local import LocalBackend

from .conftest import kill_daemon, phase, wait_for

# A worker that starts children its process group does not hold, then runs HOLD seconds:
# a new session (Popen start_new_session), a double fork into a new session (a daemonised tool), and
# one that clears its environment as well (unless CLEAR=0). Each sleeps for TOKEN seconds, which names them.
SPAWNER = """
import os, subprocess, sys, time
token = os.environ["TOKEN"]
subprocess.Popen(["sleep", token], start_new_session=True)
if os.environ.get("CLEAR", "1") == "1":
    subprocess.Popen(["env", "-i", "sleep", token], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", token])
    os._exit(0)
os.wait()
time.sleep(float(os.environ.get("HOLD", "0")))
"""


def _children_named(token: str) -> list[int]:
    """The live `sleep <token>` processes."""
    found = []
    want = f"sleep\0{token}\0".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmd.endswith(want) and state != "Z":
            found.append(int(entry.name))
    return found


def _eventually(token: str, count: int, *, within: float = 10.0) -> list[int]:
    """The `sleep <token>` processes once there are `count` of them, or after `within` seconds."""
    deadline = time.monotonic() + within
    while len(left := _children_named(token)) != count and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture
def token() -> Iterator[str]:
    """A sleep length no other process uses; whatever still sleeps it at the end is killed."""
    value = f"{3000 + int.from_bytes(os.urandom(2), 'big')}.{os.getpid() % 1000}"
    yield value
    for pid in _children_named(value):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def spawner(tmp_path: Path) -> Path:
    path = tmp_path / "spawner.py"
    path.write_text(SPAWNER)
    return path


def test_a_child_in_another_session_ends_with_its_worker(backend: LocalBackend, manifest, spawner: Path,
                                                          token: str) -> None:
    backend.submit(manifest("orphaner", nodes=2, command=[sys.executable, str(spawner)], env={"TOKEN": token}))
    wait_for(backend, "orphaner", phase("Succeeded"))
    assert _eventually(token, 0) == [], "the workers' children outlived the gang"


def test_local_down_ends_every_process_the_workers_started(backend: LocalBackend, manifest, spawner: Path,
                                                           token: str) -> None:
    backend.submit(manifest("orphaner", nodes=2, command=[sys.executable, str(spawner)],
                            env={"TOKEN": token, "HOLD": "120"}))
    wait_for(backend, "orphaner", phase("Running"))
    assert len(_eventually(token, 6)) == 6
    backend.down()
    assert _eventually(token, 0) == [], "processes the workers started outlived `local down`"


def test_local_up_ends_what_the_workers_of_a_killed_daemon_left(backend: LocalBackend, manifest, spawner: Path,
                                                                token: str) -> None:
    backend.submit(manifest("orphaner", nodes=1, command=[sys.executable, str(spawner)],
                            env={"TOKEN": token, "HOLD": "120", "CLEAR": "0"}))
    wait_for(backend, "orphaner", phase("Running"))
    assert len(_eventually(token, 2)) == 2
    kill_daemon(backend)  # its worker dies with it (PR_SET_PDEATHSIG); the children in other sessions do not
    time.sleep(0.5)
    left = _children_named(token)
    backend.up()
    assert _eventually(token, 0) == [], f"the next `local up` left {left} running"
    backend.cancel("orphaner")
    wait_for(backend, "orphaner", phase("Aborted"))
