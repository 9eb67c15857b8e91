"""The background writer of asynchronous saves, and the process-wide count of saves in flight.

`save(blocking=False)` stages a snapshot in the caller's thread, then hands the upload and the
commit to a named daemon thread (``gangrun-ckpt-writer``). At most one save per checkpoint is in
flight: the next save first waits for the previous one (DCP and Orbax recommend the same; two
uploads would only compete for the same bandwidth). A background failure is kept and raised once,
as `CommitFailed`, by the next `wait()` or `save()`. `run()` is how every save uses it: the write
and commit here or in the background, the retention after them, always in the background.

`ACTIVE` counts every save in progress, blocking ones included, so the stop notice (notice.py) and
interpreter exit can wait for them: an in-flight save is flushed before the process ends.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

from gangrun._errors import CommitFailed

log = logging.getLogger("gangrun")
_T = TypeVar("_T")


class _Active:
    """A counter of saves in progress that one can wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0

    def enter(self) -> None:
        with self._cond:
            self._count += 1

    def exit(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify_all()

    @property
    def count(self) -> int:
        return self._count

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no save is in progress. Returns whether that happened before `timeout`."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count == 0, timeout=timeout)


ACTIVE = _Active()
_WRITERS: weakref.WeakSet[BackgroundWriter] = weakref.WeakSet()
#: Set by the stop notice: at exit, wait for saves no later than this (unix seconds).
exit_deadline: float | None = None


class BackgroundWriter:
    """Runs one checkpoint's background saves, one at a time."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        _WRITERS.add(self)

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job` in the background once the previous job has finished (raising its error)."""
        with self._lock:
            self.wait()
            ACTIVE.enter()
            thread = threading.Thread(target=self._run, args=(job,), name="gangrun-ckpt-writer", daemon=True)
            try:
                thread.start()
            except BaseException:
                ACTIVE.exit()
                raise
            self._thread = thread  # only a started thread: wait() joins it

    def run(self, job: Callable[[], _T], *, blocking: bool, then: Callable[[], None] | None = None) -> _T | None:
        """One save: `job` (its write and commit), then `then` (its retention, which nobody waits for).

        blocking: `job` runs here, counted in `ACTIVE`, and its result is returned; `then` runs in the
        background. Otherwise both run in the background, one after the other, and None is returned."""
        if not blocking:

            def both() -> None:
                job()
                if then is not None:
                    then()

            self.submit(both)
            return None
        ACTIVE.enter()
        try:
            out = job()
        finally:
            ACTIVE.exit()
        if then is not None:
            self.submit(then)
        return out

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as e:  # kept for wait(): a daemon thread has nobody else to tell
            self._error = e
            log.error("gangrun: background checkpoint save failed (%s): %r", self.label, e)
        finally:
            ACTIVE.exit()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the save in flight. Returns False on timeout; raises CommitFailed once if it failed."""
        t = self._thread
        if t is not None:
            t.join(timeout)
            if t.is_alive():
                return False
            self._thread = None
        err, self._error = self._error, None
        if err is not None:
            raise CommitFailed(f"background checkpoint save failed ({self.label}): {err}") from err
        return True


def flush_all(timeout: float | None) -> bool:
    """Wait for every save in progress in this process. Returns whether all finished in time."""
    return ACTIVE.wait_idle(timeout)


def flush_at_exit() -> None:
    """Wait (until the stop deadline, if any) for the saves in flight, at exit."""
    if ACTIVE.count == 0:
        return
    timeout = None if exit_deadline is None else max(0.0, exit_deadline - time.time())
    log.info("gangrun: waiting for %d checkpoint save(s) in flight before exiting", ACTIVE.count)
    if not flush_all(timeout):
        log.error("gangrun: exiting with a checkpoint save still in flight (deadline reached)")
    for w in list(_WRITERS):
        if w._error is not None:
            log.error("gangrun: a background checkpoint save failed and was never waited for: %r", w._error)


# Flushed before every atexit handler, not only among them: handlers registered after this module
# was imported run first (atexit is last-in, first-out), and some take away what a save in flight
# still needs: the process cache holding an object store's staged snapshot (checkpoint/__init__.py),
# the HTTP sessions of s3fs (closed by weakref.finalize at exit). threading's exit hooks run before
# any of them, while daemon threads still run; concurrent.futures keeps its workers alive the same
# way. They run before non-daemon threads are joined, though, so atexit flushes again for the saves
# such a thread started after the main thread returned (a no-op when nothing is in flight).
# `import gangrun` does not import this module: a thread that outlived the main thread may be the first
# to, after threading's exit hooks ran; then the atexit flush alone waits for its saves.
if hasattr(threading, "_register_atexit"):
    try:
        threading._register_atexit(flush_at_exit)
    except RuntimeError:  # "can't register atexit after shutdown"
        pass
atexit.register(flush_at_exit)
