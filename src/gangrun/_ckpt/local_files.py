"""Local files as a checkpoint needs them: private to the user, copied in the kernel, checksummed
through a memory map, made durable many at once.

Everything created here is private: directories 0700, files 0600 (checkpoints hold model state; a
shared machine must not let other users read them). The umask may only narrow it. Copies run in the
kernel (`copy_file_range`, as `shutil.copytree`) and then checksum the copy through a memory map.
"""

from __future__ import annotations

import mmap
import os
import shutil

from gangrun._ckpt import pool
from gangrun._ckpt.manifest import CHECKSUM, Crc

# 1 MiB: the chunk stays in the CPU cache between the CRC and the write. 8 MiB measured half as
# fast here (each chunk is pulled from memory twice); 1-4 MiB are equal.
CHUNK = 1 << 20
# fsync mostly waits on the disk, so more of them than CPUs are in flight; the journal merges them.
SYNC_WORKERS = 16


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def open_private(path: str) -> int:
    """A new or truncated file that only its owner may read (checkpoints hold model state)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)


def makedirs_private(path: str) -> None:
    """`os.makedirs` with every directory it creates 0700 (its `mode` applies to the last one only)."""
    missing: list[str] = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, PRIVATE_DIR)
        except FileExistsError:
            if not os.path.isdir(d):
                raise


def kernel_copy(src: str, dst: str) -> None:
    """Copy the file `src` to a new private file `dst` inside the kernel (`copy_file_range`: page
    cache to page cache, or a block clone on filesystems with reflinks), as `shutil.copytree` does;
    a plain read/write loop where the kernel cannot (an old kernel, another filesystem)."""
    with open(src, "rb", buffering=0) as fin, open(open_private(dst), "wb", buffering=0) as fout:
        size = os.fstat(fin.fileno()).st_size
        try:
            while os.copy_file_range(fin.fileno(), fout.fileno(), max(size, 1 << 30)):
                pass  # until 0: end of file (reading to the end also catches a file that grew)
            return
        except OSError:  # e.g. EXDEV on old kernels, or a filesystem without it: plain copy
            fin.seek(0)
            fout.seek(0)
            fout.truncate()
        shutil.copyfileobj(fin, fout, CHUNK)


def file_checksum(path: str, checksum: str = CHECKSUM) -> Crc:
    """Size and checksum of a local file, read through a memory map: one pass over the page cache,
    without copying the bytes into the process first."""
    crc = Crc(checksum)
    with open(path, "rb", buffering=0) as f:
        if os.fstat(f.fileno()).st_size == 0:
            return crc
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m, memoryview(m) as view:
            crc.update(view)
    return crc


def copy_local(src: str, dst: str, checksum: str = CHECKSUM) -> Crc:
    """Copy the file `src` to a new private file `dst`; the checksum of the copy."""
    # The copy in the kernel, then the checksum of what landed in `dst`: two passes over the page
    # cache instead of read + checksum + write through a buffer in the process, which measured
    # 1.6x slower than copytree on a 1 GiB tree here. Taken from the copy, the checksum vouches for
    # the bytes of the checkpoint itself, whatever happens to `src` meanwhile.
    kernel_copy(src, dst)
    return file_checksum(dst, checksum)


def sync_tree(path: str) -> None:
    """Make every file and directory under `path` durable."""
    # Files first, then directories: new directory entries are durable only once their
    # directory is fsynced, and a rename must not become durable before the data it names.
    # Many fsyncs at once: the journal commits them together instead of one commit per file
    # (a save of 1,700 files spent most of its time here, one fsync after another).
    files: list[str] = []
    dirs: list[str] = []
    for dirpath, _dirs, names in os.walk(path):
        dirs.append(dirpath)
        files.extend(os.path.join(dirpath, n) for n in names)
    pool.run_all(fsync_path, files, SYNC_WORKERS)
    pool.run_all(fsync_path, dirs, SYNC_WORKERS)
