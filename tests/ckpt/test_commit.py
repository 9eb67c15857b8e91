"""B1: only complete saves are loaded; an unreadable newest one falls back; retention keeps the last N."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gangrun import Checkpoint
from gangrun._ckpt.layout import entry_name


def _entry_dir(root: Path, attempt: int, seq: int) -> Path:
    return root / f"attempt-{attempt}" / entry_name(seq)


def _corrupt_payload(d: Path) -> None:
    p = d / "data" / "payload"
    p.write_bytes(b"X" + p.read_bytes()[1:])


def _truncate_payload(d: Path) -> None:
    p = d / "data" / "payload"
    p.write_bytes(p.read_bytes()[:-1])


def _delete_payload(d: Path) -> None:
    (d / "data" / "payload").unlink()


def _garble_manifest(d: Path) -> None:
    (d / "manifest.json").write_text("{not json")


def _escape_manifest(d: Path) -> None:
    doc = json.loads((d / "manifest.json").read_text())
    doc["files"][0]["path"] = "../../../etc/passwd"
    (d / "manifest.json").write_text(json.dumps(doc))


def _second_file_in_bytes_manifest(d: Path) -> None:
    (d / "data" / "extra").write_bytes(b"")
    doc = json.loads((d / "manifest.json").read_text())
    doc["files"].append({"path": "extra", "size": 0, "crc32": 0})
    (d / "manifest.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        pytest.param(_corrupt_payload, "checksum mismatch", id="checksum-mismatch"),
        pytest.param(_truncate_payload, "bytes, manifest says", id="size-mismatch"),
        pytest.param(_delete_payload, "is missing", id="data-file-missing"),
        pytest.param(_garble_manifest, "unreadable manifest", id="garbled-manifest"),
        pytest.param(_escape_manifest, "unsafe path", id="manifest-path-escapes-cache"),
        pytest.param(_second_file_in_bytes_manifest, "lists 2 files", id="bytes-manifest-lists-two-files"),
    ],
)
def test_b1_corrupt_newest_falls_back_to_previous_good(tmp_path, damage, why, capsys) -> None:
    root = tmp_path / "train"
    Checkpoint.for_path(str(root), attempt=1).save(b"step-1", step=1)
    own = Checkpoint.for_path(str(root), attempt=2)
    own.save(b"step-2", step=2)
    own.save(b"step-3", step=3)
    damage(_entry_dir(root, 2, 2))
    damage(_entry_dir(root, 2, 1))
    ckpt = Checkpoint.for_path(str(root), attempt=2, cache_dir=tmp_path / "cache")
    assert ckpt.load().read_bytes() == b"step-1"
    assert (ckpt.loaded_from, ckpt.loaded_step) == ("previous", 1)
    err = capsys.readouterr().err
    assert err.count("gangrun: skipping checkpoint") == 2 and why in err
    assert not [p for p in (tmp_path / "cache").iterdir() if ".part-" in p.name], "half-restored copy left behind"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["attempt-1-seq-1"], "rejected copy left behind"


@pytest.mark.parametrize(
    "leftover",
    [
        pytest.param(lambda d: os.rename(d, f"{d}.tmp-deadbeef"), id="rename-store-tmp-folder"),
        pytest.param(lambda d: (d / "manifest.json").unlink(), id="marker-store-folder-without-manifest"),
        pytest.param(lambda d: os.rename(d, f"{d}.del-deadbeef"), id="half-deleted-folder"),
    ],
)
def test_b1_uncommitted_save_is_never_loaded(tmp_path, leftover) -> None:
    root = tmp_path / "train"
    ckpt = Checkpoint.for_path(str(root), attempt=1)
    ckpt.save(b"good", step=1)
    ckpt.save(b"torn", step=2)
    leftover(_entry_dir(root, 1, 2))
    fresh = Checkpoint.for_path(str(root), attempt=1)
    assert fresh.load().read_bytes() == b"good"
    assert fresh.loaded_step == 1


def test_b1_new_save_never_reuses_a_leftover_seq(tmp_path) -> None:
    root = tmp_path / "train"
    (root / "attempt-1" / f"{entry_name(7)}.tmp-abc" / "data").mkdir(parents=True)
    info = Checkpoint.for_path(str(root), attempt=1).save(b"x")
    assert info.seq == 8


def test_b2_retention_keeps_last_n_across_attempts_and_removes_leftovers(store, run_history) -> None:
    run_history(store, {1: [1, 2], 2: [3]})
    ckpt = store(3, keep_last=2)
    storage = ckpt._storage
    torn = f"{ckpt._attempt_path}/{entry_name(9)}"
    ckpt.save(b"step-4", step=4)  # seq 1 of attempt 3
    storage.makedirs(f"{ckpt._root_path}/attempt-1/{entry_name(5)}.tmp-x")  # an old killed save
    ckpt.save(b"step-5", step=5)
    ckpt.wait()  # retention runs in the background, after the commit
    kept = []
    for attempt in (1, 2, 3):
        for name in sorted(storage.list_names(f"{ckpt._root_path}/attempt-{attempt}")):
            kept.append((attempt, name))
    assert kept == [(3, entry_name(1)), (3, entry_name(2))]
    assert not storage.exists(torn)
    assert store(3).load().read_bytes() == b"step-5"


def test_b2_keep_last_none_keeps_everything(store, run_history) -> None:
    run_history(store, {1: [1, 2, 3, 4]})
    ckpt = store(1, keep_last=None)
    ckpt.save(b"step-5", step=5)
    ckpt.wait()
    assert len(ckpt._storage.list_names(ckpt._attempt_path)) == 5
