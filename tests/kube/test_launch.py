"""The worker launcher: ranks from the completion index, a bounded DNS wait, torchrun for nproc > 1."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gangrun import launch


def test_single_process_per_node_gets_rank_from_the_completion_index() -> None:
    env = launch.worker_environment({"JOB_COMPLETION_INDEX": "3", "NNODES": "4", "NPROC_PER_NODE": "1"})
    assert (env["NODE_RANK"], env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("3", "3", "0", "4")


def test_node_rank_from_the_downward_api_wins() -> None:
    env = launch.worker_environment({"NODE_RANK": "1", "JOB_COMPLETION_INDEX": "1", "NPROC_PER_NODE": "1"})
    assert env["RANK"] == "1"


def test_torchrun_rendezvous_id_names_the_jobset_and_restart_attempt() -> None:
    env = launch.worker_environment({"NODE_RANK": "1", "NNODES": "2", "NPROC_PER_NODE": "4",
                                     "MASTER_ADDR": "t-1-workers-0-0.t-1", "MASTER_PORT": "29500",
                                     "GANGRUN_JOBSET": "t-1", "JOBSET_RESTART_ATTEMPT": "2"})
    argv = launch.torchrun_argv(env, ["python", "train.py"])
    assert "RANK" not in env  # torchrun sets it per process
    assert "--rdzv-id=t-1-2" in argv and "--node-rank=1" in argv and "--nproc-per-node=4" in argv
    assert argv[-2:] == ["python", "train.py"]


def test_dns_wait_is_bounded_and_names_the_host() -> None:
    clock = iter(range(0, 1000, 10))

    def resolve(host: str) -> None:
        raise OSError("Name or service not known")

    with pytest.raises(TimeoutError, match="t-1-workers-0-0.t-1"):
        launch.wait_for_dns("t-1-workers-0-0.t-1", timeout=60, resolve=resolve, sleep=lambda s: None,
                            clock=lambda: next(clock))


def test_dns_wait_returns_once_the_name_resolves() -> None:
    answers = iter([OSError("no"), OSError("no"), "10.0.0.1"])

    def resolve(host: str) -> object:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    launch.wait_for_dns("h", timeout=60, resolve=resolve, sleep=lambda s: None)


def test_launcher_execs_the_command_with_the_worker_env() -> None:
    out = subprocess.run([sys.executable, "-m", "gangrun.launch", "--", sys.executable, "-c",
                          "import os; print(os.environ['RANK'], os.environ['NODE_RANK'])"],
                         env={"JOB_COMPLETION_INDEX": "2", "NNODES": "1", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["2", "2"]


def test_launcher_without_a_command_is_a_usage_error() -> None:
    assert launch.main(["--"]) == launch.EXIT_USAGE
