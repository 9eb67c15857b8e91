"""Object stores: the same guarantees over a real S3-protocol server (moto, on 127.0.0.1).

S3 has no atomic rename, so a save commits by writing its manifest last (MarkerPending).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import s3fs

from gangrun import Checkpoint
from gangrun._ckpt.commit import MarkerPending, pending_for


def _ck(s3_root, tmp_path, attempt: int, **kw) -> Checkpoint:
    uri, opts = s3_root
    return Checkpoint.for_path(uri, attempt=attempt, storage_options=opts, cache_dir=tmp_path / "cache", **kw)


def test_s3_store_commits_by_manifest_marker(s3_root, tmp_path) -> None:
    ckpt = _ck(s3_root, tmp_path, 1)
    assert isinstance(pending_for(ckpt._storage, "bucket/x"), MarkerPending)


def test_s3_directory_round_trip_and_resume_from_previous_attempt(s3_root, tmp_path) -> None:
    src = tmp_path / "state"
    (src / "sub" / "empty").mkdir(parents=True)
    (src / "sub" / "w.bin").write_bytes(os.urandom(300_000))
    (src / "meta.json").write_text('{"step": 6}')
    _ck(s3_root, tmp_path, 1).save(src, step=6)
    ckpt = _ck(s3_root, tmp_path, 2)
    path = ckpt.load()
    assert (ckpt.loaded_from, ckpt.loaded_step) == ("previous", 6)
    assert (path / "sub" / "w.bin").read_bytes() == (src / "sub" / "w.bin").read_bytes()
    assert (path / "sub" / "empty").is_dir() and (path / "meta.json").read_text() == '{"step": 6}'
    assert ckpt.loaded_uri == f"{s3_root[0]}/attempt-1/ckpt-000001"


def test_s3_torn_save_without_manifest_is_ignored_and_cleaned_up(s3_root, tmp_path) -> None:
    uri, opts = s3_root
    fs = s3fs.S3FileSystem(**opts)
    _ck(s3_root, tmp_path, 1).save(b"good", step=1)
    torn = f"{uri.removeprefix('s3://')}/attempt-1/ckpt-000002/data/payload"
    fs.pipe_file(torn, b"half")  # data written, manifest never: the writer was killed
    ckpt = _ck(s3_root, tmp_path, 1)
    assert ckpt.load().read_bytes() == b"good" and ckpt.loaded_seq == 1
    assert ckpt.save(b"next", step=2).seq == 3  # never reuses the torn seq
    ckpt.wait()  # retention runs in the background, after the commit
    fs.invalidate_cache()
    assert not fs.exists(torn), "retention removes the torn leftover"
    assert _ck(s3_root, tmp_path, 1).load().read_bytes() == b"next"


def test_s3_corrupt_newest_falls_back(s3_root, tmp_path) -> None:
    uri, opts = s3_root
    fs = s3fs.S3FileSystem(**opts)
    ckpt = _ck(s3_root, tmp_path, 1)
    ckpt.save(b"one", step=1)
    ckpt.save(b"two", step=2)
    fs.pipe_file(f"{uri.removeprefix('s3://')}/attempt-1/ckpt-000002/data/payload", b"tw0")
    fresh = _ck(s3_root, tmp_path, 1)
    assert fresh.load().read_bytes() == b"one"


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
def test_s3_retention_and_async(s3_root, tmp_path, blocking) -> None:
    ckpt = _ck(s3_root, tmp_path, 1, keep_last=2)
    for step in range(4):
        ckpt.save(f"s{step}".encode(), step=step, blocking=blocking)
    ckpt.wait()
    assert sorted(ckpt._storage.list_names(ckpt._attempt_path)) == ["ckpt-000003", "ckpt-000004"]
    assert _ck(s3_root, tmp_path, 1).load().read_bytes() == b"s3"


def test_b2_background_save_in_flight_at_exit_is_flushed_from_its_snapshot(s3_root, tmp_path) -> None:
    # The save still in flight when the script ends must be flushed before exit takes away what it
    # needs: its staged snapshot (in the process cache, removed at exit) and the store's HTTP session.
    uri, opts = s3_root
    src = tmp_path / "state"
    src.mkdir()
    for i in range(8):
        (src / f"shard-{i}.bin").write_bytes(os.urandom(1 << 20))
    script = f"""
import gangrun
ckpt = gangrun.Checkpoint.for_path({uri!r}, attempt=1, storage_options={opts!r})
ckpt.save({str(src)!r}, step=3, blocking=False)
"""  # ends at once, with the upload in flight
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ckpt = _ck(s3_root, tmp_path, 1)
    path = ckpt.load()
    assert ckpt.loaded_step == 3, done.stderr
    assert (path / "shard-7.bin").read_bytes() == (src / "shard-7.bin").read_bytes()


def test_s3_saves_use_s3fs_even_when_another_library_took_over_the_s3_protocol(s3_root, tmp_path, monkeypatch) -> None:
    """The Flyte SDK registers obstore for s3:// when imported; a worker that imports it still saves."""
    import importlib

    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    registry = importlib.import_module("fsspec.registry")._registry  # what fsspec.register_implementation writes
    monkeypatch.setitem(registry, "s3", MemoryFileSystem)
    assert fsspec.get_filesystem_class("s3") is MemoryFileSystem
    ck = _ck(s3_root, tmp_path, 1)
    ck.save(b"weights", step=1)
    assert isinstance(ck._storage.fs, s3fs.S3FileSystem) and ck.load().read_bytes() == b"weights"
