"""Where the daemon's socket goes when the home's own path is too long for a Unix socket."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from gangrun._backends.local.config import SOCKET_MAX, socket_path
from gangrun._errors import UsageError


@pytest.fixture
def long_home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    home = tmp_path / ("h" * SOCKET_MAX)
    return home


def test_a_long_home_gets_its_socket_in_a_private_temp_dir(long_home: Path, tmp_path: Path) -> None:
    sock = socket_path(long_home)
    assert sock.parent == tmp_path / f"gangrun-{os.getuid()}"
    assert sock.parent.stat().st_mode & 0o777 == 0o700


def test_an_existing_socket_dir_open_to_others_is_made_private(long_home: Path, tmp_path: Path) -> None:
    d = tmp_path / f"gangrun-{os.getuid()}"
    d.mkdir()
    d.chmod(0o777)
    assert socket_path(long_home).parent == d
    assert d.stat().st_mode & 0o777 == 0o700


def test_a_socket_dir_planted_by_someone_else_is_refused(long_home: Path, tmp_path: Path) -> None:
    d = tmp_path / f"gangrun-{os.getuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    d.symlink_to(elsewhere)
    with pytest.raises(UsageError, match=f"{d}.*not a private directory"):
        socket_path(long_home)
    if os.getuid() == 0:  # only root can give the directory to another user
        d.unlink()
        d.mkdir(mode=0o700)
        os.chown(d, 65534, 65534)
        with pytest.raises(UsageError, match=f"{d}.*not a private directory"):
            socket_path(long_home)


def test_logs_run_files_and_checkpoints_are_keyed_by_the_tasks_identity(tmp_path: Path) -> None:
    from gangrun._backends.local.config import Paths

    p = Paths(tmp_path)
    assert p.logs("train", "id-1", 2) == tmp_path / "logs" / "train" / "id-1" / "attempt-2"
    assert p.run("train", "id-1", 2) == tmp_path / "run" / "train" / "id-1" / "attempt-2"
    assert p.checkpoint_root("train", "id-1", "") == str(tmp_path / "checkpoints" / "train" / "id-1")
    assert p.checkpoint_root("train", "id-1", "s3://b/ck/") == "s3://b/ck/train/id-1"
    # a task stored before identities were kept has none, and keeps the folders it started with
    assert p.logs("train", "", 2) == tmp_path / "logs" / "train" / "attempt-2"
    assert p.checkpoint_root("train", "", "s3://b/ck") == "s3://b/ck/train"
