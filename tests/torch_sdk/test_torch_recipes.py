"""The recipes of docs/torch.md are code that runs: examples/torch_recipes/ under real torchrun
(2 processes, gloo), the doc's excerpts and before/after diff checked against those files, the
values `load_state` restores, and the should_stop() benchmark."""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.torch_sdk.torchgang import SRC, free_port, require_torch

torch = require_torch()

ROOT = SRC.parent
RECIPES = ROOT / "examples" / "torch_recipes"
DOC = ROOT / "docs" / "torch.md"


def _torchrun(script: Path, cwd: Path, **env: str) -> str:
    shutil.copy(script, cwd / script.name)
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1", **env}
    for name in ("GANGRUN_TASK", "GANGRUN_CHECKPOINT_PATH", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        full.pop(name, None)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                        f"--master_port={free_port()}", script.name],
                       cwd=cwd, env=full, capture_output=True, text=True, timeout=240)  # fmt: skip
    assert r.returncode == 0, f"{script.name} exited {r.returncode}:\n{r.stderr[-4000:]}"
    return r.stdout + r.stderr


def _final(out: str) -> str:
    return re.findall(r"^step \d+ weight .*$", out, re.M)[-1]


def test_the_recipe_resumes_mid_epoch_exactly_where_the_stopped_run_left_off(tmp_path: Path) -> None:
    """Stopped at step 11 (3 batches into the second epoch of 8) and run again, the recipe trains
    the same batches in the same order as a run that was never stopped: its weights match bit for bit."""
    (tmp_path / "straight").mkdir()
    (tmp_path / "stopped").mkdir()
    straight = _final(_torchrun(RECIPES / "after.py", tmp_path / "straight"))
    assert straight.startswith("step 24 ")
    assert _final(_torchrun(RECIPES / "after.py", tmp_path / "stopped", MAX_STEPS="11")).startswith("step 11 ")
    out = _torchrun(RECIPES / "after.py", tmp_path / "stopped")
    assert "loaded torch checkpoint from this attempt (seq 3, step 11, 2 ranks)" in out, out
    assert _final(out) == straight


def test_the_before_script_of_the_diff_runs_as_it_is(tmp_path: Path) -> None:
    _torchrun(RECIPES / "before.py", tmp_path)
    assert (tmp_path / "checkpoint.pt").exists()


def _blocks(doc: str, marker: str) -> list[tuple[str, str]]:
    """(argument of the marker, the fenced block right after it) for every `<!-- marker: ... -->`."""
    pattern = rf"<!-- {marker}: (.+?) -->\n```[a-z]*\n(.*?)```"
    return [(m.group(1), m.group(2)) for m in re.finditer(pattern, doc, re.S)]


def test_the_docs_show_the_recipes_as_they_are_tested() -> None:
    doc = DOC.read_text()
    excerpts = _blocks(doc, "excerpt")
    assert len(excerpts) >= 2, "the recipes quote their code"
    for path, block in excerpts:
        source = (ROOT / path).read_text()
        lines = [line.strip() for line in block.strip().splitlines()]
        have = [line.strip() for line in source.splitlines()]
        starts = [i for i, line in enumerate(have) if line == lines[0]]
        assert any(have[i : i + len(lines)] == lines for i in starts), f"docs/torch.md quotes {path} as it is not:\n{block}"
    diffs = _blocks(doc, "diff")
    assert len(diffs) == 1
    names, block = diffs[0]
    before, after = (RECIPES / n for n in names.split())
    want = difflib.unified_diff(before.read_text().splitlines(), after.read_text().splitlines(), before.name,
                                after.name, lineterm="")  # fmt: skip
    assert block.rstrip("\n") == "\n".join(want), "the before/after diff in docs/torch.md is out of date"


def test_load_state_restores_the_values_the_docs_list(tmp_path: Path) -> None:
    """What comes back from a torch checkpoint besides tensors (docs/torch.md, "Values besides tensors")."""
    import random

    from gangrun import Checkpoint
    from gangrun.torch import load_state, save_state

    ck = Checkpoint.for_path(str(tmp_path / "train"))
    rng = random.Random(7)
    saved = {
        "w": torch.full((3,), 2.0), "step": 41, "lr": 0.5, "name": "run-a", "flag": True, "none": None,
        "losses": [1.0, 0.5], "cfg": {"depth": 3, "act": "relu"}, "py_rng": rng.getstate(),
        "torch_rng": torch.get_rng_state(), "tuple": (1, "a"),
    }  # fmt: skip
    save_state(saved, step=41, blocking=True, checkpoint=ck)
    fresh = {
        "w": torch.zeros(3), "step": 0, "lr": 0.0, "name": "", "flag": False, "none": 1, "losses": [0.0, 0.0],
        "cfg": {"depth": 0, "act": ""}, "py_rng": None, "torch_rng": torch.zeros_like(saved["torch_rng"]),
        "tuple": None,
    }  # fmt: skip
    loaded = load_state(fresh, checkpoint=Checkpoint.for_path(str(tmp_path / "train")))
    assert loaded is not None and loaded.step == 41
    for key, value in saved.items():
        got = fresh[key]
        same = bool(torch.equal(got, value)) if isinstance(value, torch.Tensor) else got == value
        assert same, f"{key}: saved {value!r}, loaded {got!r}"

    from gangrun._errors import CheckpointError

    partial = {"w": torch.zeros(3), "losses": [], "cfg": {"depth": 0}}  # a list whole; a dict key by key
    load_state(partial, checkpoint=Checkpoint.for_path(str(tmp_path / "train")))
    assert (partial["losses"], partial["cfg"]) == ([1.0, 0.5], {"depth": 3}), "saved keys not asked for are left out"
    with pytest.raises(CheckpointError, match="Missing key in checkpoint state_dict: epoch"):
        load_state({"w": torch.zeros(3), "epoch": 0}, checkpoint=Checkpoint.for_path(str(tmp_path / "train")))


def test_the_should_stop_benchmark_runs() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "benchmarks.bench_should_stop", "--ranks", "2", "--calls", "50"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"2 ranks: should_stop\(\) median \d+ us", r.stdout), r.stdout
