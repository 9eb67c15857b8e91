"""B1 on a full volume: a save that runs out of space (ENOSPC) fails with an error naming the folder, leaves
nothing of itself behind, and never becomes what `load()` returns; once space is back the next save commits.

The volume is a real filesystem that fills: a tmpfs of 1 MiB mounted over a folder of the test (root needed;
without it these tests skip), filled by a file of the test's to leave a chosen number of pages free
(tests.harness.full_volume).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangrun import Checkpoint
from gangrun._errors import CommitFailed
from tests.harness.full_volume import PAGE, CannotMount, fill, leftovers, small_tmpfs


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    with contextlib.ExitStack() as stack:
        try:
            v = stack.enter_context(small_tmpfs(tmp_path / "vol"))
        except CannotMount as e:
            pytest.skip(str(e))
        yield v


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
@pytest.mark.parametrize(("leave", "size"), [(0, 3 * PAGE), (1, PAGE)],
                         ids=["no-room-for-the-data", "room-for-the-data-not-the-manifest"])
def test_b1_a_save_on_a_full_volume_fails_naming_the_folder_removes_its_files_and_is_never_loaded(
        volume: Path, tmp_path: Path, blocking: bool, leave: int, size: int) -> None:
    root = volume / "run"
    ckpt = Checkpoint.for_path(str(root), attempt=1, cache_dir=tmp_path / "cache")
    ckpt.save(b"a" * 100, step=1)
    ckpt.wait()
    filler = fill(volume, leave)
    with pytest.raises(CommitFailed) as failed:
        ckpt.save(b"b" * size, step=2, blocking=blocking)
        ckpt.wait()
    message = str(failed.value)
    assert str(root / "attempt-1") in message and "No space left on device" in message, message
    assert leftovers(root) == [], "the failed save left its temporary files"
    assert [p.name for p in (root / "attempt-1").iterdir()] == ["ckpt-000001"]
    loaded = ckpt.load()
    assert loaded is not None and loaded.read_bytes() == b"a" * 100 and ckpt.loaded_step == 1

    filler.unlink()  # space is back: the next save commits, after the one that failed
    ckpt.save(b"c" * size, step=3, blocking=blocking)
    ckpt.wait()
    fresh = Checkpoint.for_path(str(root), attempt=2, cache_dir=tmp_path / "cache2")
    again = fresh.load()
    assert again is not None and again.read_bytes() == b"c" * size and fresh.loaded_step == 3
    assert leftovers(root) == []


def test_b1_a_directory_save_that_fills_the_volume_half_way_leaves_no_file_of_it(
        volume: Path, tmp_path: Path) -> None:
    """A tree whose first files fit and whose later ones do not: every file it wrote is removed."""
    root = volume / "run"
    ckpt = Checkpoint.for_path(str(root), attempt=1, cache_dir=tmp_path / "cache")
    src = tmp_path / "state"
    src.mkdir()
    for i in range(8):
        (src / f"part-{i}.bin").write_bytes(bytes([i]) * (64 << 10))
    fill(volume, 4)  # room for four of the eight files
    free_before = os.statvfs(volume).f_bfree
    with pytest.raises(CommitFailed, match="No space left on device"):
        ckpt.save(src, step=1)
    assert leftovers(root) == [] and not list((root / "attempt-1").iterdir())
    assert os.statvfs(volume).f_bfree == free_before, "the failed save's files still take space"
    assert ckpt.load() is None
