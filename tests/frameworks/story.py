"""The proof every framework integration owes: a 2-rank gang on the local backend, preempted twice and
with one worker SIGKILLed once, logs the same loss at every step as an uninterrupted run of the same
seed under torchrun.

The folder is not named after a framework: a folder of the test path named ``transformers`` would be
imported in place of the missing package and the tests would fail instead of skipping.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gangrun._backends.local import LocalBackend
from gangrun._manifest_file import load_manifest
from tests.local.conftest import checkpointed, phase, wait_for

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
LOSS = re.compile(r"step (\d+) loss (\S+)$")


def require(name: str) -> ModuleType:
    """The framework's module; a test module skips without it, except under CI (CI=true), where the
    extra is installed and a missing one fails."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        import importlib

        return importlib.import_module(name)
    return pytest.importorskip(name)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GANGRUN_", "TORCHELASTIC_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return {**env, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}


def start_torchrun(script: Path, cwd: Path, **env: str) -> subprocess.Popen[str]:
    """`script` under torchrun, 2 processes over gloo, outside any gang."""
    cwd.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, cwd / script.name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
            f"--master_port={port}", script.name]  # fmt: skip
    return subprocess.Popen(argv, cwd=cwd, env={**_env(), **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip


def losses(lines: list[str]) -> list[tuple[int, float]]:
    """Every `step N loss X` line, in order (a step run again after a resume appears again)."""
    found = [LOSS.search(line.rstrip()) for line in lines]
    return [(int(m.group(1)), float(m.group(2))) for m in found if m]


def digits(a: float, b: float) -> float:
    """Significant digits `a` and `b` agree to (17: the same float)."""
    if a == b:
        return 17.0
    return max(0.0, -math.log10(abs(a - b) / max(abs(a), abs(b))))


def interrupted_gang(backend: LocalBackend, script: Path, tmp: Path, *, name: str, steps: int,
                     at: tuple[int, int, int], env: dict[str, str]) -> list[str]:  # fmt: skip
    """Run `script` as a 2-rank gang: preempted once a checkpoint of step `at[0]` is committed, again at
    `at[1]`, and rank 1 SIGKILLed at `at[2]` (the retry resumes from attempt 1's checkpoint). Returns
    the log lines of both attempts once the task has succeeded."""
    work = tmp / name
    work.mkdir()
    shutil.copy(script, work / script.name)
    doc = {
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
        "spec": {
            "nodes": 2, "command": [sys.executable, script.name], "workingDir": str(work),
            "env": {"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "MAX_STEPS": str(steps), **env},
            "resources": {"cpu": "1", "memory": "100Mi"}, "retries": 1, "terminationGracePeriod": "120s",
            "failurePolicy": {"resumeAfterPreemption": True},
        },
    }  # fmt: skip
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    backend.submit(load_manifest(path))
    slow = 600.0  # starting a worker imports the framework: long on a loaded machine
    started = time.monotonic()

    def readmitted_past(times: int, step: int) -> Callable[[dict[str, Any]], bool]:
        """Running again after `times` readmissions, with a checkpoint of `step` or later."""
        def pred(v: dict[str, Any]) -> bool:
            back = sum(1 for e in v.get("evictions") or [] if e.get("readmittedAt"))
            return back >= times and v["phase"] == "Running" and checkpointed(step)(v)

        return pred

    for times, step in enumerate(at[:2]):
        wait_for(backend, name, readmitted_past(times, step), timeout=slow, what=f"a checkpoint of step >= {step}")
        print(f"[{time.monotonic() - started:.0f}s] evicting after step {step}'s checkpoint", flush=True)
        backend.evict(name, "Preempted")
    view = wait_for(backend, name, readmitted_past(2, at[2]), timeout=slow, what=f"a checkpoint of step >= {at[2]}")
    assert view["attempt"] == 1, "a preemption keeps the attempt"
    print(f"[{time.monotonic() - started:.0f}s] killing rank 1 after step {at[2]}'s checkpoint", flush=True)
    os.kill(view["gang"]["workers"][1]["pid"], signal.SIGKILL)
    done = wait_for(backend, name, phase("Succeeded"), timeout=slow)
    print(f"[{time.monotonic() - started:.0f}s] succeeded", flush=True)
    assert done["attempt"] == 2, "the SIGKILL cost one retry, the preemptions none"
    return [line for attempt in (1, 2) for line in backend.logs(name, attempt=attempt)]


def finish(proc: subprocess.Popen[str], timeout: float = 900) -> list[str]:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exited {proc.returncode}:\n{out[-4000:]}"
    return out.splitlines()


def compare(straight: list[tuple[int, float]], gang: list[tuple[int, float]], steps: int) -> dict[str, Any]:
    """Every step of the gang's log against the uninterrupted run's; the figures for the report."""
    want = dict(straight)
    assert sorted(want) == list(range(1, steps + 1)), straight
    assert {s for s, _ in gang} == set(want), "the gang logged every step"
    worst = min(digits(loss, want[s]) for s, loss in gang)
    rerun = len(gang) - len(want)
    print(f"\n{len(gang)} gang steps ({rerun} run again after the SIGKILL) against {steps}: "
          f"agree to {worst:.1f} significant digits at worst", flush=True)
    for s, loss in gang:
        assert digits(loss, want[s]) >= 6, f"step {s}: {loss!r} against {want[s]!r} uninterrupted"
    return {"worst_digits": worst, "rerun": rerun}


