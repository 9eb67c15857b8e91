"""The README's first Quickstart command runs the demo: it must tell the whole S11 story and succeed.

The demo is run as a user runs it (`python examples/preemption_demo.py`), with its temporary home
under this test's folder; the test reads only what the demo prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from .conftest import _processes_with

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "preemption_demo.py"


def test_s11_the_demo_is_preempted_waits_and_resumes_from_the_save_it_made_when_stopped(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("GANGRUN_HOME", None)
    r = subprocess.run([sys.executable, str(DEMO)], env=env, capture_output=True, text=True, timeout=300,
                       check=False)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "train was preempted and keeps attempt 1; it waits for re-admission" in out
    assert "train: Succeeded on attempt 1 (user retries used 0)" in out
    resumed = re.search(r"CheckpointCommitted +checkpoint committed \(step (\d+)\) by rank 0  <- resumed from", out)
    assert resumed, out
    assert f"starting at step {resumed.group(1)} (own)" in out  # rank 0 loaded exactly that save
    assert "preemptions: 1 Preempted," in out, out
    home = re.search(r"GANGRUN_HOME=(\S+) gangrun ui", out)
    assert home and Path(home.group(1)).is_relative_to(tmp_path), out
    assert not _processes_with(f"GANGRUN_HOME={home.group(1)}".encode()), "the demo left processes running"


# Imported first by every Python process of the run (the demo, the daemon, the workers): an installed
# module that belongs to none of gangrun's own dependencies (the extras, the test tools) is hidden, as
# on a machine where `./dev demo` installed the package alone.
PACKAGE_ALONE = """
import importlib.machinery, importlib.metadata, re, sys

def _name(req):
    return re.split(r"[\\[<>=!~; ]", req, maxsplit=1)[0].lower().replace("_", "-")

wanted, todo = set(), [_name(r) for r in {deps!r}]
while todo:
    dist = todo.pop()
    if dist in wanted:
        continue
    wanted.add(dist)
    try:
        todo += [_name(r) for r in importlib.metadata.requires(dist) or [] if "extra ==" not in r]
    except importlib.metadata.PackageNotFoundError:
        pass
owners = importlib.metadata.packages_distributions()

class PackageAlone:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if path is not None:
            return None  # a submodule: its package was allowed
        spec = importlib.machinery.PathFinder.find_spec(name)
        where = (spec and spec.origin) or ""
        if "-packages" in where and not {{_name(d) for d in owners.get(name, [])}} & wanted:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden: not a dependency of gangrun)", name=name)
        return None

sys.meta_path.insert(0, PackageAlone)
"""


def test_the_demo_runs_with_the_package_alone(tmp_path: Path) -> None:
    """`./dev demo` installs gangrun without its extras: the story needs nothing else."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    hide = tmp_path / "package-alone"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(textwrap.dedent(PACKAGE_ALONE.format(deps=deps)))
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(hide)})
    assert "hidden: not a dependency of gangrun" in probe.stderr, probe.stderr  # the hiding works
    env = {**os.environ, "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(hide), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("GANGRUN_HOME", None)
    r = subprocess.run([sys.executable, str(DEMO)], env=env, capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "train: Succeeded on attempt 1" in r.stdout and "hidden" not in r.stdout + r.stderr
