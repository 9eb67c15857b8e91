"""`python -m benchmarks.bench_goodput` in its smallest mode (CI smoke): it runs, and prints the side-by-side
figures for every configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_goodput_benchmark_prints_every_configuration_side_by_side() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_goodput", "--quick", "--json"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    configs = {(c["boost"], c["resumeAfterPreemption"]): c for c in out["configs"]}
    assert set(configs) == {(False, False), (True, False), (False, True), (True, True)}
    for c in configs.values():
        assert {"workLostSeconds", "goodput", "badputSeconds", "preemptions", "retriesSpent"} <= c.keys()
        assert {"queued", "waitingForReadmission", "workLost"} <= c["badputSeconds"].keys()
        assert 0.0 <= c["goodput"] <= 1.0
        assert c["preemptions"] >= 1  # the storm did preempt
        assert len(c["gangs"]) == out["gangs"]
    assert {"lostRatioOnOff_resumeOff", "lostRatioOnOff_resumeOn", "targetMet_resumeOff", "targetMet_resumeOn"} \
        <= out.keys()
