"""The README's first Quickstart command runs the demo: it must tell the whole S11 story and succeed.

The demo is run as a user runs it (`python examples/preemption_demo.py`), with its temporary home
under this test's folder; the test reads only what the demo prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import _processes_with

DEMO = Path(__file__).resolve().parents[2] / "examples" / "preemption_demo.py"


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
