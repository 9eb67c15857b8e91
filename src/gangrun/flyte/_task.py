"""`GangTask`: the Flyte task template of a `TaskEnvironment(plugin_config=Gang(...))`.

In a local Flyte run (`flyte.with_runcontext(mode="local").run(task, ...)`) a call submits a
`ClusteredTask` to gangrun's local backend whose every rank runs the function
(`gangrun.flyte._worker`), prints the gang's timeline and output as `gangrun run` does, and returns
rank 0's return value. A failed or cancelled gang raises in the caller with the gang's reason.

On a cluster Flyte's connector (`gangrun.flyte.connector`) makes the gang, and each rank runs Flyte's
own entrypoint, which calls the function here: a call from inside a gang runs the function itself.

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
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flyte
import flyte.errors
from flyte.extend import AsyncFunctionTaskTemplate, TaskPluginRegistry
from flyte.models import SerializationContext

import gangrun
from gangrun._api.run import TaskRun
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
        if os.environ.get("GANGRUN_TASK") or flyte.ctx().mode != "local":
            return await super().execute(*args, **kwargs)  # a rank of a gang: run the function itself
        inputs = inspect.signature(self.func).bind(*args, **kwargs).arguments
        return await run_local_gang(self, dict(inputs))


async def run_local_gang(task: GangTask, inputs: dict[str, Any]) -> Any:
    """One call as a gang on the local backend. Cancelling this coroutine cancels the gang and returns once
    it has ended; so does the end of the process while the call is still waiting (Ctrl+C in a script)."""
    folder = Path(tempfile.mkdtemp(prefix="gangrun-flyte-"))
    try:
        _call.write_call(folder, task.func, inputs)
        manifest = task.manifest([sys.executable, *WORKER[1:], "call", str(folder)],
                                 working_dir=os.getcwd())
        run = await asyncio.to_thread(gangrun.submit, manifest, "local")
        _LIVE[run.name] = (run, folder)
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


# The gangs of calls still waiting, cancelled if the process ends first: a script interrupted by Ctrl+C
# leaves Flyte's runner thread waiting on the call, and the gang would otherwise run on without a caller.
_LIVE: dict[str, tuple[TaskRun, Path]] = {}


@atexit.register
def _cancel_waiting_gangs() -> None:
    for name, (run, folder) in list(_LIVE.items()):
        try:
            if run.cancel():
                print(f"[gangrun] {name}: cancelled, its Flyte call ended with the process", file=sys.stderr)
        except GangrunError as e:
            print(f"[gangrun] {name}: could not cancel it: {e}", file=sys.stderr)
        shutil.rmtree(folder, ignore_errors=True)


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
        return _call.read_result(folder)
    errors = "".join(f"; rank {r}: {e}" for r, e in _call.read_errors(folder).items())
    code = "GangAborted" if phase == "Aborted" else "GangFailed"
    raise flyte.errors.RuntimeUserError(code, f"gangrun task {name} {phase.lower()}: {reason}{errors}")


TaskPluginRegistry.register(Gang, GangTask)
