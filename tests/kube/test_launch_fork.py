"""A Python worker in a pod runs in a fork of its launcher (one interpreter start, not two), and ends as
python would have: its exit code, its traceback, a signal's status, the pod's report and 143 rule."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gangrun import _checkpoint_report
from gangrun._worker import launch
from gangrun._worker.forked_python import PythonCommand
from tests.kube.test_launch import _get_while_it_starts

PY = sys.executable
BIN = os.path.dirname(PY)
PATH = f"{BIN}:/usr/bin:/bin"


@pytest.mark.parametrize("args,env,want", [
    pytest.param([PY, "train.py", "--lr", "1"], {}, PythonCommand(("train.py", "--lr", "1"), path="train.py"),
                 id="this-interpreter-and-a-script"),
    pytest.param([os.path.basename(PY), "-m", "pkg.train", "x"], {}, PythonCommand(("-m", "x"), module="pkg.train"),
                 id="python-on-PATH-and-a-module"),
    pytest.param([PY, "-mpkg.train"], {}, PythonCommand(("-m",), module="pkg.train"), id="-m-glued-to-its-module"),
    pytest.param([PY, "-u", "train.py"], {}, None, id="an-option-is-python-s-job"),
    pytest.param([PY, "-c", "print(1)"], {}, None, id="-c"),
    pytest.param([PY, "-m"], {}, None, id="-m-without-a-module"),
    pytest.param([PY], {}, None, id="no-script"),
    pytest.param([PY, "app.pyz"], {}, None, id="a-zip-or-folder"),
    pytest.param(["torchrun", "train.py"], {}, None, id="another-program"),
    pytest.param(["/usr/bin/env", "python", "train.py"], {}, None, id="env"),
    pytest.param(["no-such-python", "train.py"], {}, None, id="not-on-PATH"),
    pytest.param([PY, "train.py"], {"NPROC_PER_NODE": "2"}, None, id="nproc-2-runs-torchrun"),
    pytest.param([PY, "train.py"], {"PYTHONPATH": "/elsewhere"}, None, id="a-PYTHON-variable-differs"),
])
def test_fork_plan_takes_only_this_interpreter_running_a_script_or_a_module(
        args: list[str], env: dict[str, str], want: PythonCommand | None) -> None:
    launcher_env = {"PATH": PATH}
    assert launch.fork_plan(args, {**launcher_env, **env}, executable=PY, launcher_env=launcher_env) == want


def test_fork_plan_refuses_the_same_binary_in_another_folder(tmp_path: Path) -> None:
    # A virtualenv's bin/python links to the base interpreter: same file, another Python (its own packages).
    (tmp_path / "python").symlink_to(os.path.realpath(PY))
    env = {"PATH": f"{tmp_path}:{PATH}"}
    assert launch.fork_plan(["python", "t.py"], env, executable=PY, launcher_env=env) is None
    assert launch.fork_plan([str(tmp_path / "python"), "t.py"], env, executable=PY, launcher_env=env) is None


# -- real launchers: the worker a fork, its end python's --

SCRIPT = """
import os, sys, time, signal
print("ready", os.getppid(), "gangrun._worker.launch" in sys.modules, os.environ.get("RANK"), __name__,
      os.path.basename(sys.argv[0]), sys.argv[1:], sys.path[0] == os.path.dirname(os.path.abspath(__file__)),
      flush=True)
how = sys.argv[1]
if how == "exit":
    sys.exit(int(sys.argv[2]))
if how == "message":
    sys.exit("it went wrong")
if how == "raise":
    def deep():
        raise ValueError("boom")
    deep()
if how == "interrupt":
    raise KeyboardInterrupt
if how == "save-on-sigterm":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
if how in ("save-on-sigterm", "sleep"):
    time.sleep(60)
print("unflushed end")  # flushed as the interpreter ends
"""


def _pod(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": PATH, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "JOB_COMPLETION_INDEX": "0",
            "NNODES": "1", "NPROC_PER_NODE": "1", "GANGRUN_EVENTS_FILE": str(tmp_path / "events.jsonl"),
            "GANGRUN_TERMINATION_LOG": str(tmp_path / "termination-log"), **extra}


def _launcher(tmp_path: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    return subprocess.Popen([PY, "-m", "gangrun.launch", "--", "python", str(script), *args], cwd=tmp_path,
                            env=_pod(tmp_path, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ends(tmp_path: Path, *args: str, **extra: str) -> tuple[int, list[str], str]:
    p = _launcher(tmp_path, *args, **extra)
    out, err = p.communicate(timeout=60)
    return p.returncode, out.splitlines(), err


def test_the_worker_is_the_launcher_s_fork_with_python_s_argv_path_and_the_worker_env(tmp_path: Path) -> None:
    p = _launcher(tmp_path, "exit", "0")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out.splitlines() == [f"ready {p.pid} True 0 __main__ worker.py ['exit', '0'] True"]


def test_opting_out_runs_the_worker_as_a_second_interpreter(tmp_path: Path) -> None:
    code, out, err = _ends(tmp_path, "exit", "0", GANGRUN_LAUNCH_FORK="0")
    assert code == 0 and out[0].split()[2] == "False", err


def test_the_forked_worker_s_exit_code_is_its_launcher_s(tmp_path: Path) -> None:
    assert _ends(tmp_path, "exit", "3")[0] == 3


def test_a_sys_exit_message_is_printed_and_exits_1(tmp_path: Path) -> None:
    code, _, err = _ends(tmp_path, "message")
    assert (code, err) == (1, "it went wrong\n")


def test_an_uncaught_exception_exits_1_with_the_traceback_of_the_script_only(tmp_path: Path) -> None:
    code, out, err = _ends(tmp_path, "raise")
    lines = err.splitlines()
    assert code == 1 and lines[0] == "Traceback (most recent call last):" and lines[-1] == "ValueError: boom", err
    assert f'File "{tmp_path / "worker.py"}"' in lines[1] and "gangrun" not in err and "runpy" not in err, err


def test_a_keyboard_interrupt_ends_the_worker_as_sigint_would(tmp_path: Path) -> None:
    code, _, err = _ends(tmp_path, "interrupt")
    assert code == 128 + signal.SIGINT and err.splitlines()[-1] == "KeyboardInterrupt", err


def test_stdout_is_flushed_as_the_forked_worker_ends(tmp_path: Path) -> None:
    code, out, _ = _ends(tmp_path, "normal")
    assert code == 0 and out[-1] == "unflushed end"


@pytest.mark.parametrize("how", ["save-on-sigterm", "sleep"])
def test_a_sigtermed_forked_worker_exits_143_and_leaves_its_report(tmp_path: Path, how: str) -> None:
    # saves and exits 0 (would read as a completed index without the 143 rule), or dies of the signal
    (tmp_path / "events.jsonl").write_text(
        '{"type":"checkpoint_committed","attempt":1,"rank":0,"seq":1,"step":5,"uri":"s3://b/5","time":5}\n')
    p = _launcher(tmp_path, how)
    try:
        assert p.stdout is not None and p.stdout.readline().startswith("ready")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 143
        commit = _checkpoint_report.read((tmp_path / "termination-log").read_text())
        assert commit is not None and commit.step == 5
    finally:
        p.kill()
        p.communicate()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_launcher_that_gives_up_before_the_start_never_runs_the_worker(tmp_path: Path) -> None:
    # Node 1 asks node 0's launcher for the start id; nobody answers: the fork waiting for it leaves unrun.
    code, out, err = _ends(tmp_path, "exit", "0", JOB_COMPLETION_INDEX="1", NNODES="2", MASTER_ADDR="127.0.0.1",
                           GANGRUN_REPORT_PORT=str(_free_port()), GANGRUN_DNS_TIMEOUT="0.5")
    assert code == launch.EXIT_DNS and out == [] and "did not say this start's id" in err


MULTIPROCESSING = """
import multiprocessing as mp, sys

def square(x):
    return x * x

if __name__ == "__main__":
    for method in ("fork", "spawn", "forkserver"):
        with mp.get_context(method).Pool(2) as pool:
            print(method, sum(pool.map(square, range(5))), flush=True)
"""


def test_multiprocessing_works_in_the_forked_worker(tmp_path: Path) -> None:
    (tmp_path / "mp.py").write_text(MULTIPROCESSING)
    out = subprocess.run([PY, "-m", "gangrun.launch", "--", PY, "mp.py"], cwd=tmp_path, env=_pod(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["fork 30", "spawn 30", "forkserver 30"]


GLOO = """
import os, torch, torch.distributed as dist, gangrun
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print("sum", int(t.item()), gangrun.context().rank, flush=True)
dist.destroy_process_group()
"""


def test_torch_ddp_gloo_works_in_forked_workers(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "ddp.py").write_text(GLOO)
    port = str(_free_port())
    for i in (0, 1):
        (tmp_path / str(i)).mkdir()
    procs = [subprocess.Popen([PY, "-m", "gangrun.launch", "--", PY, "ddp.py"], cwd=tmp_path,
                              env=_pod(tmp_path / str(i), JOB_COMPLETION_INDEX=str(i), NNODES="2",
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port, GANGRUN_TASK="t",
                                       GANGRUN_ATTEMPT="1", OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (0, 1)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        assert sorted(o[0].strip() for o in outs) == ["sum 3 0", "sum 3 1"]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


LIVE = """
import sys
import time
print("ready", flush=True)
sys.stdin.readline()
"""


def test_the_forked_worker_s_launcher_serves_the_live_report_while_it_runs(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text(
        '{"type":"checkpoint_committed","attempt":1,"rank":0,"seq":1,"step":9,"uri":"s3://b/9","time":5}\n')
    (tmp_path / "live.py").write_text(LIVE)
    port = _free_port()
    p = subprocess.Popen([PY, "-m", "gangrun.launch", "--", PY, "live.py"], cwd=tmp_path,
                         env=_pod(tmp_path, GANGRUN_REPORT_PORT=str(port)), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdin is not None and p.stdout.readline().strip() == "ready"
        commit = _checkpoint_report.read(_get_while_it_starts(f"http://127.0.0.1:{port}/"))
        assert commit is not None and commit.step == 9
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(timeout=60) == 0
    finally:
        p.kill()
        p.communicate()


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_launcher_stopped_while_its_fork_waits_leaves_no_worker_behind(tmp_path: Path) -> None:
    # SIGTERM during the wait for the start id: the launcher goes, and so does its waiting fork, unrun.
    p = _launcher(tmp_path, "exit", "0", JOB_COMPLETION_INDEX="1", NNODES="2", MASTER_ADDR="127.0.0.1",
                  GANGRUN_REPORT_PORT=str(_free_port()), GANGRUN_DNS_TIMEOUT="60")
    try:
        children = Path(f"/proc/{p.pid}/task/{p.pid}/children")
        deadline = time.monotonic() + 20
        while not children.read_text().split():
            assert time.monotonic() < deadline, "the launcher never forked"
            time.sleep(0.05)
        fork = int(children.read_text().split()[0])
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
        assert p.returncode == -signal.SIGTERM and out == ""
        while _running(fork):
            assert time.monotonic() < deadline + 10, "the fork outlived its launcher"
            time.sleep(0.05)
    finally:
        p.kill()
        p.communicate()
