"""Fixtures for the local backend: a private GANGRUN_HOME per test, a small quota, and a check that
no worker process outlives its test."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangrun._backends.local import LocalBackend
from gangrun._core.phases import Phase
from gangrun._core.spec import TaskSpec
from gangrun._manifest_file import load_manifest

WORKER = Path(__file__).with_name("worker.py")
TIMEOUT = 90.0  # generous: the machine is shared; the typical path takes seconds


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def backend(home: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(home)
    b.up(cpu="2", memory="2Gi", gpu=0)
    yield b
    b.down()


@pytest.fixture(autouse=True)
def no_process_left_behind(tmp_path: Path) -> Iterator[None]:
    """Fails a test that leaves a daemon or a worker of its home running."""
    yield
    marker = f"GANGRUN_HOME={(tmp_path / 'home').resolve()}".encode()
    deadline = time.monotonic() + 10
    while True:
        left = _processes_with(marker)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


def _processes_with(marker: bytes) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry.name}/environ").read_bytes()
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        if marker in env.split(b"\0") and stat.split(")")[-1].split()[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def manifest(tmp_path: Path) -> Callable[..., TaskSpec]:
    """Write a manifest for tests/local/worker.py and load it like the CLI does."""

    def make(name: str, *, nodes: int = 2, steps: int = 14, step_seconds: float = 0.2, priority: str = "",
             retries: int = 0, max_restarts: int = 0, resume: bool = False, env: dict[str, str] | None = None,
             queue: str = "default", cpu: str = "1", max_runtime: str | None = None, grace: str = "3s",
             command: list[str] | None = None, gpu: int = 0, max_system_retries: int | None = None,
             extra: dict[str, Any] | None = None) -> TaskSpec:
        spec: dict[str, Any] = {
            "nodes": nodes, "command": command or [sys.executable, str(WORKER)],
            "env": {"STEPS": str(steps), "STEP_SECONDS": str(step_seconds), **(env or {})},
            "resources": {"cpu": cpu, "memory": "100Mi", "gpu": gpu}, "retries": retries, "queue": queue,
            "failurePolicy": {"maxRestarts": max_restarts, "resumeAfterPreemption": resume},
            "terminationGracePeriod": grace,
        }
        if priority:
            spec["priorityClass"] = priority
        if max_runtime:
            spec["maxRuntime"] = max_runtime
        if max_system_retries is not None:
            spec["maxSystemRetries"] = max_system_retries
        spec.update(extra or {})
        doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name}, "spec": spec}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return load_manifest(path)

    return make


def wait_for(b: LocalBackend, name: str, predicate: Callable[[dict[str, Any]], bool], *,
             timeout: float = TIMEOUT, what: str = "", after_end: bool = False) -> dict[str, Any]:
    """The task's view once `predicate` holds. Fails at once, with the task's reason, when the task
    has ended without it: its phase will not change again, so waiting out the timeout would only hide
    why. `after_end`: what is awaited comes after the end (its workers stopping, its quota released)."""
    deadline = time.monotonic() + timeout
    view = b.get(name)
    while not predicate(view):
        if not after_end and Phase(view["phase"]).terminal:
            raise AssertionError(f"{name}: ended {view['phase']} ({view['reason']}) before {what or predicate}; "
                                 f"last view: {view}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: timed out waiting for {what or predicate}; last view: {view}")
        view = b.wait_for_change(name, after_version=(view["attempt"], view["phaseVersion"], view["phase"]),
                                 timeout=0.2)
    return view


def phase(p: str) -> Callable[[dict[str, Any]], bool]:
    return lambda v: v["phase"] == p


def checkpointed(step: int) -> Callable[[dict[str, Any]], bool]:
    def pred(v: dict[str, Any]) -> bool:
        last = v["accounting"]["lastCheckpoint"]
        return bool(last and (last.get("step") or 0) >= step)

    return pred


def event_types(b: LocalBackend, name: str) -> list[str]:
    return [e.type.value for e in b.events(name)]


def kill_daemon(b: LocalBackend) -> None:
    """SIGKILL the home's daemon and wait until it is gone (its lock is free for the next one)."""
    import signal

    pid = b.status()["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.05)
