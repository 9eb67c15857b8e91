"""Flyte tasks that run as gangrun gangs, for the tests: importable by name, as a user's module is."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import flyte

import gangrun
import gangrun.flyte

SMALL = {"cpu": "500m", "memory": "64Mi"}  # two of them fit the local quota the tests run with
env = flyte.TaskEnvironment(name="gangtest", plugin_config=gangrun.flyte.Gang(
    nodes=2, resources=SMALL, options={"termination_grace_period": "5s"}))


@env.task
def hello(greeting: str) -> str:
    ctx = gangrun.context()
    line = f"{greeting} from rank {ctx.rank} of {ctx.world_size} (attempt {ctx.attempt})"
    print(line, flush=True)
    return line


@env.task
def fail_on_rank(rank: int) -> int:
    if gangrun.context().rank == rank:
        raise ValueError(f"rank {rank} does not like this input")
    return 7


@env.task(retries=1)
def flaky() -> int:
    """Fails its first attempt on rank 1, succeeds on the next: what it returns is the attempt."""
    ctx = gangrun.context()
    if ctx.attempt == 1 and ctx.rank == 1:
        raise RuntimeError("first attempt fails")
    return int(ctx.attempt or 0)


@env.task(retries=1)
def fails_each_attempt_differently() -> int:
    """Attempt 1 fails on rank 1, attempt 2 on rank 0, each with its own error."""
    ctx = gangrun.context()
    if ctx.rank == (1 if ctx.attempt == 1 else 0):
        raise RuntimeError(f"attempt {ctx.attempt} fails on rank {ctx.rank}")
    return 0


@env.task(retries=2)
def unpicklable() -> Any:
    """Returns a lock, which no pickler takes."""
    return threading.Lock()


@env.task
def train(steps: int, step_seconds: float) -> dict[str, str]:
    """Sums 1..steps, one term a step, saving (step, total) at every step; resumes from the newest save."""
    ctx = gangrun.context()
    ckpt = ctx.checkpoint
    assert ckpt is not None
    stop = threading.Event()
    ctx.on_stop(lambda notice: stop.set())
    step, total = 0, 0
    path = ckpt.load()
    if path is not None:
        state = json.loads(path.read_bytes())
        step, total = state["step"], state["total"]
    print(f"rank {ctx.rank} attempt {ctx.attempt} restart {ctx.restart_attempt}: starting at step {step} "
          f"({ckpt.loaded_from or 'no checkpoint'})", flush=True)
    started = step
    while step < steps:
        if stop.is_set():
            ckpt.wait()
            return {}  # the gang runs again: this value is not the task's
        step += 1
        total += step
        time.sleep(step_seconds)
        ckpt.save(json.dumps({"step": step, "total": total}).encode(), step=step)
    ckpt.wait()
    return {"total": str(total), "attempt": str(ctx.attempt), "restart": str(ctx.restart_attempt),
            "started_at": str(started), "loaded_from": str(ckpt.loaded_from), "pid": str(os.getpid())}


@env.task
async def sleepy() -> int:
    print("up", flush=True)
    await _sleep(120)
    return 1


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


unknown_class = flyte.TaskEnvironment(name="gangunknown", plugin_config=gangrun.flyte.Gang(
    nodes=1, resources=SMALL, priority_class="urgent"))  # a valid name the local backend does not have


@unknown_class.task
def of_an_unknown_priority_class() -> int:
    return 1


@env.task
def stopped_while_running() -> str:
    """Listens for the stop notice, gets one (SIGTERM to itself, as a preemption sends it) and returns early."""
    import signal

    stop = threading.Event()
    gangrun.context().on_stop(lambda notice: stop.set())
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.wait(10), "the stop notice never came: its handler was not installed"
    print("saw the stop notice; returning early", flush=True)
    return "a value of a stopped rank"
