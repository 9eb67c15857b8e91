"""The stop notice: SIGTERM turned into a flag, hooks, a cause and a deadline.

Contract with the backends: before it sends SIGTERM, a backend may write
``{"cause": "Preempted", "message": "...", "deadline": <unix seconds>}`` atomically to the file named
by ``GANGRUN_STOP_FILE``. If the file is absent or unreadable, the cause is None and the deadline is
now + ``GANGRUN_GRACE_PERIOD`` seconds (default 30).

The signal handler only reads the stop file, records the notice and starts the ``gangrun-stop``
thread: no saving and no lock a save may hold (a handler interrupts the main thread anywhere, even
inside a lock the save needs; Lightning#21406). The stop thread runs the `on_stop` hooks, then
decides how the process ends:

- The program *listens* (it registered a hook or has read ``stop_requested``): it is trusted to save
  and exit on its own. If it is still running shortly before the deadline, the in-flight saves are
  flushed and the process exits with status 143 (128 + SIGTERM), before the backend's SIGKILL.
- The program does not listen: it expects SIGTERM to end it, as it would without gangrun. In-flight
  saves are flushed (B2), then the process exits with status 143 at once.

Installed only from the main thread (Python delivers signals there); a previous Python handler is
still called after the notice is recorded.

A stopped process never reports success: once a stop reached it (its own notice, or `stopped()`,
which `ctx.should_stop()` calls when it answers True, also when only a peer got the SIGTERM), an
exit that would be 0 is 143 instead (`_exit_as_stopped`, an atexit hook). A worker that left its
loop for a stop has not finished the task: an exit 0 would make its index (its Kubernetes pod, a
local worker) complete, and it would not run again after a readmission. An exit that is already a
failure (an uncaught exception) keeps its status; one through ``sys.exit(n)`` becomes 143 too,
since atexit cannot tell it from 0 (both are non-zero: a failure either way).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType

from gangrun._ckpt import cache, writer
from gangrun._ckpt.logs import say
from gangrun._core import stop_causes
from gangrun._core import worker_env as wenv
from gangrun._errors import WorkerEnvError

log = logging.getLogger("gangrun")

# What signal.getsignal returns: a Python handler, SIG_DFL/SIG_IGN (ints), or None (set outside Python).
SignalHandler = Callable[[int, FrameType | None], object] | int | None

STOP_FILE_ENV = wenv.STOP_FILE
GRACE_ENV = wenv.GRACE_PERIOD
DEFAULT_GRACE = float(wenv.DEFAULT_GRACE_SECONDS)
EXIT_STATUS = 128 + signal.SIGTERM


@dataclass(frozen=True)
class StopNotice:
    """Why and until when the gang is being stopped. `cause` is None when the backend did not say."""

    cause: str | None
    message: str | None
    deadline: float  # unix seconds; the backend may SIGKILL after it
    received_at: float

    @property
    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.time())


def grace_period(env: Mapping[str, str]) -> float:
    raw = env.get(GRACE_ENV, "").strip()
    if not raw:
        return DEFAULT_GRACE
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise WorkerEnvError(GRACE_ENV, f"must be a number of seconds >= 0, got {raw!r}")
    return value


def read_notice(env: Mapping[str, str], *, now: float) -> StopNotice:
    """The notice the backend left, or a default one from the grace period."""
    fallback = StopNotice(None, None, now + grace_period(env), now)
    path = env.get(STOP_FILE_ENV)
    if not path:
        return fallback
    try:
        with open(path, "rb") as f:
            doc = json.load(f)
        deadline = float(doc["deadline"]) if doc.get("deadline") is not None else fallback.deadline
        cause, message = (None if doc.get(k) is None else str(doc[k]) for k in ("cause", "message"))
        return StopNotice(cause, message, deadline, now)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return fallback


class _StopState:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Back to the state at import: no notice, no hooks, no handler installed."""
        self.notice: StopNotice | None = None
        self.stopped = False  # this process left its work for a stop a peer got (`stopped()`)
        self.hooks: list[Callable[[StopNotice], object]] = []
        self.listening = False
        self.installed = False
        self.previous: SignalHandler = None
        self.env: Mapping[str, str] = os.environ
        self.exit: Callable[[int], object] = os._exit  # a test seam; what atexit would do is done first
        self._hook_lock = threading.Lock()
        self._called: list[Callable[[StopNotice], object]] = []

    # --- signal side: record and start the stop thread, nothing else ---
    def handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.notice is None
        if first:
            self.notice = read_notice(self.env, now=time.time())
            writer.exit_deadline = self.notice.deadline
        try:
            prev = self.previous
            if callable(prev):
                prev(signum, frame)
        finally:
            # Started after the previous handler ran, so the stop thread cannot end the process first.
            if first:
                threading.Thread(target=self._stop_thread, name="gangrun-stop", daemon=True).start()

    def told(self) -> StopNotice | None:
        """The notice; when it came without a cause, with the cause the backend has written since, if
        any (on Kubernetes the SIGTERM of Kueue's eviction may reach a pod before the controller's
        notice does)."""
        n = self.notice
        if n is not None and n.cause is None:
            late = read_notice(self.env, now=n.received_at)
            if late.cause is not None:
                self.notice = n = late
        return n

    # --- stop thread: hooks, flush, end ---
    def _stop_thread(self) -> None:
        notice = self.notice
        assert notice is not None
        say(f"gangrun: stop requested (cause {notice.cause or 'unknown'}; {notice.seconds_left:.1f}s left)")
        for hook in list(self.hooks):
            try:
                self.call_hook(hook, notice)
            except BaseException as e:  # SystemExit: it would end this thread, and with it the flush and the exit
                log.error("gangrun: on_stop hook %r raised %r; the process still ends at the stop deadline", hook, e)
        if not self.listening:
            self._flush(notice)
        if self.listening:  # checked again: the loop may have looked at the flag during the flush
            # Leave a margin before the deadline to flush and exit ahead of the SIGKILL.
            margin = min(2.0, 0.1 * max(0.0, notice.deadline - notice.received_at))
            time.sleep(max(0.0, notice.deadline - margin - time.time()))
            say("gangrun: still running at the stop deadline; flushing checkpoints and exiting")
            self._flush(notice)
        _flush_stdio()
        cache.cleanup()  # os._exit skips atexit, which would otherwise remove the restored copies
        self.exit(EXIT_STATUS)

    def _flush(self, notice: StopNotice) -> None:
        if writer.ACTIVE.count:
            say(f"gangrun: flushing {writer.ACTIVE.count} checkpoint save(s) in flight before stopping")
        if not writer.flush_all(max(0.0, notice.deadline - time.time())):
            say("gangrun: a checkpoint save did not finish before the stop deadline")

    def call_hook(self, hook: Callable[[StopNotice], object], notice: StopNotice) -> None:
        """Call a hook at most once, whichever thread gets there first."""
        with self._hook_lock:
            if any(h is hook for h in self._called):
                return
            self._called.append(hook)
        try:
            hook(notice)
        except Exception as e:  # a failing hook must not cost the others or the flush
            log.exception("gangrun: on_stop hook %r failed: %r", hook, e)


STATE = _StopState()


def install(env: Mapping[str, str] | None = None) -> bool:
    """Install the SIGTERM handler (main thread only). Returns whether it is installed now."""
    if STATE.installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        log.debug("gangrun: not in the main thread; the SIGTERM stop notice is not installed")
        return False
    if env is not None:
        STATE.env = env
    STATE.previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, STATE.handle)
    STATE.installed = True
    return True


def reclaim() -> bool:
    """Make gangrun's handler SIGTERM's handler again, after a framework replaced it (main thread
    only). Returns whether it is SIGTERM's handler now.

    Lightning's Trainer installs its own at the start of every `fit` and calls the one it found
    after its own: its handler ends the run with its own exception at the next batch (and issues a
    collective from inside the signal handler), before the step every rank agreed to stop at. The
    handler gangrun keeps calling after the notice (`previous`) stays the one found at `install`.
    Lightning puts gangrun's back when `fit` ends."""
    if not STATE.installed or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) != STATE.handle:  # != : a bound method is a new object each time
        signal.signal(signal.SIGTERM, STATE.handle)
    return True


def uninstall() -> None:
    """Restore the previous handler and forget any notice (for tests and embedding)."""
    if STATE.installed and threading.current_thread() is threading.main_thread():
        prev = STATE.previous
        signal.signal(signal.SIGTERM, prev if prev is not None else signal.SIG_DFL)
    STATE.reset()


def stop_requested() -> bool:
    STATE.listening = True
    return STATE.notice is not None


def stopped() -> None:
    """This process leaves its work because its gang stops (`ctx.should_stop()` said so): it must not
    exit 0 (see the module docstring)."""
    STATE.stopped = True


def _exit_as_stopped() -> None:
    """At exit: turn a clean exit of a stopped process into EXIT_STATUS.

    Registered when this module is imported, so it runs after the atexit handlers registered later
    (torch's, the checkpoint cache's); the few registered earlier are run here, since `os._exit`
    skips them: the second flush of saves in flight, and logging's."""
    if not (STATE.stopped or STATE.notice is not None) or getattr(sys, "last_value", None) is not None:
        return
    writer.flush_at_exit()
    say(f"gangrun: stopped before the end of the task; exiting with status {EXIT_STATUS}, not 0")
    logging.shutdown()
    _flush_stdio()
    cache.cleanup()
    STATE.exit(EXIT_STATUS)


atexit.register(_exit_as_stopped)


def stopping() -> bool:
    """Whether a stop notice came, read without telling gangrun that the program handles the stop
    (a save asks it to say whether it is the final one; the program has not listened for that)."""
    return STATE.notice is not None


def peer_lost_at() -> float | None:
    """When a stop notice said that a peer of this process is gone (its cause is one of
    `stop_causes.PEER_LOST`), or None."""
    n = STATE.told()
    return n.received_at if n is not None and n.cause in stop_causes.PEER_LOST else None


def on_stop(fn: Callable[[StopNotice], object]) -> None:
    """Call `fn(notice)` once, from the ``gangrun-stop`` thread, when a stop is requested."""
    STATE.listening = True
    STATE.hooks.append(fn)
    if STATE.notice is not None:  # registered after the notice came: run it now, still only once
        STATE.call_hook(fn, STATE.notice)


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream must not keep the process alive
            pass
