"""Run a real gang for a test: one process per rank, torch.distributed over gloo on loopback, with
the worker environment a gangrun backend sets (ranks, MASTER_ADDR/PORT, GANGRUN_CHECKPOINT_PATH).

The folder is not named ``torch``: the test path holds ``tests/``, and a folder named after a
package there is imported in its place (as a namespace package) when the real one is missing, so
``import torch`` would succeed without torch and the tests would fail instead of skipping
(tests/test_optional_torch.py proves that they skip).

torch is an optional extra: `require_torch()` skips a test module where it is missing, except under
CI (``CI=true``), where a missing torch fails it, so the torch path never goes untested unnoticed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

WORKER = Path(__file__).with_name("worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def require_torch() -> ModuleType:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        import torch  # an ImportError fails the module: CI installs the torch extra

        return torch
    return pytest.importorskip("torch")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(root: Path | str, *, rank: int, world: int, port: int, attempt: int = 1, task: str = "train",
             env: dict[str, str] | None = None) -> dict[str, str]:  # fmt: skip
    """The environment a gangrun backend gives rank `rank` of a one-node gang of `world`."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        "GANGRUN_TASK": task, "GANGRUN_ATTEMPT": str(attempt), "JOBSET_RESTART_ATTEMPT": "0",
        "NNODES": "1", "NODE_RANK": "0", "NPROC_PER_NODE": str(world), "RANK": str(rank),
        "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port), "GANGRUN_CHECKPOINT_PATH": f"{root}/attempt-{attempt}",
        "GANGRUN_PREV_CHECKPOINT_PATH": f"{root}/attempt-{attempt - 1}" if attempt > 1 else "",
        "GANGRUN_GRACE_PERIOD": "60", "OMP_NUM_THREADS": "1",
        **(env or {}),
    }  # fmt: skip


class Gang:
    """`world` worker processes running worker.py `mode`; `results()` parses their JSON lines."""

    def __init__(self, root: Path | str, *, world: int, mode: str, attempt: int = 1, task: str = "train",
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        port = free_port()
        self.procs: list[subprocess.Popen[str]] = []
        for rank in range(world):
            wenv = rank_env(root, rank=rank, world=world, port=port, attempt=attempt, task=task, env=env)
            argv = [sys.executable, str(WORKER), mode]
            self.procs.append(subprocess.Popen(argv, env=wenv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))

    def wait(self, timeout: float = 120, *, status: int = 0) -> list[dict[str, Any]]:
        """Wait for every rank; fails naming a rank that did not exit with `status`. Returns each rank's
        last JSON line."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        try:
            for rank, p in enumerate(self.procs):
                stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                assert p.returncode == status, f"rank {rank} exited {p.returncode}:\n{stderr[-4000:]}"
                lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
                out.append(lines[-1] if lines else {})
        finally:
            self.kill()
        return out

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()


class Zygote:
    """A process with torch imported that forks gang ranks on request (zygote.py): for tests that
    start many gangs, each rank then costs a fork rather than an interpreter and a torch import."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, str(WORKER.with_name("zygote.py"))], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip

    def fork(self, mode: str, env: dict[str, str], out: Path) -> int:
        """Start one rank running worker.py `mode` with `env`, its output appended to `out`; its pid."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"mode": mode, "env": env, "out": str(out)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the zygote died"
        return int(json.loads(line)["pid"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
