"""Sizes and checksums of files a rank wrote, read back through the checkpoint's storage.

A manifest lists every file with its size and CRC-32 (the same manifest `ctx.checkpoint` writes), so
a torch checkpoint can also be restored and verified file by file by `ctx.checkpoint.load()`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gangrun._ckpt.layout import join
from gangrun._ckpt.manifest import Crc, FileEntry
from gangrun._ckpt.storage import FsspecStorage, Storage

CHUNK = 1 << 20


def entry(storage: Storage, data_dir: str, rel: str) -> FileEntry:
    """The manifest entry of `data_dir/rel`: its size and CRC-32, from one read."""
    path = join(data_dir, rel)
    crc = Crc()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with _open(storage, path) as f:
        readinto: Callable[[memoryview], int | None] = f.readinto
        while True:
            n = readinto(view)
            if not n:
                break
            crc.update(view[:n])
    return FileEntry(rel, crc.size, crc.value)


def size(storage: Storage, path: str) -> int:
    """The size of a stored file; raises FileNotFoundError when it is missing."""
    if isinstance(storage, FsspecStorage):
        return int(storage.fs.size(path))
    return os.stat(path).st_size


def _open(storage: Storage, path: str) -> Any:
    if isinstance(storage, FsspecStorage):
        return storage.fs.open(path, "rb")
    return open(path, "rb", buffering=0)
