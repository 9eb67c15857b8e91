"""Run pytest as on a machine without an optional extra, for the tests that prove a missing extra skips.

Only site-packages is hidden, and only for the modules named: whatever else is on the path, the test
folders included, stays visible, as on a machine without the extra.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Run pytest in a process where importing one of HIDDEN sees what a machine without the extra sees.
WITHOUT = """
import importlib.machinery, os, sys

HIDDEN = set(os.environ["GANGRUN_TEST_HIDDEN"].split(","))

class WithoutExtra:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in HIDDEN:
            return None
        bare = [p for p in sys.path if "site-packages" not in p and "dist-packages" not in p]
        spec = importlib.machinery.PathFinder.find_spec(name, bare) if "." not in name else None
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec  # what the test path itself offers under that name: that is the bug this guards

sys.meta_path.insert(0, WithoutExtra)
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def pytest_without(hidden: Sequence[str], tests: str, *, ci: bool) -> tuple[subprocess.CompletedProcess[str], float]:
    """pytest on `tests` with the modules `hidden` (top-level or dotted names) missing; CI=true if `ci`.
    Returns the run and the seconds it took."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["GANGRUN_TEST_HIDDEN"] = ",".join(hidden)
    if ci:
        env["CI"] = "true"
    argv = [sys.executable, "-c", WITHOUT, "-q", "-p", "no:cacheprovider", "-o", "addopts=-rs", tests]
    started = time.monotonic()
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return r, time.monotonic() - started
