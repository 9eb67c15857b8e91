"""Starting and stopping worker processes so that none outlives its gang or its daemon.

Three guards, because one is not enough:

1. Every worker is its own process group leader (`process_group=0`), so a signal to the group also
   reaches whatever the worker forked (a torchrun agent, dataloader processes).
2. `PR_SET_PDEATHSIG(SIGKILL)` is set between fork and exec: if the daemon dies, even by SIGKILL, the
   kernel kills its workers. The flag survives exec. The check of `getppid()` right after closes the
   race where the daemon died before the flag was set. (`preexec_fn` is safe here: the daemon is
   single-threaded.)
3. A worker's descendants are not covered by (2), so the daemon records (pgid, start time) of every
   worker; on restart it kills what is left of those groups, matching start times so that a reused
   pid is never hit (`kill_leftovers`).

What a worker starts in another session or process group escapes all three: `orphans.py` ends it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1
_libc: ctypes.CDLL | None = None


def _prctl_deathsig() -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _preexec(parent: int) -> Callable[[], None]:
    def run() -> None:
        _prctl_deathsig()
        if os.getppid() != parent:  # the daemon died before the flag was set
            os._exit(137)

    return run


def spawn(argv: list[str], *, env: dict[str, str], cwd: str, log: Path) -> subprocess.Popen[bytes]:
    """Start one worker with its output appended to `log`. Raises OSError when it cannot start."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, process_group=0, preexec_fn=_preexec(os.getpid()),
                                close_fds=True)


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a worker's process group. Returns whether anything was there to receive it."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields else None


def kill_leftovers(groups: list[tuple[int, int]]) -> int:
    """SIGKILL every process still in one of the recorded (pgid, leader start time) groups.

    A process counts only if it is in the group and started no earlier than the recorded leader: a
    group whose pid was reused by a stranger since is left alone. Returns how many were killed.
    """
    wanted = {pgid: started for pgid, started in groups if pgid > 0}
    if not wanted:
        return 0
    killed = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        fields = proc_stat(pid)  # one read: its group and its start time
        if fields is None:
            continue
        pgid, started = int(fields[2]), int(fields[19])
        if pgid not in wanted or started < wanted[pgid]:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def free_port() -> int:
    """A TCP port free on the loopback right now: the gang's MASTER_PORT for this start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
