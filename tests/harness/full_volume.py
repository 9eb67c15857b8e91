"""A checkpoint volume that fills: a small tmpfs mounted over a folder (root only), and a file that takes every
free page of it but a chosen few. Used by tests/ckpt/test_full_volume.py (the SDK alone) and
tests/e2e/test_realnode_faults.py (a real gang whose hostPath checkpoint folder fills up)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


class CannotMount(RuntimeError):
    """No tmpfs can be mounted here (not root, or no permission in this container)."""


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of `size` (anyone may write in it) mounted at `path`, unmounted on the way out whatever
    happened (lazily: a process still holding a file in it does not keep it mounted)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        raise CannotMount("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise CannotMount(f"cannot mount a tmpfs at {path}: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(volume: Path, leave_pages: int = 0) -> Path:
    """Fill `volume` with one file until no page is free, then give back `leave_pages` pages; the file (remove
    it to give the space back)."""
    filler = volume / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while os.write(fd, b"\0" * PAGE):
            pass
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    os.truncate(filler, max(filler.stat().st_size - leave_pages * PAGE, 0))
    return filler


def leftovers(root: Path) -> list[str]:
    """The unfinished saves' folders under `root` (``*.tmp-*``, ``*.del-*``)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp-" in p.name or ".del-" in p.name)
