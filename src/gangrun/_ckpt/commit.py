"""The commit protocol: a save is written somewhere readers ignore, and `finalize()` is the only commit.

Two implementations, chosen by the storage (`pending_for`):

- `RenamePending` (local filesystems): data and manifest go to ``ckpt-<seq>.tmp-<id>/``, every file
  and directory is fsynced, then one atomic rename gives the folder its final name. A process killed
  at any moment leaves either a ``.tmp-`` folder (ignored, removed later) or a complete checkpoint.
- `MarkerPending` (object stores, no atomic rename): data goes straight to ``ckpt-<seq>/`` and the
  manifest is written last in a single PUT; the manifest is the commit. A folder without one is a
  torn save.

Readers use `is_committed`: a final name *and* a manifest, whichever protocol wrote it, so a store
can switch protocols without confusing readers. Deleting reverses the order (`uncommit` removes the
commit first), so a half-deleted checkpoint is never mistaken for a complete one.
"""

from __future__ import annotations

import abc
import uuid

from gangrun._ckpt.layout import DATA, MANIFEST, join
from gangrun._ckpt.storage import Storage


class PendingCheckpoint(abc.ABC):
    """A save in progress. Write data under `data_dir`, then call `finalize(manifest)` once."""

    def __init__(self, storage: Storage, final: str) -> None:
        self.storage = storage
        self.final = final

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where the data is being written before the commit."""

    @property
    def data_dir(self) -> str:
        return join(self.location, DATA)

    def create(self) -> None:
        self.storage.makedirs(self.data_dir)

    @abc.abstractmethod
    def finalize(self, manifest: bytes) -> None:
        """Commit: after this returns, readers see a complete checkpoint at `final`."""

    def abort(self) -> None:
        """Remove what was written; the save never becomes visible."""
        self.storage.remove(self.location)

    @staticmethod
    def is_committed(storage: Storage, path: str) -> bool:
        return storage.exists(join(path, MANIFEST))


class RenamePending(PendingCheckpoint):
    def __init__(self, storage: Storage, final: str, *, tag: str | None = None) -> None:
        super().__init__(storage, final)
        self._tmp = f"{final}.{tag or 'tmp-' + uuid.uuid4().hex[:12]}"

    @property
    def location(self) -> str:
        return self._tmp

    def finalize(self, manifest: bytes) -> None:
        self.storage.write_bytes(join(self._tmp, MANIFEST), manifest, sync=False)  # sync_tree syncs it
        self.storage.sync_tree(self._tmp)
        self.storage.rename(self._tmp, self.final)
        self.storage.sync_tree_parent(self.final)


class MarkerPending(PendingCheckpoint):
    @property
    def location(self) -> str:
        return self.final

    def finalize(self, manifest: bytes) -> None:
        self.storage.sync_tree(self.final)  # data durable before the marker that vouches for it
        self.storage.write_bytes(join(self.final, MANIFEST), manifest)


def pending_for(storage: Storage, final: str, *, protocol: str | None = None) -> PendingCheckpoint:
    """The commit protocol the storage supports (`protocol` "rename"/"marker" overrides, for tests)."""
    if protocol is None:
        protocol = "rename" if storage.atomic_rename else "marker"
    if protocol == "rename":
        return RenamePending(storage, final)
    return MarkerPending(storage, final)


def shared_pending(storage: Storage, final: str, *, tag: str, protocol: str | None = None) -> PendingCheckpoint:
    """A pending checkpoint that several processes write together (a sharded save): the same
    location on every process that passes the same `final` and `tag`.

    Rename stores write under ``<final>.<tag>`` (a leftover name to the catalog until the rename),
    marker stores under `final` itself. Exactly one process calls `create()` first and `finalize()`
    last (shards.py); the others only write inside `data_dir`.
    """
    if protocol is None:
        protocol = "rename" if storage.atomic_rename else "marker"
    if protocol == "rename":
        return RenamePending(storage, final, tag=tag)
    return MarkerPending(storage, final)


def uncommit(storage: Storage, path: str) -> None:
    """Delete a checkpoint so that no intermediate state reads as committed: the commit goes first."""
    if storage.atomic_rename:
        trash = f"{path}.del-{uuid.uuid4().hex[:12]}"
        try:
            storage.rename(path, trash)
        except FileNotFoundError:
            return
        storage.remove(trash)
    else:
        storage.remove(join(path, MANIFEST))
        storage.remove(path)
