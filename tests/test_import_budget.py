"""Import budget: what a process pays before its first line. Every pod's launcher imports `gangrun`, and
every worker `gangrun.context()` and `gangrun.checkpoint`; neither may load what only the control plane,
another store or an async caller needs. Module counts and names, not timings (the machine may be busy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Never loaded by `import gangrun`, a worker's context and checkpoint (local root), or the launcher.
HEAVY = ("kubernetes", "yaml", "fsspec", "crc32c", "asyncio", "importlib.metadata", "sqlite3", "gangrun._api",
         "gangrun._backends", "gangrun.cli", "gangrun._core.lifecycle", "gangrun._core.policy", "gangrun._core.state")


def _loaded(code: str, **env: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", f"import sys; {code}; import json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, env={**os.environ, **env}).stdout
    return list(json.loads(out.splitlines()[-1]))


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY))]


def test_import_gangrun_loads_only_the_errors() -> None:
    modules = _loaded("import gangrun")
    assert [m for m in modules if m.startswith("gangrun")] == ["gangrun", "gangrun._errors"]
    assert _heavy(modules) == []


def test_a_worker_s_context_and_local_checkpoint_load_nothing_heavy(tmp_path: Path) -> None:
    modules = _loaded("import gangrun, gangrun.checkpoint; ctx = gangrun.context(); ctx.checkpoint",
                      GANGRUN_CHECKPOINT_PATH=str(tmp_path / "ckpt"))
    assert _heavy(modules) == []
    assert len(modules) < 200, len(modules)  # 170 with fsspec, asyncio and the lifecycle core, 120 without


def test_the_launcher_loads_no_checkpoint_internals(tmp_path: Path) -> None:
    # The forked worker inherits the launcher's modules: print them as the worker's first line.
    (tmp_path / "w.py").write_text("import sys, json; print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-m", "gangrun.launch", "--", sys.executable, "w.py"], cwd=tmp_path,
                         env={**os.environ, "GANGRUN_TERMINATION_LOG": str(tmp_path / "log"), "NPROC_PER_NODE": "1"},
                         capture_output=True, text=True, check=True).stdout
    modules = json.loads(out)
    assert "gangrun._worker.launch" in modules and _heavy(modules) == []
    assert not [m for m in modules if m.startswith(("gangrun.checkpoint", "gangrun._ckpt"))]


def test_the_checkpoint_subpackage_is_still_an_attribute_of_gangrun() -> None:
    # `import gangrun` used to load it; code that reaches it as `gangrun.checkpoint.X` keeps working.
    out = subprocess.run([sys.executable, "-c", "import gangrun; print(gangrun.checkpoint.Checkpoint is gangrun.Checkpoint)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
