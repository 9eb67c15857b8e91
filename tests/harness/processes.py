"""The processes of a test cluster: each in its own process group, logged to a file, and killed with its group
when the test is done, at interpreter exit and (``PR_SET_PDEATHSIG``) when the Python process dies.

Shared by the control plane (etcd, the API server, kwok, JobSet, Kueue, a test's ``gangrun controller``), the
real node (containerd, the kubelet, CoreDNS) and the Flyte connector service.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Every process started here and not ended yet: what the exit hook kills.
LIVE: list[subprocess.Popen] = []


class ControlPlaneError(RuntimeError):
    """A component failed to start or died."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process's group, SIGKILL it after `grace` seconds."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # The leader may be gone while children of its group live on: kill the group regardless.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def end(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Kill the process's group and forget it."""
    kill_group(proc, grace)
    with contextlib.suppress(ValueError):
        LIVE.remove(proc)


@atexit.register
def _kill_all_at_exit() -> None:
    for proc in reversed(LIVE):
        kill_group(proc, grace=3.0)
    LIVE.clear()


@dataclass
class Component:
    name: str
    proc: subprocess.Popen
    log: Path
    core: bool = True  # part of the control plane (False: spawned by a test)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def spawn(name: str, argv: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> Component:
    """Start `argv` in a process group of its own, its output appended to `log`. It talks to loopback only:
    no proxies, no KUBECONFIG but the one `env` gives."""
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "kubeconfig")}
    full_env["NO_PROXY"] = full_env["no_proxy"] = "127.0.0.1,localhost"
    full_env.update(env or {})
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                                cwd=cwd, start_new_session=True, preexec_fn=die_with_parent)
    LIVE.append(proc)
    return Component(name, proc, log)


def respawn(components: list[Component], name: str, start: Callable[[str, list[str]], Component]) -> Component:
    """Crash the component `name` of `components` (SIGKILL to its process group: no shutdown code runs) and start
    its command line again with `start`, in its place, as a supervisor restarts a process; what it keeps on disk
    (etcd's data) stays. `start` gives it its default environment. Call it on a thread that outlives the new
    process (the main thread): the process is SIGKILLed when the thread that started it ends (PR_SET_PDEATHSIG).
    Returns the new component."""
    i, old = next((i, c) for i, c in enumerate(components) if c.name == name)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(old.proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        old.proc.wait(timeout=10)
    end(old.proc, grace=0)  # whatever is left of its group
    components.remove(old)
    new = start(name, [str(a) for a in old.proc.args])
    components.remove(new)
    components.insert(i, new)
    new.core = old.core
    return new
