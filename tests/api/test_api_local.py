"""The Python API end to end on the local backend: real daemon, real worker processes, real signals.

submit with generateName → wait → logs → events → delete → the name is free again; wait's timeout,
cancel, and delete of a running task; and the calls from inside a running event loop (a notebook).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

import gangrun
from gangrun._backends.local import LocalBackend

pytestmark = pytest.mark.slow
HELLO = "import os; print('hello from rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)"
SLEEPY = "import time; print('up', flush=True); time.sleep(60)"


@pytest.fixture
def home(tmp_path: Path):
    home = tmp_path / "home"
    yield home
    LocalBackend(home).down()


def task(code: str, **metadata) -> gangrun.ClusteredTask:
    return gangrun.ClusteredTask(**(metadata or {"generate_name": "hello-"}), nodes=2,
                                 command=[sys.executable, "-c", code], resources={"cpu": "500m", "memory": "64Mi"},
                                 termination_grace_period="3s")


def test_submit_with_generate_name_wait_logs_events_delete_and_reuse_the_name(home: Path) -> None:
    run = gangrun.submit(task(HELLO), backend="local", home=home)
    assert run.name.startswith("hello-") and len(run.name) > len("hello-")
    final = run.wait(timeout=120)
    assert (final["name"], final["phase"], final["attempt"]) == (run.name, "Succeeded", 1)
    assert run.logs() == "hello from rank 0 of 2\n"
    assert run.logs(rank=1) == "hello from rank 1 of 2\n"
    assert sorted(run.logs(rank=None).splitlines()) == ["[rank 0] hello from rank 0 of 2",
                                                        "[rank 1] hello from rank 1 of 2"]
    types = [e["type"] for e in run.events()]
    assert types[0] == "Submitted" and types[-1] == "Succeeded"
    assert gangrun.attach(run.name, backend="local", home=home).status()["phase"] == "Succeeded"

    assert run.delete() is True
    with pytest.raises(gangrun.UsageError, match=f'unknown task "{run.name}"'):
        run.status()
    again = gangrun.submit(task(HELLO, name=run.name), backend="local", home=home)
    assert again.name == run.name and again.wait(timeout=120)["phase"] == "Succeeded"
    assert [e["type"] for e in again.events()].count("Submitted") == 1  # nothing of the deleted task


def test_wait_times_out_cancel_aborts_and_delete_refuses_a_running_task_unless_forced(home: Path) -> None:
    run = gangrun.submit(task(SLEEPY, name="sleepy"), backend="local", home=home)
    with pytest.raises(gangrun.WaitTimeout) as timed_out:
        run.wait(timeout=1)
    assert isinstance(timed_out.value, TimeoutError) and timed_out.value.view["name"] == "sleepy"
    with pytest.raises(gangrun.UsageError, match="force"):
        run.delete()
    assert run.cancel() is True
    assert run.wait(timeout=60)["phase"] == "Aborted"
    assert run.cancel() is False

    forced = gangrun.submit(task(SLEEPY, name="forced"), backend="local", home=home)
    assert forced.delete(force=True) is True
    with pytest.raises(gangrun.UsageError):
        forced.status()


def test_the_api_works_inside_a_running_event_loop_as_in_a_notebook(home: Path) -> None:
    async def cell() -> dict:
        run = gangrun.submit(task(HELLO, name="cell"), backend="local", home=home)
        return run.wait(timeout=120)  # a blocking call from a coroutine, as a notebook cell makes it

    assert asyncio.run(cell())["phase"] == "Succeeded"


def test_attach_to_an_unknown_task_names_the_known_ones(home: Path) -> None:
    gangrun.submit(task(HELLO, name="known"), backend="local", home=home).wait(timeout=120)
    with pytest.raises(gangrun.UsageError, match=r'unknown task "nope" \(known tasks: known\)'):
        gangrun.attach("nope", backend="local", home=home)


def test_log_lines_follow_goes_on_into_the_attempt_after_a_preemption(home: Path) -> None:
    """resumeAfterPreemption off: a preemption ends attempt 1 (a user retry); following the current
    attempt's output goes on into attempt 2's workers, as `gangrun logs -f` does."""
    code = ("import os, time; a = os.environ['GANGRUN_ATTEMPT']; print('attempt', a, 'up', flush=True); "
            "time.sleep(60 if a == '1' else 0)")
    one = gangrun.ClusteredTask(name="twice", nodes=1, command=[sys.executable, "-c", code], retries=1,
                                resources={"cpu": "500m", "memory": "64Mi"}, termination_grace_period="3s")
    run = gangrun.submit(one, backend="local", home=home)
    lines = []
    for line in run.log_lines(rank=0, follow=True):
        lines.append(line)
        if line == "attempt 1 up":
            LocalBackend(home).evict("twice", "Preempted")
    assert lines == ["attempt 1 up", "attempt 2 up"]
    assert run.status()["attempt"] == 2
