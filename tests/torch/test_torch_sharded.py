"""gangrun.torch in real gangs: sharded commit, resharding on load, own attempt first (S10, B1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchgang import Gang, require_torch

require_torch()


def _manifest(root: Path, attempt: int, seq: int) -> dict:  # type: ignore[type-arg]
    return json.loads((root / f"attempt-{attempt}" / f"ckpt-{seq:06d}" / "manifest.json").read_text())


@pytest.mark.parametrize("world", [2, 4], ids=["2-ranks", "4-ranks"])
def test_b1_sharded_save_commits_once_with_every_ranks_files(tmp_path: Path, world: int) -> None:
    root = tmp_path / "train"
    saved = Gang(root, world=world, mode="save", env={"STEP": "5"}).wait()
    assert {r["seq"] for r in saved} == {1}, "every rank reports the same save"
    files = {f["path"] for f in _manifest(root, 1, 1)["files"]}
    assert {f"__{r}_0.distcp" for r in range(world)} <= files, f"each rank wrote its own shard: {files}"
    assert {".metadata", "gangrun-torch.json"} <= files
    assert sorted(p.name for p in (root / "attempt-1").iterdir()) == ["ckpt-000001"], "no leftover"
    loaded = Gang(root, world=world, mode="load").wait()
    assert all(r["ok"] and r["step"] == 5 and r["from"] == "own" and not r["resharded"] for r in loaded), loaded


def test_world_size_change_is_detected_and_resharded_4_to_2(tmp_path: Path) -> None:
    root = tmp_path / "train"
    Gang(root, world=4, mode="save", env={"STEP": "9", "ASYNC": "1"}).wait()
    loaded = Gang(root, world=2, mode="load", attempt=2, env={"GLOBAL_ROWS": "16"}).wait()
    for r in loaded:
        assert r["ok"], f"rank {r['rank']} got wrong values after resharding: {r}"
        assert (r["step"], r["world_size"], r["resharded"], r["from"]) == (9, 4, True, "previous")
        assert r["local_rows"] == 8, "16 saved rows over 2 ranks"
        assert r["meta"] == {"note": "x"}


def test_s10_own_attempt_wins_over_a_newer_looking_previous_one(tmp_path: Path) -> None:
    root = tmp_path / "train"
    Gang(root, world=2, mode="save", attempt=1, env={"STEP": "50"}).wait()
    Gang(root, world=2, mode="save", attempt=2, env={"STEP": "7"}).wait()
    loaded = Gang(root, world=2, mode="load", attempt=2).wait()
    assert all(r["ok"] and r["step"] == 7 and r["from"] == "own" for r in loaded), loaded
