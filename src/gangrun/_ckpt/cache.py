"""The process cache: where restored copies and object-store snapshots live, and how none of them leaks.

Every process that restores a checkpoint gets one folder in the system temp directory, named after
its owner::

    /tmp/gangrun-cache-<pid>-<start ticks>-<random>/     # 0700, removed when the process ends
      ckpt-3f2a.../attempt-2-seq-4/data/...               # one restored copy per Checkpoint

It is removed on every exit path the process controls: a normal exit or an uncaught exception
(atexit), and the stop notice's exit (`notice.py` ends with ``os._exit``, which skips atexit, so it
calls `cleanup()` first). A process killed with SIGKILL cannot clean up; the next process that
creates its own cache folder reclaims every folder whose owner is gone. The owner is the pid *and*
its start time (``/proc/<pid>/stat``), so a recycled pid does not keep a dead process's folder alive.
Only folders of the current user are touched.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import tempfile
import threading
import uuid

log = logging.getLogger("gangrun")

PREFIX = "gangrun-cache-"
_NAME = re.compile(rf"^{PREFIX}([0-9]+)-([0-9]+)-[0-9a-f]+$")
_lock = threading.Lock()
_path: str | None = None
_owner: int | None = None  # the pid that created _path; a forked child must not remove its parent's


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot; None when no such process is running.

    0 where /proc is not available (the pid alone then identifies the owner).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return _alive_without_proc(pid)
    # The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22, starttime
    except (IndexError, ValueError):
        return 0


def _alive_without_proc(pid: int) -> int | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, someone else's
        return 0
    return 0


def owner_alive(pid: int, ticks: int) -> bool:
    """Whether the process that created a cache folder named (pid, ticks) is still running."""
    now = start_ticks(pid)
    return now is not None and (ticks == 0 or now == 0 or now == ticks)


def reclaim(tmp: str | None = None) -> list[str]:
    """Remove the cache folders of this user whose owner process is gone. Returns what was removed."""
    tmp = tmp or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    uid = os.getuid()
    for name in names:
        m = _NAME.match(name)
        if not m:
            continue
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != uid or not os.path.isdir(path) or os.path.islink(path):
            continue
        if owner_alive(int(m.group(1)), int(m.group(2))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    if removed:
        log.info("gangrun: removed %d restored checkpoint cop(ies) left by processes that were killed", len(removed))
    return removed


def process_cache() -> str:
    """This process's cache folder, created (after reclaiming dead owners' folders) on first use."""
    global _path, _owner
    with _lock:
        pid = os.getpid()
        if _path is not None and _owner == pid and os.path.isdir(_path):
            return _path
        tmp = tempfile.gettempdir()
        reclaim(tmp)
        path = os.path.join(tmp, f"{PREFIX}{pid}-{start_ticks(pid) or 0}-{uuid.uuid4().hex[:8]}")
        os.mkdir(path, 0o700)
        if _owner is None:
            atexit.register(cleanup)
        _path, _owner = path, pid
        return path


def cleanup() -> None:
    """Remove this process's cache folder (at exit; also on the stop notice's ``os._exit`` path)."""
    global _path
    with _lock:
        path, _path = _path, None
        if path is not None and _owner == os.getpid():
            shutil.rmtree(path, ignore_errors=True)
