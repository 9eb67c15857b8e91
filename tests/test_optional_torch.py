"""The torch tests skip where torch is not installed, at once, and fail instead under CI=true.

torch is the optional `torch` extra. These tests hide the installed torch from a pytest run of
tests/torch_sdk (only site-packages is hidden: whatever else is on the path, the test folders
included, stays visible, as on a machine without the extra) and check what that run reports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run pytest in a process where `import torch` sees what a machine without the torch extra sees.
WITHOUT_TORCH = """
import importlib.machinery, sys

class WithoutTorch:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "torch":
            return None
        bare = [p for p in sys.path if "site-packages" not in p and "dist-packages" not in p]
        spec = importlib.machinery.PathFinder.find_spec(name, bare)
        if spec is None:
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return spec  # what the test path itself offers under that name: that is the bug this guards

sys.meta_path.insert(0, WithoutTorch)
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def _pytest_without_torch(*, ci: bool) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "true"
    argv = [sys.executable, "-c", WITHOUT_TORCH, "-q", "-p", "no:cacheprovider", "-o", "addopts=-rs", "tests/torch_sdk"]
    started = time.monotonic()
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return r, time.monotonic() - started


def test_without_torch_the_torch_tests_skip_at_once() -> None:
    r, took = _pytest_without_torch(ci=False)
    assert r.returncode in (0, 5), f"exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"  # 5: all skipped
    assert "skipped" in r.stdout and "passed" not in r.stdout and "failed" not in r.stdout, r.stdout[-3000:]
    assert "could not import 'torch'" in r.stdout, r.stdout[-3000:]
    assert took < 60, f"skipping took {took:.0f}s: something waited"


def test_under_ci_a_missing_torch_fails_the_torch_tests() -> None:
    r, _ = _pytest_without_torch(ci=True)
    assert r.returncode != 0, r.stdout[-3000:]
    assert "No module named 'torch'" in r.stdout, r.stdout[-3000:]
