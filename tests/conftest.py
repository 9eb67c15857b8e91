"""Fixtures shared by the tests of the `gangrun` command against a private local control plane."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

Gangrun = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of a `gangrun` command whose local state is this test's own."""
    return {**os.environ, "GANGRUN_HOME": str(tmp_path / "home")}


@pytest.fixture
def gangrun(env: dict[str, str]) -> Iterator[Gangrun]:
    """Run `gangrun ARGS...` as a user would (a new process), with a local control plane up for the test."""
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([sys.executable, "-m", "gangrun", *args], capture_output=True, text=True, env=env,
                           timeout=120)
        if check and r.returncode != 0:
            raise AssertionError(f"gangrun {' '.join(args)} exited {r.returncode}: {r.stderr}")
        return r

    run("local", "up", "--cpu", "2", "--memory", "1Gi")
    yield run
    run("local", "down", check=False)
