"""gangrun.torch in real gangs: sharded commit, resharding on load, own attempt first (S10, B1).

Gangs are expensive here (every rank imports torch), so a checkpoint written by a gang is checked by
loading it in the test process where a distributed load adds nothing: one process reading every
rank's shards is itself a load with another world size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gangrun import Checkpoint
from tests.torch_sdk.torchgang import Gang, require_torch

torch = require_torch()


def _manifest(root: Path, attempt: int, seq: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / f"attempt-{attempt}" / f"ckpt-{seq:06d}" / "manifest.json").read_text())
    return doc


def _whole(world: int) -> dict[str, Any]:
    """The worker's state (worker.py) as one process holds it: every row of `w`."""
    return {"w": torch.full((4 * world, 8), -1.0), "b": torch.zeros(8), "meta": {"note": None}}


@pytest.mark.parametrize("world", [2, 4], ids=["2-ranks", "4-ranks"])
def test_b1_sharded_save_commits_once_with_every_ranks_files(tmp_path: Path, world: int) -> None:
    from gangrun.torch import load_state

    root = tmp_path / "train"
    saved = Gang(root, world=world, mode="save", env={"STEP": "5"}).wait()
    assert {r["seq"] for r in saved} == {1}, "every rank reports the same save"
    files = {f["path"] for f in _manifest(root, 1, 1)["files"]}
    assert {f"__{r}_0.distcp" for r in range(world)} <= files, f"each rank wrote its own shard: {files}"
    assert {".metadata", "gangrun-torch.json"} <= files
    assert sorted(p.name for p in (root / "attempt-1").iterdir()) == ["ckpt-000001"], "no leftover"
    sd = _whole(world)
    loaded = load_state(sd, checkpoint=Checkpoint.for_path(str(root), attempt=1))
    assert loaded is not None and (loaded.step, loaded.world_size, loaded.loaded_from) == (5, world, "own")
    assert bool((sd["w"] == 5).all()) and bool((sd["b"] == -5).all()) and sd["meta"] == {"note": "x"}


@pytest.mark.parametrize(("saved", "loading"), [(4, 2), (2, 4)], ids=["shrink-4-to-2", "grow-2-to-4"])
def test_world_size_change_is_detected_and_resharded(tmp_path: Path, saved: int, loading: int) -> None:
    root = tmp_path / "train"
    Gang(root, world=saved, mode="save", env={"STEP": "9", "ASYNC": "1"}).wait()
    rows = 4 * saved  # worker.py: ROWS=4 per saving rank
    loaded = Gang(root, world=loading, mode="load", attempt=2, env={"GLOBAL_ROWS": str(rows)}).wait()
    assert len(loaded) == loading
    for r in loaded:
        assert r["ok"], f"rank {r['rank']} got wrong values after resharding: {r}"
        assert (r["step"], r["world_size"], r["resharded"], r["from"]) == (9, saved, True, "previous")
        assert r["local_rows"] == rows // loading, f"{rows} saved rows over {loading} ranks"
        assert r["meta"] == {"note": "x"}


def test_s10_own_attempt_wins_over_a_newer_looking_previous_one(tmp_path: Path) -> None:
    from gangrun.torch import load_state, save_state

    root = str(tmp_path / "train")
    save_state({"x": torch.full((3,), 50.0)}, step=50, blocking=True, checkpoint=Checkpoint.for_path(root, attempt=1))
    save_state({"x": torch.full((3,), 7.0)}, step=7, blocking=True, checkpoint=Checkpoint.for_path(root, attempt=2))
    sd = {"x": torch.zeros(3)}
    loaded = load_state(sd, checkpoint=Checkpoint.for_path(root, attempt=2))
    assert loaded is not None and (loaded.step, loaded.loaded_from) == (7, "own") and bool((sd["x"] == 7).all())
    sd = {"x": torch.zeros(3)}
    loaded = load_state(sd, checkpoint=Checkpoint.for_path(root, attempt=3))
    assert loaded is not None and (loaded.attempt, loaded.loaded_from) == (2, "previous")


def test_load_state_takes_another_tasks_checkpoint_only_through_resume_from(tmp_path: Path) -> None:
    from gangrun.torch import load_state, save_state

    old = str(tmp_path / "train" / "old-id")
    save_state({"x": torch.full((3,), 6.0)}, step=6, blocking=True, checkpoint=Checkpoint.for_path(old, attempt=1))
    mine = str(tmp_path / "train" / "new-id")
    sd = {"x": torch.zeros(3)}
    assert load_state(sd, checkpoint=Checkpoint.for_path(mine)) is None  # the same name is not enough
    loaded = load_state(sd, checkpoint=Checkpoint.for_path(mine, resume_from=str(tmp_path / "train")))
    assert loaded is not None and (loaded.step, loaded.loaded_from) == (6, "previous") and bool((sd["x"] == 6).all())
    assert loaded.uri.startswith(old + "/attempt-1/ckpt-")


def test_a_plain_ckpt_save_is_not_mistaken_for_a_torch_checkpoint(tmp_path: Path) -> None:
    from gangrun.torch import load_state, save_state

    root = str(tmp_path / "train")
    save_state({"x": torch.full((3,), 1.0)}, step=1, blocking=True, checkpoint=Checkpoint.for_path(root))
    Checkpoint.for_path(root).save(b"not torch", step=2)  # newer, but bytes
    sd = {"x": torch.zeros(3)}
    loaded = load_state(sd, checkpoint=Checkpoint.for_path(root))
    assert loaded is not None and loaded.step == 1 and bool((sd["x"] == 1).all())


def test_a_state_dict_that_does_not_match_the_checkpoint_raises_naming_it(tmp_path: Path) -> None:
    from gangrun._errors import CheckpointError
    from gangrun.torch import load_state, save_state

    root = str(tmp_path / "train")
    save_state({"x": torch.zeros(3)}, step=1, blocking=True, checkpoint=Checkpoint.for_path(root))
    with pytest.raises(CheckpointError, match=r"ckpt-000001 into this state dict: .*renamed"):
        load_state({"renamed": torch.zeros(3)}, checkpoint=Checkpoint.for_path(root))
