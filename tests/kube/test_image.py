"""A deploy that runs: the wheel the Dockerfile installs holds what the example manifests run, and a
worker pod's command, as rendered, trains and checkpoints from that wheel alone.

No Docker engine here, so the image is checked as what it is made of: `pip wheel` (the Dockerfile's
first step), the wheel installed into a folder of its own, and the example manifest's container
command run under the rendered environment, with the pod's downward-API values filled in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from gangrun import _checkpoint_report
from gangrun._backends.kube import render_jobset
from gangrun._core.spec import parse_manifest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from exactly what the Dockerfile copies (pyproject.toml, README.md, src), as its build stage does."""
    context = tmp_path_factory.mktemp("context")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, context / name)
    shutil.copytree(ROOT / "src", context / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(context)], check=True, timeout=300, capture_output=True)
    (whl,) = out.glob("gangrun-*.whl")
    return whl


def test_the_wheel_holds_the_launcher_and_the_example_the_manifests_run(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"gangrun/launch.py", "gangrun/_worker/launch.py", "gangrun/examples/train.py",
            "gangrun/_checkpoint_report.py"} <= names
    for path in sorted((ROOT / "deploy" / "examples").glob("*.yaml")):
        command = yaml.safe_load(path.read_text())["spec"]["command"]
        assert command[:2] == ["python", "-m"], path.name
        assert command[2].replace(".", "/") + ".py" in names, f"{path.name} runs {command[2]}, not in the wheel"


def test_the_example_worker_pod_trains_and_checkpoints_from_the_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, timeout=300, capture_output=True)
    spec = parse_manifest(yaml.safe_load((ROOT / "deploy" / "examples" / "train.yaml").read_text()))
    js = render_jobset(spec, attempt=1)
    container = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    # What the pod itself provides: the downward API, a resolvable rank 0, its volumes (here, folders).
    env.update(NODE_RANK="0", JOBSET_RESTART_ATTEMPT="0", POD_NAMESPACE="default", MASTER_ADDR="localhost",
               STEPS="6", SAVE_EVERY="2", STEP_SECONDS="0")
    env["GANGRUN_CHECKPOINT_PATH"] = str(tmp_path / "checkpoints" / "train" / "attempt-1")
    env["GANGRUN_EVENTS_FILE"] = str(tmp_path / "run" / "events.jsonl")
    env["GANGRUN_TERMINATION_LOG"] = str(tmp_path / "termination-log")
    env["GANGRUN_STOP_FILE"] = str(tmp_path / "notice" / "stop-notice.json")
    (tmp_path / "run").mkdir()
    # The wheel's gangrun first; its dependencies (PyYAML, fsspec, crc32c) from this interpreter.
    env.update(PATH=os.environ.get("PATH", "/usr/bin:/bin"), PYTHONPATH=str(site))
    argv = [sys.executable if a == "python" else a for a in container["command"]]
    where = subprocess.run([sys.executable, "-c", "import gangrun; print(gangrun.__file__)"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert where.stdout.strip().startswith(str(site)), where.stdout
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "starting at step 0" in out.stdout and "done: step 6" in out.stdout, out.stdout
    commit = _checkpoint_report.read((tmp_path / "termination-log").read_text())
    assert commit is not None and commit.step == 6
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)  # a restarted round
    assert "starting at step 6 (own)" in again.stdout, again.stdout
    assert json.loads((tmp_path / "termination-log").read_text())["commits"] >= 1
