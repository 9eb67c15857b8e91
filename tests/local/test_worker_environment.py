"""Which environment a local task's workers get: the submitting client's (its PATH, VIRTUAL_ENV and the
rest), `spec.env` over it, gangrun's worker variables over that; nothing of the daemon's own.

Real processes throughout: the daemon is started by one `gangrun` process with one environment, the task
is submitted by another process (or this one, through the Python API) with another, and the workers
print what they see.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import gangrun
from gangrun._backends.local import LocalBackend
from gangrun._backends.local.render import resolve_executable

SHOW = ("import os, sys; print('submitter=' + os.environ.get('ONLY_IN_THE_SUBMITTER', '-')); "
        "print('daemon=' + os.environ.get('ONLY_IN_THE_DAEMON', '-')); print('both=' + os.environ['BOTH']); "
        "print('rank=' + os.environ['RANK'])")


def _gangrun(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "gangrun", *args], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, f"gangrun {' '.join(args)} exited {r.returncode}: {r.stderr}"
    return r


@pytest.fixture
def daemon_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A local control plane started by a process whose environment has a variable no submitter has."""
    env = {**os.environ, "GANGRUN_HOME": str(tmp_path / "home"), "ONLY_IN_THE_DAEMON": "leaked"}
    _gangrun(env, "local", "up", "--cpu", "2", "--memory", "1Gi")
    yield env
    subprocess.run([sys.executable, "-m", "gangrun", "local", "down"], env=env, capture_output=True, timeout=120)


def _submitter(daemon_env: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in daemon_env.items() if k != "ONLY_IN_THE_DAEMON"}
    return {**env, **extra}


def _manifest(tmp_path: Path, name: str, command: list[str], env: dict[str, str] | None = None) -> Path:
    doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
           "spec": {"nodes": 1, "command": command, "env": env or {},
                    "resources": {"cpu": "1", "memory": "100Mi"}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_workers_get_the_submitters_environment_not_the_daemons(tmp_path, daemon_env):
    submitter = _submitter(daemon_env, ONLY_IN_THE_SUBMITTER="came along", BOTH="from the shell", RANK="7")
    path = _manifest(tmp_path, "env", [sys.executable, "-c", SHOW], env={"BOTH": "from spec.env"})
    view = json.loads(_gangrun(submitter, "run", str(path), "-o", "json").stdout)
    assert view["phase"] == "Succeeded", view["reason"]
    out = _gangrun(submitter, "logs", "env").stdout.splitlines()
    # The submitter's own variable arrives, the daemon's does not, spec.env wins over the shell, and
    # gangrun's worker variables win over both (a shell's stale RANK is not the worker's).
    assert out == ["submitter=came along", "daemon=-", "both=from spec.env", "rank=0"]


def test_python_resolves_to_the_submitters_virtualenv(tmp_path, daemon_env):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    submitter = _submitter(daemon_env, PATH=f"{venv / 'bin'}{os.pathsep}{daemon_env['PATH']}",
                           VIRTUAL_ENV=str(venv))
    path = _manifest(tmp_path, "venv", ["python", "-c", "import os, sys; print(sys.prefix); print(os.environ['VIRTUAL_ENV'])"])
    _gangrun(submitter, "submit", str(path))
    view = json.loads(_gangrun(submitter, "get", "venv", "-o", "json").stdout)
    assert view["executable"] == str(venv / "bin" / "python")
    assert f"Executable:     {venv / 'bin' / 'python'}" in _gangrun(submitter, "describe", "venv").stdout
    assert gangrun.attach("venv", home=tmp_path / "home").wait(timeout=90)["phase"] == "Succeeded"
    assert _gangrun(submitter, "logs", "venv").stdout.splitlines() == [str(venv), str(venv)]


def test_the_python_api_submits_with_its_own_environment(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("ONLY_IN_THE_DAEMON", "leaked")
    backend = LocalBackend(home)
    backend.up(cpu="2", memory="1Gi", gpu=0)  # the daemon starts with this process's environment of now
    try:
        monkeypatch.delenv("ONLY_IN_THE_DAEMON")
        monkeypatch.setenv("ONLY_IN_THE_SUBMITTER", "came along")
        monkeypatch.setenv("BOTH", "from the process")
        task = gangrun.ClusteredTask(name="api", nodes=1, command=[sys.executable, "-c", SHOW],
                                     resources={"cpu": "1", "memory": "100Mi"})
        run = gangrun.submit(task, home=home)
        assert run.wait(timeout=90)["phase"] == "Succeeded"
        assert run.logs().splitlines() == ["submitter=came along", "daemon=-", "both=from the process", "rank=0"]
    finally:
        backend.down()


def test_a_command_not_on_the_submitters_path_is_shown_as_not_found(tmp_path, daemon_env):
    path = _manifest(tmp_path, "nowhere", ["no-such-program-here"])
    _gangrun(_submitter(daemon_env), "submit", str(path))
    assert json.loads(_gangrun(daemon_env, "get", "nowhere", "-o", "json").stdout)["executable"] is None
    assert "Executable:     not found on the submitting PATH" in _gangrun(daemon_env, "describe", "nowhere").stdout


def test_the_command_is_resolved_as_the_submitters_shell_would(tmp_path) -> None:
    bin_ = tmp_path / "venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").write_text("#!/bin/sh\n")
    (bin_ / "python").chmod(0o755)
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "run.sh").chmod(0o755)
    (tmp_path / "data.txt").write_text("")
    cwd = str(tmp_path)
    assert resolve_executable("python", path=f"{bin_}:/usr/bin", cwd=cwd) == str(bin_ / "python")
    assert resolve_executable("./run.sh", path="", cwd=cwd) == str(tmp_path / "run.sh")
    assert resolve_executable("data.txt", path=cwd, cwd=cwd) is None  # not executable
    assert resolve_executable("./data.txt", path="", cwd=cwd) is None
    assert resolve_executable("no-such-program", path=str(bin_), cwd=cwd) is None
    assert resolve_executable(str(bin_ / "python"), path="", cwd="/") == str(bin_ / "python")
