"""Issue 13.8: what gangrun creates on a local filesystem is private: directories 0700, files 0600.

A checkpoint holds model state; on a shared machine other users must not read it, whatever the
umask (which may only narrow the modes further).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangrun import Checkpoint


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)  # the common default, which would make everything world-readable
    yield
    os.umask(old)


def _modes(top: Path) -> dict[str, int]:
    out = {str(top): stat.S_IMODE(top.stat().st_mode)}
    for dirpath, dirs, files in os.walk(top):
        for n in dirs + files:
            p = Path(dirpath) / n
            out[str(p)] = stat.S_IMODE(p.lstat().st_mode)
    return out


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
def test_13_8_checkpoint_folders_are_0700_and_files_0600(tmp_path: Path, open_umask: None, blocking: bool) -> None:
    src = tmp_path / "state"
    (src / "sub" / "empty").mkdir(parents=True)
    (src / "sub" / "w.bin").write_bytes(b"w" * 1000)
    (src / "top.txt").write_text("t")
    os.chmod(src / "top.txt", 0o644)
    root = tmp_path / "new" / "ck" / "train"  # none of it exists yet: gangrun creates it all
    ckpt = Checkpoint.for_path(str(root), attempt=1, keep_last=None, cache_dir=tmp_path / "cache")
    ckpt.save(src, step=1, blocking=blocking)
    ckpt.save(b"bytes", step=2, blocking=blocking)
    ckpt.save(src / "top.txt", step=3, blocking=blocking)
    ckpt.wait()
    modes = _modes(tmp_path / "new")
    loose = {p: oct(m) for p, m in modes.items() if m != (0o700 if Path(p).is_dir() else 0o600)}
    assert not loose, loose
    assert len(modes) > 15
