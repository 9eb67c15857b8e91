"""Ending every process a worker started, whatever its session or process group.

A worker's process group (`launcher.py`) does not hold a child started in a new session
(`setsid`, `Popen(start_new_session=True)`: data loaders, tools), so killing the group leaves it
running; PR_SET_PDEATHSIG does not cover it either. Two things find such a process again:

- **a mark**: every worker starts with `GANGRUN_LOCAL_WORKER=<gang>/<round>/<rank>/<nonce>@<home>`,
  which everything it starts inherits (a process keeps the environment it was exec'd with in
  /proc/<pid>/environ). A marked process whose worker is no longer running is ended (SIGKILL), as a
  pod's leftovers die with its container. The mark is read and the signal sent through a pidfd, so a
  pid reused in between is never hit (a stranger does not carry the mark).
- **the daemon is a child subreaper** (`PR_SET_CHILD_SUBREAPER`): an orphan is reparented to the
  daemon rather than to init, so one that cleared its environment is still found among the daemon's
  children (it is ended too: its worker cannot be told), and the daemon reaps what it adopted.

`sweep(...)` does both; the daemon runs it when a worker exits, on its heartbeat while workers run,
and when it shuts down (nothing kept). A daemon that starts runs it with nothing kept before it
starts anything, which ends what a killed daemon's workers left behind (their workers died with it).

Limits: a process that both clears its environment and escapes the daemon's tree (a daemon killed
by SIGKILL re-parents to init) is not found; a cgroup per gang would find it, but needs root or a
delegated cgroup v2 subtree, which an unprivileged user rarely has.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from gangrun._backends.local.launcher import proc_stat

MARK = "GANGRUN_LOCAL_WORKER"
PR_SET_CHILD_SUBREAPER = 36


def mark(home: Path, gang: str, restart: int, rank: int, *, nonce: int) -> str:
    """The value of MARK for one worker process. `nonce` tells apart two starts of the same worker (a
    readmitted gang runs the same restart round again), so a leftover of the first is never kept for
    the second."""
    return f"{gang}/{restart}/{rank}/{nonce}@{home}"


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans. Returns whether the kernel agreed."""
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def _mark_of(pid: int, prefix: bytes) -> bytes | None:
    """The MARK entry of `pid`'s environment, b"" if it has none, None if it cannot be read."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in env.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):]
    return b""


@dataclass
class Orphans:
    """The daemon's running workers by pid (their marks), and whether a sweep may still find work."""

    home: Path
    workers: dict[int, bytes] = field(default_factory=dict)
    pending: bool = False

    def started(self, pid: int, value: str) -> None:
        self.workers[pid] = value.encode()

    def exited(self, pid: int) -> None:
        self.workers.pop(pid, None)
        self.pending = True

    def due(self) -> bool:
        """Whether the heartbeat should sweep: workers run, or the last sweep found something."""
        return bool(self.workers) or self.pending

    def sweep(self, *, keep_running: bool = True) -> int:
        """SIGKILL every process a worker of this home started whose worker is gone (with
        `keep_running` False: every one), and every unmarked orphan the daemon adopted; reap the
        adopted ones that exited. Returns how many were killed or reaped."""
        keep = set(self.workers.values()) if keep_running else set()
        tag = f"@{self.home}".encode()
        prefix = f"{MARK}=".encode()
        me, done = os.getpid(), 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me or int(entry.name) in self.workers:
                continue
            pid = int(entry.name)
            fields = proc_stat(pid)
            if fields is None:
                continue
            adopted = int(fields[1]) == me
            if adopted and fields[0] == "Z":
                done += _reap(pid)
                continue
            if _doomed(_mark_of(pid, prefix), tag, keep, stray=adopted):
                done += _signal(pid, prefix, tag, keep, stray=adopted)
        self.pending = done > 0
        return done


def _doomed(found: bytes | None, tag: bytes, keep: Collection[bytes], *, stray: bool) -> bool:
    """Whether a process with mark `found` is to be ended: a mark of this home (ending in `tag`) whose
    worker is not kept, or (`stray`, an orphan the daemon adopted) no mark at all."""
    if found is None:  # unreadable: another user's, or gone
        return False
    return (found.endswith(tag) and found not in keep) or (stray and found == b"")


def _reap(pid: int) -> int:
    try:
        return 1 if os.waitpid(pid, os.WNOHANG)[0] == pid else 0
    except ChildProcessError:
        return 0


def _signal(pid: int, prefix: bytes, tag: bytes, keep: Collection[bytes], *, stray: bool) -> int:
    """SIGKILL `pid` if it still carries a mark ending in `tag` not in `keep` (or, `stray`, no mark),
    checked again through a pidfd so that a pid reused since the scan is never hit."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return 0
    try:
        fields = proc_stat(pid)  # a stray must still be the daemon's child: a reused pid is not
        adopted = stray and fields is not None and int(fields[1]) == os.getpid()
        if not _doomed(_mark_of(pid, prefix), tag, keep, stray=adopted):
            return 0
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return 1
    except OSError:
        return 0
    finally:
        os.close(fd)
