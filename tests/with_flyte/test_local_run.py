"""A Flyte run in local mode runs its task as a gangrun gang: the real Flyte SDK, the real local daemon,
real worker processes and signals.

Each test runs `flyte.with_runcontext(mode="local").run(...)` on a task of gang_tasks.py and checks what
the gang did through gangrun's own view of it (the same home the run submitted to).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import require_flyte

require_flyte()

import flyte  # noqa: E402
import flyte.errors  # noqa: E402

from gangrun._backends.local import LocalBackend  # noqa: E402

from . import gang_tasks  # noqa: E402

pytestmark = pytest.mark.slow
TIMEOUT = 120.0
TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def run_local(task: Any, **inputs: Any) -> Any:
    return flyte.with_runcontext(mode="local").run(task, **inputs).outputs()[0]


def the_gang(home: Path, predicate=lambda v: True, what: str = "the gang") -> dict[str, Any]:
    """The one task the Flyte run submitted, once `predicate` holds for it."""
    backend = LocalBackend(home)
    deadline = time.monotonic() + TIMEOUT
    while True:
        views = backend.list() if (home / "local.db").exists() else []
        if len(views) > 1:
            raise AssertionError(f"more than one gang for one Flyte call: {[v['name'] for v in views]}")
        if views and predicate(views[0]):
            return views[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {views}")
        time.sleep(0.2)


def saved(step: int):
    def pred(v: dict[str, Any]) -> bool:
        last = (v.get("accounting") or {}).get("lastCheckpoint") or {}
        return v["phase"] == "Running" and (last.get("step") or 0) >= step
    return pred


def test_a_local_flyte_run_runs_every_rank_streams_their_output_and_returns_rank_0s_value(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_local(gang_tasks.hello, greeting="hi") == "hi from rank 0 of 2 (attempt 1)"
    out = capsys.readouterr().out
    assert "[rank 0]  hi from rank 0 of 2 (attempt 1)" in out
    assert "[rank 1]  hi from rank 1 of 2 (attempt 1)" in out
    assert "GangStarted" in out and "Succeeded" in out  # the gang's timeline, as `gangrun run` prints it
    gang = the_gang(home)
    assert gang["name"].startswith("gangtest-hello-") and gang["phase"] == "Succeeded"


def test_a_preemption_while_the_flyte_run_waits_costs_no_retry_and_resumes_from_its_own_checkpoint(
        home: Path) -> None:
    result: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: result.update(out=run_local(gang_tasks.train, steps=12,
                                                                         step_seconds=0.3)))
    runner.start()
    gang = the_gang(home, saved(3), "a save of step 3")
    LocalBackend(home).evict(gang["name"], "Preempted")  # what `gangrun local evict NAME --reason Preempted` does
    runner.join(TIMEOUT)
    assert not runner.is_alive(), "the Flyte run did not return"
    out = result["out"]
    assert out["total"] == str(sum(range(1, 13)))  # the right value: no step lost or counted twice
    assert (out["attempt"], out["loaded_from"]) == ("1", "own")  # attempt 1, resumed from its own save
    assert int(out["started_at"]) >= 3
    final = the_gang(home, lambda v: v["phase"] == "Succeeded")
    assert (final["attempt"], final["userRetriesUsed"], final["systemRetriesUsed"]) == (1, 0, 0)
    types = [e.type for e in LocalBackend(home).events(final["name"])]
    assert "Preempted" in types and "Readmitted" in types


def test_an_error_in_a_rank_raises_in_the_caller_with_the_gangs_reason_and_the_ranks_error(home: Path) -> None:
    with pytest.raises(flyte.errors.RuntimeUserError) as raised:
        run_local(gang_tasks.fail_on_rank, rank=1)
    message = str(raised.value)
    gang = the_gang(home)
    assert gang["phase"] == "Failed"
    assert f"gangrun task {gang['name']} failed: {gang['reason']}" in message
    assert "rank 1: ValueError: rank 1 does not like this input" in message


def test_the_final_error_names_the_last_attempts_failure_never_an_earlier_ones(home: Path) -> None:
    with pytest.raises(flyte.errors.RuntimeUserError) as raised:
        run_local(gang_tasks.fails_each_attempt_differently)
    message = str(raised.value)
    assert "rank 0: RuntimeError: attempt 2 fails on rank 0" in message
    assert "attempt 1" not in message, message  # attempt 1's error file is not this failure's
    assert the_gang(home)["attempt"] == 2


def test_a_return_value_that_cannot_be_pickled_is_one_user_error_naming_its_type_and_is_not_retried(
        home: Path) -> None:
    with pytest.raises(flyte.errors.RuntimeUserError) as raised:
        run_local(gang_tasks.unpicklable)
    message = str(raised.value)
    assert raised.value.code == "ResultNotPicklable"
    assert "rank 0 returned, but its return value, a _thread.lock, cannot be pickled" in message, message
    gang = the_gang(home)
    assert (gang["attempt"], gang["userRetriesUsed"]) == (1, 0)  # retries=2 and none spent on it


def test_an_unknown_priority_class_is_refused_when_the_call_submits_in_one_line_and_starts_no_gang(
        home: Path) -> None:
    with pytest.raises(flyte.errors.RuntimeUserError) as raised:
        run_local(gang_tasks.of_an_unknown_priority_class)
    assert str(raised.value).startswith('spec.priorityClass: unknown priority class "urgent"; known: low (100)')
    assert "\n" not in str(raised.value)
    assert LocalBackend(home).list() == []


def test_flyte_retries_are_the_gangs_user_retries_and_flyte_starts_no_second_gang(home: Path) -> None:
    assert gang_tasks.flaky.retries.count == 0 and gang_tasks.flaky.gang_retries == 1
    assert run_local(gang_tasks.flaky) == 2  # rank 0's value on the gang's second attempt
    gang = the_gang(home)  # one gang only: Flyte's local runner did not retry on top
    assert (gang["attempt"], gang["userRetriesUsed"]) == (2, 1)


def test_cancelling_the_flyte_run_cancels_the_gang(home: Path) -> None:
    async def cancel_while_running() -> None:
        run = asyncio.create_task(flyte.with_runcontext(mode="local").run.aio(gang_tasks.sleepy))
        await asyncio.to_thread(the_gang, home, lambda v: v["phase"] == "Running", "the gang running")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(cancel_while_running())
    gang = the_gang(home, lambda v: v["phase"] != "Running", "the gang to end")
    assert (gang["phase"], gang["reason"]) == ("Aborted", "cancelled by the user")


SCRIPT = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background child may start with SIGINT ignored
import flyte
from with_flyte import gang_tasks
flyte.with_runcontext(mode="local").run(gang_tasks.sleepy)
"""


def start_script(home: Path, tmp: Path, cwd: Path) -> subprocess.Popen[str]:
    """SCRIPT in a process of its own, its temporary files in `tmp`, its output on a pipe (stderr on stdout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]), "TMPDIR": str(tmp)}
    tmp.mkdir()
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def assert_no_call_folder_left(tmp: Path) -> None:
    """No `gangrun-flyte-*` folder of the call is left. (Flyte's own local run makes an empty raw-data
    folder there, `tmpXXXXXXXX`, on every run, and leaves it: that one is Flyte's.)"""
    left = [p.name for p in tmp.iterdir() if p.name.startswith("gangrun")]
    assert not left, f"the call left {left} behind"


@pytest.mark.parametrize("sig", [
    pytest.param(signal.SIGINT, id="ctrl-c"),
    pytest.param(signal.SIGTERM, id="sigterm"),
    pytest.param(signal.SIGHUP, id="sighup-closed-terminal"),
])
def test_ctrl_c_sigterm_or_sighup_on_a_script_waiting_for_a_local_flyte_run_cancels_the_gang_and_leaves_no_files(
        home: Path, tmp_path: Path, sig: signal.Signals) -> None:
    script = start_script(home, tmp_path / "tmp", tmp_path)
    try:
        gang = the_gang(home, lambda v: v["phase"] == "Running", "the gang running")
        script.send_signal(sig)
        out, _ = script.communicate(timeout=TIMEOUT)
    finally:
        script.kill()
    assert f"[gangrun] {gang['name']}: cancelled, its Flyte call ended with the process" in out, out[-3000:]
    final = the_gang(home, lambda v: v["phase"] != "Running", "the gang to end")
    assert (final["phase"], final["reason"]) == ("Aborted", "cancelled by the user")
    assert_no_call_folder_left(tmp_path / "tmp")


def test_ctrl_c_on_a_piped_run_whose_reader_is_gone_still_cancels_the_gang_and_leaves_no_files(
        home: Path, tmp_path: Path) -> None:
    script = start_script(home, tmp_path / "tmp", tmp_path)
    try:
        the_gang(home, lambda v: v["phase"] == "Running", "the gang running")
        assert script.stdout is not None
        script.stdout.close()  # `... | head -1` has exited: every later write is a broken pipe
        script.send_signal(signal.SIGINT)
        script.wait(timeout=TIMEOUT)
    finally:
        script.kill()
    final = the_gang(home, lambda v: v["phase"] != "Running", "the gang to end")
    assert (final["phase"], final["reason"]) == ("Aborted", "cancelled by the user")
    assert_no_call_folder_left(tmp_path / "tmp")


def test_flyte_run_local_on_the_command_line_runs_the_task_as_a_gang(home: Path, tmp_path: Path) -> None:
    flyte_cli = Path(sys.executable).parent / "flyte"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]), "NO_COLOR": "1"}
    r = subprocess.run([str(flyte_cli), "run", "--local", "--raw-data-path", str(tmp_path / "raw"),
                        "with_flyte/gang_tasks.py", "hello", "--greeting", "hi"],
                       env=env, cwd=TESTS, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[rank 1]  hi from rank 1 of 2 (attempt 1)" in r.stdout, r.stdout[-3000:]
    assert "hi from rank 0 of 2 (attempt 1)" in r.stdout.split("Local Success", 1)[-1]  # the run's output
    gang = the_gang(home)
    assert gang["name"].startswith("gangtest-hello-") and gang["phase"] == "Succeeded"
