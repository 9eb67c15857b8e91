"""`GangTask`: the Flyte task template of a `TaskEnvironment(plugin_config=Gang(...))`.

In a local Flyte run (`flyte.with_runcontext(mode="local").run(task, ...)`) a call submits a
`ClusteredTask` to gangrun's local backend whose every rank runs the function
(`gangrun.flyte._worker`), prints the gang's timeline and output as `gangrun run` does, and returns
rank 0's return value. A failed or cancelled gang raises in the caller with the gang's reason. A call
still waiting when its process ends (Ctrl+C, SIGTERM, SIGHUP, any normal exit) cancels its gang, and the
call's folder is removed however it ends.

On a cluster Flyte's connector (`gangrun.flyte.connector`) makes the gang, and each rank runs Flyte's
own entrypoint, which calls the function here: a call from inside a gang runs the function itself
(`run_rank`). Flyte calls a plain function on a thread of its own, where Python cannot set a signal
handler, so the stop notice is installed first, from the entrypoint's event loop (its main thread); a
rank whose gang was stopped while it ran (a preemption, a drain) ends with status 143 as soon as the
function returns, before Flyte's entrypoint uploads what it returned: that value is not the task's
(the gang runs again), and a stopped rank never reports success (gangrun._ckpt.notice).

Retries: a Flyte task's `retries=` become the gang's user retries, and the task's own retry count
is set to 0, so neither Flyte's local runner nor its platform starts a second gang on top of a failed
one. Preemption, node loss and the gang's own restarts use none of them.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import flyte
import flyte.errors
from flyte.extend import AsyncFunctionTaskTemplate, TaskPluginRegistry
from flyte.models import SerializationContext

import gangrun
from gangrun._api.run import TaskRun
from gangrun._ckpt import notice
from gangrun._errors import GangrunError, SpecError
from gangrun.cli.follow import follow_run
from gangrun.flyte import _call
from gangrun.flyte._gang import Gang, resources_of

TASK_TYPE = "gangrun"
CUSTOM_KEY = "clusteredTask"  # the custom payload: the gang's manifest (JSON text), without Flyte's arguments
WORKER = ("python", "-m", "gangrun.flyte._worker")
CANCEL_WAIT = 120.0  # seconds a cancelled run waits for its gang to end (its workers get their grace period)


@dataclass(kw_only=True)
class GangTask(AsyncFunctionTaskTemplate[..., Any, Any]):
    """A Flyte function task that runs as a gangrun gang (see the module's docstring)."""

    task_type: str = TASK_TYPE
    gang_retries: int = 0  # the Flyte task's retries, moved here: the gang spends them, Flyte none

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[no-untyped-call]
        gang = self.plugin_config
        if not isinstance(gang, Gang):
            raise TypeError(f"GangTask needs a gangrun.flyte.Gang plugin config, got {type(gang).__name__}")
        count = int(getattr(self.retries, "count", 0) or 0)
        if count:
            if gang.retries is not None and gang.retries != count:
                raise SpecError("Gang.retries", f"the task says retries={count} and its Gang retries={gang.retries}: "
                                                "give one of them")
            self.gang_retries = count
            self.retries = flyte.RetryStrategy(count=0)

    @property
    def gang(self) -> Gang:
        assert isinstance(self.plugin_config, Gang)
        return self.plugin_config

    def manifest(self, command: list[str], **more: Any) -> gangrun.ClusteredTask:
        return self.gang.manifest(name_prefix=self.name, command=command, retries=self.gang_retries,
                                  resources=resources_of(self.resources), **more)

    def custom_config(self, sctx: SerializationContext) -> dict[str, Any]:
        """What the connector needs besides the container: the gang's manifest, run by Flyte's entrypoint."""
        return {CUSTOM_KEY: json.dumps(self.manifest(list(WORKER) + ["flyte"]).to_dict())}

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        if os.environ.get("GANGRUN_TASK"):
            return await run_rank(super().execute, *args, **kwargs)  # a rank of a gang: run the function itself
        if flyte.ctx().mode != "local":
            return await super().execute(*args, **kwargs)
        inputs = inspect.signature(self.func).bind(*args, **kwargs).arguments
        return await run_local_gang(self, dict(inputs))


async def run_rank(execute: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One rank's call of the function through Flyte's `execute` (see the module's docstring). Returns what
    the function returned; raises SystemExit(143) instead when the rank's gang was stopped meanwhile, so
    that Flyte's entrypoint neither uploads the value nor reports success (its error handling takes
    `Exception`s only; the process then ends through gangrun's own exit path, with status 143)."""
    notice.install()  # here, not in the function: Flyte runs a plain function on another thread
    value = await execute(*args, **kwargs)
    if notice.stopping() or notice.STATE.stopped:
        raise SystemExit(notice.EXIT_STATUS)
    return value


async def run_local_gang(task: GangTask, inputs: dict[str, Any]) -> Any:
    """One call as a gang on the local backend. Cancelling this coroutine cancels the gang and returns once
    it has ended; so does the end of the process while the call is still waiting (Ctrl+C in a script)."""
    _leave_stop_signals_to_the_main_thread()
    folder = Path(tempfile.mkdtemp(prefix="gangrun-flyte-"))
    try:
        _call.write_call(folder, task.func, inputs)
        manifest = task.manifest([sys.executable, *WORKER[1:], "call", str(folder)],
                                 working_dir=os.getcwd())
        run = await asyncio.to_thread(_submit, manifest, folder)
        follow = _in_daemon_thread(follow_run, run, rank=None, stream=sys.stdout)
        try:
            final = await asyncio.shield(follow)
        except asyncio.CancelledError:
            await asyncio.to_thread(run.cancel)
            await asyncio.wait({follow}, timeout=CANCEL_WAIT)
            raise
        finally:
            _LIVE.pop(run.name, None)
        return _outcome(run.name, final, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _submit(manifest: Any, folder: Path) -> TaskRun:
    """Submit and note the gang as waiting in one step, on the submitting thread: noted later, by the event
    loop once it resumes, a busy machine could let the gang run before a Ctrl+C could find it to cancel.
    Refused once the process has begun to end: a call that submits after the exit's cancel has run would
    leave its gang running with nobody to cancel it."""
    global _SUBMITTING
    with _NOTED:
        if _ENDING:
            raise asyncio.CancelledError("the process is ending")
        _SUBMITTING += 1
    try:
        run = gangrun.submit(manifest, "local")
        _LIVE[run.name] = (run, folder)
        return run
    finally:
        with _NOTED:
            _SUBMITTING -= 1
            _NOTED.notify_all()


# The gangs of calls still waiting, cancelled if the process ends first: a script interrupted by Ctrl+C
# leaves Flyte's runner thread waiting on the call, and the gang would otherwise run on without a caller.
# A stop that comes while a submit is on its way waits for it (the submitting thread leaves stop signals to
# the main thread and runs on), so a gang already running but not yet noted is cancelled too.
_LIVE: dict[str, tuple[TaskRun, Path]] = {}
_NOTED = threading.Condition()
_SUBMITTING = 0
_ENDING = False
SUBMIT_WAIT = 30.0  # seconds the exit waits for a submit on its way


@atexit.register
def _cancel_waiting_gangs() -> None:
    global _ENDING
    with _NOTED:
        _ENDING = True
        _NOTED.wait_for(lambda: _SUBMITTING == 0, timeout=SUBMIT_WAIT)
    for name, (run, folder) in list(_LIVE.items()):
        try:
            if run.cancel():
                _say(f"[gangrun] {name}: cancelled, its Flyte call ended with the process")
        except GangrunError as e:
            _say(f"[gangrun] {name}: could not cancel it: {e}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            _LIVE.pop(name, None)


def _say(line: str) -> None:
    """A line on stderr, if it can still be written: a piped run whose reader is gone (Ctrl+C on `... | tee`)
    must still cancel every gang and remove every folder."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a broken pipe, a closed stream
        pass


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _end_like_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """SIGTERM or SIGHUP: cancel the waiting calls' gangs as the end of the process does, then end by the
    signal as the process would have without this handler."""
    _cancel_waiting_gangs()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _leave_stop_signals_to_the_main_thread() -> None:
    """Block Ctrl+C, SIGTERM and SIGHUP on this thread and so on every thread it starts (the follow thread,
    the executor's, the log readers). CPython runs handlers on the main thread only, and a main thread
    blocked on a lock (Flyte's sync wrapper waits on a future) wakes only when the kernel delivers the signal
    to it: delivered to another thread, the signal was noted and the script waited on, its gang running."""
    if threading.current_thread() is not threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *STOP_SIGNALS})


def install_stop_signals() -> None:
    """Make SIGTERM and SIGHUP (a `kill`, a closed terminal) cancel the gangs of the calls still waiting, as Ctrl+C
    does; without it the process ends at once and its gangs run on with nobody to collect their results. Only a
    signal left at its default (which ends the process without a word) is taken; only from the main thread (the
    only one that may set handlers); never inside a gang (a rank's SIGTERM is its stop notice)."""
    if os.environ.get("GANGRUN_TASK") or threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _end_like_ctrl_c)


def _in_daemon_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """`fn` in a daemon thread (asyncio.to_thread's threads are joined before the process can end)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def target() -> None:
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            loop.call_soon_threadsafe(settle, False, e)
        else:
            loop.call_soon_threadsafe(settle, True, result)

    threading.Thread(target=target, name="gangrun-flyte-follow", daemon=True).start()
    return future


def _outcome(name: str, final: dict[str, Any], folder: Path) -> Any:
    phase, reason = final["phase"], final.get("reason") or ""
    if phase == "Succeeded":
        problem = _call.read_result_error(folder)
        if problem is not None:  # one error, raised once: no rerun of the gang makes the value pickle
            raise flyte.errors.RuntimeUserError("ResultNotPicklable", f"gangrun task {name}: rank 0 returned, but "
                                                                      f"{problem}")
        return _call.read_result(folder)
    last = _call.read_errors(folder, attempt=int(final.get("attempt") or 1))
    errors = "".join(f"; rank {r}: {e}" for r, e in last.items())
    code = "GangAborted" if phase == "Aborted" else "GangFailed"
    raise flyte.errors.RuntimeUserError(code, f"gangrun task {name} {phase.lower()}: {reason}{errors}")


TaskPluginRegistry.register(Gang, GangTask)
install_stop_signals()
