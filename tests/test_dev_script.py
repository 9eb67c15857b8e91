"""`./dev`: the demo installs gangrun alone; the commands that run the tests or benchmarks install the
extras too, into the same virtualenv, and no command repeats an install that is already there.

The virtualenv's `python` is a stand-in that records how it was called (no pip runs, nothing is
downloaded): what is checked is which installs `./dev` asks for, and when.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

DEV = Path(__file__).resolve().parents[1] / "dev"
# The installer `./dev` puts into the virtualenv first, at the version it pins.
UV = "-m pip install --quiet " + next(line.split("=", 1)[1].split()[0] for line in DEV.read_text().splitlines()
                                     if line.startswith("UV="))
RECORDER = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../calls"
"""


def _dev(venv: Path, *args: str) -> list[str]:
    calls = venv / "calls"
    calls.unlink(missing_ok=True)
    subprocess.run(["bash", str(DEV), *args], check=True, timeout=60, capture_output=True,
                   env={**os.environ, "GANGRUN_VENV": str(venv)})
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [c.replace(str(venv), "{venv}") for c in lines if "pip install" in c]


def test_the_demo_installs_only_the_package_and_the_tests_add_the_extras(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(RECORDER)
    python.chmod(0o755)

    assert _dev(venv, "demo") == [UV, "-m uv pip install --quiet --python {venv}/bin/python -c constraints.txt -e ."]
    assert _dev(venv, "demo") == []  # set up already
    assert _dev(venv, "bench") == [UV, "-m uv pip install --quiet --python {venv}/bin/python -c constraints.txt "
                                       "-e .[test,kubernetes,torch,flyte,transformers,lightning]"]
    assert _dev(venv, "bench") == []
    assert _dev(venv, "demo") == []  # the full install serves the demo too


def test_a_full_install_first_serves_the_demo_without_installing_again(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(RECORDER)
    python.chmod(0o755)
    assert len(_dev(venv, "bench")) == 2
    assert _dev(venv, "demo") == []


def test_constraints_pin_every_dependency_that_pyproject_names():
    """`./dev setup` installs with `-c constraints.txt`: a dependency added to pyproject.toml without
    `./dev lock` would be resolved by pip unpinned, and the cold install slow and unrepeatable again."""
    import re
    import tomllib

    root = DEV.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *(r for reqs in project["optional-dependencies"].values() for r in reqs)]

    def name(req: str) -> str:
        return re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower().replace("_", "-")

    pinned = {name(line) for line in (root / "constraints.txt").read_text().splitlines()
              if line and not line.startswith("#")}
    assert {name(r) for r in wanted} - pinned == set()


def test_the_flyte_extra_alone_is_enough_for_the_connector():
    """The connector submits gangs through the Kubernetes backend: `pip install 'gangrun[flyte]'` must bring
    everything the `kubernetes` extra does (issue 26 item 3)."""
    import tomllib

    extras = tomllib.loads((DEV.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["kubernetes"]) <= set(extras["flyte"])
