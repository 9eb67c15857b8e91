"""torch.distributed.checkpoint's file writer and reader, pointed at one folder of gangrun's layout.

DCP's own FileSystemWriter/FsspecWriter do the serialising, deduplication of replicated tensors and
per-rank files (``__<rank>_<n>.distcp``, plus ``.metadata`` from the coordinator). What gangrun
adds around them (_save.py) is where that folder is and the commit: DCP's ``.metadata`` rename
makes a folder readable, not a save atomic across attempts, retention and object stores.

The writer remembers which files this rank wrote, so the commit can list each one with its size
and checksum in gangrun's manifest.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.fsspec_filesystem import FsspecReader, FsspecWriter, _FileSystem
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import StorageReader, WriteResult
from torch.futures import Future

from gangrun._ckpt.storage import filesystem
from gangrun.torch._target import Target

METADATA = ".metadata"  # written by DCP's coordinator once every rank's writes succeeded


def _written(results: list[WriteResult]) -> tuple[str, ...]:
    return tuple(sorted({r.storage_data.relative_path for r in results}))


class LocalWriter(FileSystemWriter):
    """DCP's writer on a local path; `written` lists this rank's files once `write_data` is done."""

    written: tuple[str, ...] = ()

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        fut = super().write_data(plan, planner)
        self.written = _written(fut.wait())
        return fut


class _StoreFileSystem(_FileSystem):
    """DCP's fsspec file system, resolved as gangrun resolves its stores (`storage.filesystem`): s3fs
    for s3 even when another library (the Flyte SDK) registered its own implementation for s3."""

    def init_path(self, path: Any, **kwargs: Any) -> Any:
        self.fs, _ = filesystem(str(path), kwargs)
        return path


class StoreWriter(FsspecWriter):
    """DCP's writer on an fsspec store (``s3://`` ...); `written` as for LocalWriter."""

    written: tuple[str, ...] = ()

    def __init__(self, path: str, **kwargs: Any) -> None:
        options = {k: v for k, v in kwargs.items() if k not in _WRITER_OPTIONS}
        FileSystemWriter.__init__(self, path, **{k: v for k, v in kwargs.items() if k in _WRITER_OPTIONS})
        self.fs = _StoreFileSystem()  # type: ignore[assignment]  # DCP's own FsspecWriter/Reader do the same
        self.path = self.fs.init_path(path, **options)

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        fut = super().write_data(plan, planner)
        self.written = _written(fut.wait())
        return fut


def writer(target: Target, data_path: str) -> LocalWriter | StoreWriter:
    """A writer of `data_path` (a storage path under the target's root). Every rank fsyncs its own
    files: on a shared filesystem the coordinator's later fsync would not reach another node's cache."""
    if target.local:
        return LocalWriter(data_path, sync_files=True)
    return StoreWriter(target.uri_for_path(data_path), sync_files=True, **(target.storage_options or {}))


class StoreReader(FsspecReader):
    """DCP's reader on an fsspec store, resolved as the writer's."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        FileSystemReader.__init__(self, path)
        self.fs = _StoreFileSystem()  # type: ignore[assignment]  # DCP's own FsspecWriter/Reader do the same
        self.path = self.fs.init_path(path, **kwargs)


_WRITER_OPTIONS = ("single_file_per_rank", "sync_files", "thread_count", "per_thread_copy_ahead",
                   "cache_staged_state_dict", "overwrite", "_extensions", "serialization_format")


def reader(target: Target, data_path: str) -> StorageReader:
    if target.local:
        return FileSystemReader(data_path)
    return StoreReader(target.uri_for_path(data_path), **(target.storage_options or {}))

