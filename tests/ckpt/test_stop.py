"""B3 and B2: SIGTERM becomes a stop notice; in-flight saves are flushed; the process ends in time.

The process tests run a real worker script in a subprocess and send it a real SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gangrun import Checkpoint, Context
from gangrun._ckpt import notice
from gangrun._errors import WorkerEnvError


def _gang_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    root = tmp_path / "ck" / "train"
    return {
        **os.environ,
        "GANGRUN_TASK": "train",
        "GANGRUN_ATTEMPT": "1",
        "JOBSET_RESTART_ATTEMPT": "0",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "GANGRUN_CHECKPOINT_PATH": f"{root}/attempt-1",
        "GANGRUN_PREV_CHECKPOINT_PATH": "",
        **extra,
    }


def _start(script: str, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()  # the script prints "ready" once it is where the test wants it
    assert line.strip() == "ready", line + proc.stderr.read()
    return proc


def _stop(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err, time.monotonic() - t0


def _load(tmp_path: Path) -> Checkpoint:
    ckpt = Checkpoint.for_path(str(tmp_path / "ck" / "train"), attempt=1, cache_dir=tmp_path / "cache")
    ckpt.load()
    return ckpt


def test_b2_sigterm_flushes_in_flight_async_save(tmp_path) -> None:
    proc = _start(
        f"""
        import os, time, gangrun
        src = {str(tmp_path / "state")!r}
        os.makedirs(src)
        for i in range(16):
            with open(os.path.join(src, f"f{{i}}"), "wb") as f:
                f.write(os.urandom(2 << 20))
        ckpt = gangrun.context().checkpoint
        ckpt.save(src, step=5, blocking=False)
        print("ready", flush=True)
        while True:          # a loop that knows nothing of the stop notice
            time.sleep(0.01)
        """,
        _gang_env(tmp_path, GANGRUN_GRACE_PERIOD="20"),
    )
    code, _, err, _ = _stop(proc, timeout=20)
    assert code == notice.EXIT_STATUS, err
    assert "gangrun: stop requested (cause unknown" in err
    assert "gangrun: flushing 1 checkpoint save(s) in flight" in err
    assert _load(tmp_path).loaded_step == 5


def test_b3_stop_notice_carries_cause_and_deadline_to_a_loop_that_saves(tmp_path) -> None:
    stop_file = tmp_path / "stop.json"
    deadline = time.time() + 30
    stop_file.write_text(json.dumps({"cause": "Preempted", "message": "by high", "deadline": deadline}))
    proc = _start(
        """
        import time, gangrun
        ctx = gangrun.context()
        ctx.on_stop(lambda n: print("hook", n.cause, n.message, round(n.deadline), flush=True))
        step = 0
        print("ready", flush=True)
        while not ctx.stop_requested:
            step += 1
            time.sleep(0.01)
        ctx.checkpoint.save(b"final", step=step)
        print("saved", ctx.stop_notice.cause, flush=True)
        """,
        _gang_env(tmp_path, GANGRUN_STOP_FILE=str(stop_file)),
    )
    code, out, err, _ = _stop(proc, timeout=20)
    assert code == 143, err  # stopped, not done: a clean exit after a stop is 143 (notice.py)
    assert f"hook Preempted by high {round(deadline)}" in out and "saved Preempted" in out
    ckpt = _load(tmp_path)
    assert ckpt.loaded_from == "own" and ckpt.loaded_step is not None


def test_b3_loop_that_listens_but_never_stops_is_ended_before_the_deadline(tmp_path) -> None:
    proc = _start(
        """
        import time, gangrun
        ctx = gangrun.context()
        print("ready", flush=True)
        while True:
            ctx.stop_requested      # seen, and ignored
            time.sleep(0.01)
        """,
        _gang_env(tmp_path, GANGRUN_GRACE_PERIOD="4"),
    )
    code, _, err, elapsed = _stop(proc, timeout=15)
    assert code == notice.EXIT_STATUS, err
    assert "still running at the stop deadline" in err
    # It waited for the loop, and ended before a SIGKILL at the deadline would have. The margin before
    # the deadline is 10% of the grace period (0.4 s here): room for a loaded machine to be late.
    assert 3.0 <= elapsed < 4.0 + 0.5, elapsed


def test_b3_hook_that_calls_sys_exit_does_not_cancel_the_exit_at_the_deadline(tmp_path) -> None:
    # sys.exit() in a hook ends only the gangrun-stop thread that runs it; the flush and the exit
    # before the SIGKILL must still happen.
    proc = _start(
        """
        import sys, time, gangrun
        ctx = gangrun.context()
        ctx.on_stop(lambda n: sys.exit(0))
        print("ready", flush=True)
        while True:
            time.sleep(0.01)
        """,
        _gang_env(tmp_path, GANGRUN_GRACE_PERIOD="2"),
    )
    try:
        code, _, err, _ = _stop(proc, timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the worker was still running long after the stop deadline")
    assert code == notice.EXIT_STATUS, err
    assert "still running at the stop deadline" in err


def test_b3_previous_sigterm_handler_is_still_called(tmp_path) -> None:
    proc = _start(
        """
        import signal, time
        signal.signal(signal.SIGTERM, lambda s, f: print("previous handler", flush=True))
        import gangrun
        gangrun.context()
        print("ready", flush=True)
        while True:
            time.sleep(0.01)
        """,
        _gang_env(tmp_path),
    )
    code, out, _, elapsed = _stop(proc, timeout=10)
    assert "previous handler" in out and code == notice.EXIT_STATUS and elapsed < 5


@pytest.mark.parametrize(
    ("content", "want_cause", "want_deadline"),
    [
        pytest.param(None, None, 1000.0 + 7, id="no-stop-file-uses-grace-period"),
        pytest.param("{broken", None, 1000.0 + 7, id="unreadable-stop-file-uses-grace-period"),
        pytest.param('{"cause": "Preempted", "deadline": 1020.5}', "Preempted", 1020.5, id="backend-notice"),
        pytest.param('{"cause": "NodeFailures"}', "NodeFailures", 1000.0 + 7, id="notice-without-deadline"),
    ],
)
def test_b3_stop_notice_is_read_from_the_stop_file(tmp_path, content, want_cause, want_deadline) -> None:
    path = tmp_path / "stop.json"
    if content is not None:
        path.write_text(content)
    env = {notice.STOP_FILE_ENV: str(path), notice.GRACE_ENV: "7"}
    got = notice.read_notice(env, now=1000.0)
    assert (got.cause, got.deadline) == (want_cause, want_deadline)


def test_b3_a_cause_written_after_the_signal_is_the_notices_cause_once_written(tmp_path) -> None:
    """On Kubernetes Kueue's SIGTERM can reach a pod a moment before the controller's notice: the
    worker that asks for the notice after that sees its cause, and a cause once known stays."""
    path = tmp_path / "stop.json"
    state = notice._StopState()
    state.env = {notice.STOP_FILE_ENV: str(path), notice.GRACE_ENV: "7"}
    state.notice = notice.read_notice(state.env, now=1000.0)
    assert state.told() is not None and state.told().cause is None
    path.write_text('{"cause": "Preempted", "message": "preempted by ml/urgent", "deadline": 1020.5}')
    late = state.told()
    assert (late.cause, late.message, late.deadline, late.received_at) == ("Preempted", "preempted by ml/urgent",
                                                                           1020.5, 1000.0)
    path.write_text('{"cause": "Aborted"}')
    assert state.told() is late


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_b3_malformed_grace_period_names_the_variable(raw) -> None:
    with pytest.raises(WorkerEnvError, match="GANGRUN_GRACE_PERIOD"):
        notice.grace_period({notice.GRACE_ENV: raw})


def test_b3_handler_is_installed_only_in_a_gang_and_only_from_the_main_thread() -> None:
    Context.from_env({})
    assert signal.getsignal(signal.SIGTERM) is not notice.STATE.handle
    results: list[bool] = []
    t = threading.Thread(target=lambda: results.append(Context.from_env({}).install_stop_handler()))
    t.start()
    t.join()
    assert results == [False] and not notice.STATE.installed
    ctx = Context.from_env({}, install_stop_handler=True)
    assert notice.STATE.installed and ctx.stop_requested is False and ctx.stop_notice is None


def test_b3_reclaim_puts_gangrun_back_in_front_of_a_framework_that_replaced_it() -> None:
    """Lightning installs its own SIGTERM handler at the start of fit; after `reclaim()` SIGTERM reaches
    gangrun's handler first, and the handler gangrun found at install is still the one it calls."""
    assert notice.reclaim() is False, "nothing to reclaim before install"
    Context.from_env({}, install_stop_handler=True)
    found = notice.STATE.previous
    framework = lambda s, f: None  # noqa: E731
    signal.signal(signal.SIGTERM, framework)
    assert notice.reclaim() is True
    assert signal.getsignal(signal.SIGTERM) == notice.STATE.handle
    assert notice.STATE.previous is found, "the framework's handler is not chained in"
