"""The Flyte examples as a user runs them: examples/flyte/train.py, a Flyte script whose gang is preempted
halfway, returns the loss of an uninterrupted training, on attempt 1, resumed from its own checkpoint; the
README's Flyte snippet runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import require_flyte

require_flyte()

from gangrun.examples.train import FEATURES, dataset, loss, sgd_step  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "flyte" / "train.py"


def uninterrupted_loss(steps: int) -> float:
    xs, ys, _ = dataset()
    w = [0.0] * FEATURES
    for step in range(steps):
        w = sgd_step(w, xs, ys, step)
    return loss(w, xs, ys)


def test_the_flyte_example_survives_a_preemption_and_returns_the_uninterrupted_loss(home: Path,
                                                                                    tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run([sys.executable, str(EXAMPLE), "--epochs", "3", "--preempt"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert re.search(r"Preempted +attempt 1", out) and re.search(r"Readmitted +attempt 1", out), out[-3000:]
    resumed = re.findall(r"\[rank 0\] +rank 0/2 attempt 1: starting at step (\d+) \(own\)", out)
    assert resumed and int(resumed[-1]) >= 5, out[-3000:]
    assert f"final loss: {uninterrupted_loss(30):.4f}" in out


def readme_flyte_snippet() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## From Flyte", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readmes_flyte_snippet_runs_as_written(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "readme_flyte.py"
    script.write_text(readme_flyte_snippet())
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "1.5", r.stdout[-3000:]
