"""Byte access to a checkpoint location, through fsspec.

`open_storage(uri)` resolves any fsspec URI. Local paths (plain or ``file://``) get `LocalStorage`,
which works on OS paths directly because a commit there needs what fsspec does not offer: fsync of
files and directories, and an atomic rename. Everything else (``s3://``, ``memory://``, ...) gets
`FsspecStorage`, which has no atomic rename, so its saves commit by writing the manifest last.

Everything `LocalStorage` creates is private to the user (local_files.py holds how local files are
made, copied, checksummed and made durable).

Every transfer returns the checksum and size of what it wrote. Local copies run in the kernel and
then checksum the copy (local_files.py); copies to and from other stores stream fixed-size chunks
through one reused buffer per thread and checksum them on the way. Callers run transfers of
different files on a few threads at once (`Storage.workers`, see pool.py).
"""

from __future__ import annotations

import importlib
import os
import shutil
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gangrun._ckpt import local_files, pool
from gangrun._ckpt.layout import join
from gangrun._ckpt.local_files import CHUNK, copy_local, file_checksum, makedirs_private, open_private
from gangrun._ckpt.manifest import CHECKSUM, Crc

if TYPE_CHECKING:
    import fsspec

_buffers = threading.local()


class Storage:
    """The operations a checkpoint needs. Paths are strings as the backing filesystem spells them."""

    #: True when `rename` is atomic, so a save can be committed by renaming its tmp folder.
    atomic_rename: bool = False
    #: True when files written here are on this machine (no download needed to read them).
    local: bool = False
    #: How many files to transfer at once. 1 for fsspec stores: their thread safety varies by
    #: implementation, and the targets that motivated parallel transfers are local disks.
    workers: int = 1

    def list_names(self, path: str) -> list[str]:
        """Names directly under `path`; [] when it does not exist."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def read_bytes(self, path: str) -> bytes:
        raise NotImplementedError

    def write_bytes(self, path: str, data: bytes | memoryview, *, sync: bool = True) -> Crc:
        """Write a whole object so that it appears complete or not at all; `sync=False` when a
        later `sync_tree` makes it durable (visibility is atomic either way)."""
        raise NotImplementedError

    def put_bytes(self, path: str, data: bytes | memoryview) -> Crc:
        """Write bytes as a new file of a save in progress (made durable later by `sync_tree`)."""
        return self.write_bytes(path, data, sync=False)

    def put_file(self, src: str, dst: str, *, move: bool = False) -> Crc:
        """Copy a local file here (`move`: the source is ours to consume)."""
        raise NotImplementedError

    def get_file(self, src: str, dst: str, *, checksum: str = CHECKSUM) -> Crc:
        """Copy a stored file to the local path `dst`, computing `checksum` on the way."""
        raise NotImplementedError

    def makedirs(self, path: str) -> None:
        pass

    def sizes(self, path: str) -> dict[str, int]:
        """Size of every file under `path`, by '/'-separated path relative to it ({} when absent)."""
        raise NotImplementedError

    def remove(self, path: str) -> None:
        """Remove a file or a tree; missing is fine."""
        raise NotImplementedError

    def rename(self, src: str, dst: str) -> None:
        raise NotImplementedError

    def move_tree(self, src: str, dst: str) -> None:
        """Move the tree `src` to `dst`, whose parent exists and which does not."""
        raise NotImplementedError

    def sync_tree(self, path: str) -> None:
        """Make what was written under `path` durable (no-op where writes are durable on close)."""

    def sync_tree_parent(self, path: str) -> None:
        """Make the entry of `path` in its parent durable (after a rename)."""


def _buffer() -> memoryview:
    # One buffer per thread, kept: a save of many small files would otherwise allocate per file.
    view = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(CHUNK))
    return view


def _copy_stream(read: Callable[[memoryview], int | None], write: Callable[[memoryview], object],
                 checksum: str = CHECKSUM) -> Crc:
    """Copy `read` (a readinto) to `write` through this thread's buffer; the checksum of what went through."""
    crc = Crc(checksum)
    view = _buffer()
    while True:
        n = read(view)
        if not n:
            return crc
        crc.update(view[:n])
        write(view[:n])


def _write_all(f: Any) -> Callable[[memoryview], None]:
    # A raw file may write less than asked; the buffered file used before looped for us.
    def write(view: memoryview) -> None:
        while view:
            view = view[f.write(view) :]

    return write


class LocalStorage(Storage):
    atomic_rename = True
    local = True
    workers = pool.WORKERS

    def list_names(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_bytes(self, path: str, data: bytes | memoryview, *, sync: bool = True) -> Crc:
        # tmp + fsync + replace: a reader sees the old file or the whole new one, even after SIGKILL.
        crc = Crc()
        crc.update(data)
        tmp = f"{path}.part"
        with open(open_private(tmp), "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        return crc

    def put_bytes(self, path: str, data: bytes | memoryview) -> Crc:
        # Inside a pending folder nobody reads yet: no tmp and rename, and the fsync is left to
        # sync_tree(), which makes all of a save's files durable at once.
        crc = Crc()
        crc.update(data)
        fd = open_private(path)
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view[: 1 << 30]) :]
        finally:
            os.close(fd)
        return crc

    def put_file(self, src: str, dst: str, *, move: bool = False) -> Crc:
        if move:
            # The source is a snapshot we staged on this filesystem: move it, then checksum it.
            os.rename(src, dst)
            return file_checksum(dst)
        # No fsync here: sync_tree() fsyncs every file once all are written, so the kernel writes
        # back early files while later ones are copied instead of stalling after each.
        return copy_local(src, dst)

    def get_file(self, src: str, dst: str, *, checksum: str = CHECKSUM) -> Crc:
        return copy_local(src, dst, checksum)

    def makedirs(self, path: str) -> None:
        makedirs_private(path)

    def sizes(self, path: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for dirpath, _dirs, names in os.walk(path):
            rel = os.path.relpath(dirpath, path)
            for n in names:
                out[n if rel == "." else f"{rel.replace(os.sep, '/')}/{n}"] = os.lstat(os.path.join(dirpath, n)).st_size
        return out

    def remove(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def move_tree(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def sync_tree(self, path: str) -> None:
        local_files.sync_tree(path)

    def sync_tree_parent(self, path: str) -> None:
        local_files.fsync_path(os.path.dirname(path.rstrip("/")) or ".")


class FsspecStorage(Storage):
    def __init__(self, fs: fsspec.AbstractFileSystem) -> None:
        self.fs = fs

    def _fresh(self, path: str) -> None:
        # s3fs caches listings; a stale cache would hide a commit made by another process.
        self.fs.invalidate_cache(path)

    def list_names(self, path: str) -> list[str]:
        self._fresh(path)
        try:
            paths = self.fs.ls(path, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        base = path.rstrip("/")
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in paths if p.rstrip("/") != base]

    def exists(self, path: str) -> bool:
        self._fresh(path)
        return bool(self.fs.exists(path))

    def read_bytes(self, path: str) -> bytes:
        return bytes(self.fs.cat_file(path))

    def write_bytes(self, path: str, data: bytes | memoryview, *, sync: bool = True) -> Crc:
        # One PUT: object stores make it visible whole or not at all (the manifest-marker commit).
        crc = Crc()
        crc.update(data)
        self.fs.pipe_file(path, bytes(data))
        return crc

    def put_file(self, src: str, dst: str, *, move: bool = False) -> Crc:
        with open(src, "rb") as fin, self.fs.open(dst, "wb") as fout:
            crc = _copy_stream(fin.readinto, fout.write)
        if move:
            os.unlink(src)
        return crc

    def get_file(self, src: str, dst: str, *, checksum: str = CHECKSUM) -> Crc:
        with self.fs.open(src, "rb") as fin, open(open_private(dst), "wb") as fout:
            return _copy_stream(lambda b: fin.readinto(b), fout.write, checksum)

    def sizes(self, path: str) -> dict[str, int]:
        self._fresh(path)
        base = path.rstrip("/")
        try:
            found = self.fs.find(base, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {
            k.rstrip("/")[len(base) + 1 :]: int(v.get("size") or 0)
            for k, v in found.items()
            if k.rstrip("/").startswith(base + "/") and v.get("type") != "directory"
        }

    def remove(self, path: str) -> None:
        try:
            self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        self._fresh(path)

    def move_tree(self, src: str, dst: str) -> None:
        # No rename on object stores: a copy of every object (server-side where the store can),
        # then the originals are removed.
        for rel in self.sizes(src):  # one by one: fsspec's recursive copy names targets by its own rules
            self.fs.copy(join(src, rel), join(dst, rel))
        self.remove(src)


def local_path(uri: str) -> str | None:
    """The path of an absolute local `uri` (``/p`` or ``file:///p``), spelled as fsspec's local filesystem
    spells it; None for anything else (relative, ``~``, chained, another protocol): fsspec says."""
    path = uri.removeprefix("file://")
    if not path.startswith("/") or "::" in path:
        return None
    return path.rstrip("/") or "/"


def open_storage(uri: str, storage_options: dict[str, Any] | None = None) -> tuple[Storage, str]:
    """The storage for `uri` and `uri` as that storage spells paths (no scheme for local paths).
    An absolute local path needs no fsspec (a worker whose checkpoints are on a mounted volume never
    imports it: most of what `import gangrun` used to cost)."""
    path = local_path(uri)
    if path is not None and not storage_options:
        return LocalStorage(), path
    from fsspec.implementations.local import LocalFileSystem

    fs, path = filesystem(uri, storage_options)
    if isinstance(fs, LocalFileSystem):
        return LocalStorage(), path
    return FsspecStorage(fs), path


def filesystem(uri: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of `uri`, and its path there. A protocol fsspec knows (s3, gs, ...) gets
    fsspec's own implementation of it (s3fs for s3), even when another library registered a different
    one in its place: the Flyte SDK does, for s3 with obstore, whose options differ, and a worker that
    imports it would otherwise fail to save."""
    import fsspec
    from fsspec.registry import known_implementations

    protocol = fsspec.core.split_protocol(uri)[0]
    known = known_implementations.get(protocol or "")
    if known is None:
        fs, path = fsspec.core.url_to_fs(uri, **(storage_options or {}))
        return fs, path
    module, _, name = known["class"].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError:
        raise ImportError(f"{known.get('err') or f'install {module} to use {protocol}://'} ({uri})") from None
    return cls(**{**cls._get_kwargs_from_urls(uri), **(storage_options or {})}), cls._strip_protocol(uri)


def remove_checkpoints(uri: str, storage_options: dict[str, Any] | None = None) -> None:
    """Remove a task's checkpoint root and everything under it (`delete --purge`); missing is fine."""
    storage, path = open_storage(uri, storage_options)
    storage.remove(path)
