"""How a save becomes a checkpoint: the one commit path of every save, and the protocol under it.

`commit()` is the path every save takes, plain, sharded (rank 0) and torch alike, so that its order
is written once: the data, then the manifest last (`finalize()`, the only commit), then the log line
and the ``checkpoint_committed`` event; a save that fails before its commit is removed (`abandon`)
and never reported. Retention follows the commit, in the background, by whoever committed
(`catalog.retain`, run by `writer.BackgroundWriter.run`).

The protocol: a save is written somewhere readers ignore, and `finalize()` is the only commit.
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
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from gangrun._ckpt import events, notice
from gangrun._ckpt.layout import DATA, MANIFEST, join
from gangrun._ckpt.manifest import FileEntry, Manifest, Part, SaveKind
from gangrun._ckpt.storage import Storage

log = logging.getLogger("gangrun")


@dataclass(frozen=True)
class Taken:
    """When a save's state was taken (save() was called), and whether the gang was stopping then."""

    at: float
    final: bool

    @classmethod
    def now(cls) -> Taken:
        return cls(at=time.time(), final=notice.stopping())


@dataclass(frozen=True)
class Save:
    """One save on its way to be checkpoint `seq`: what its manifest and its commit event say of it."""

    task: str | None
    attempt: int
    rank: int  # who commits it (rank 0 of a sharded or torch save)
    seq: int
    step: int | None
    uri: str
    taken: Taken
    events_file: str | None
    what: str = "checkpoint"  # how the log line names it
    ranks: int | None = None  # how many ranks wrote it, when the log line says so


@dataclass(frozen=True)
class Content:
    """What a save's data holds, as its manifest lists it."""

    kind: SaveKind
    name: str = ""  # the file name of a bytes or file save
    files: tuple[FileEntry, ...] = ()
    dirs: tuple[str, ...] = ()
    world_size: int | None = None  # a sharded save: one part per rank
    parts: tuple[Part, ...] = ()


def commit(
    pending: PendingCheckpoint,
    save: Save,
    write: Callable[[], Content],
    *,
    abandon: Callable[[BaseException], BaseException | None] | None = None,
    after: Callable[[], None] | None = None,
) -> None:
    """Make `save` a checkpoint at `pending.final`, in this order:

    1. `write()` writes the data under `pending` (and waits for what other ranks write) and says
       what it holds;
    2. the manifest, written last: `pending.finalize()`, the commit (rename or marker);
    3. `after()`, what the commit leaves to tidy (a sharded save's rendezvous);
    4. the log line, then the timeline's ``checkpoint_committed`` event: never before the commit.

    A failure in 1 or 2 calls `abandon(error)` (default: remove the pending save, quietly) and raises
    the error, or the one `abandon` returns in its place (the line every rank of a sharded save raises).
    """
    try:
        content = write()
        manifest = Manifest(
            kind=content.kind, name=content.name, seq=save.seq, attempt=save.attempt, task=save.task,
            rank=save.rank, step=save.step, created=time.time(), files=content.files, dirs=content.dirs,
            world_size=content.world_size, parts=content.parts,
        )  # fmt: skip
        pending.finalize(manifest.to_bytes())
    except BaseException as e:
        instead = abandon(e) if abandon is not None else _abort(pending, e)
        if instead is not None and instead is not e and isinstance(e, Exception):
            raise instead from e
        raise
    if after is not None:
        after()
    ranks = f", {save.ranks} ranks" if save.ranks is not None else ""
    log.info("gangrun: committed %s seq %d (step %s%s): %s", save.what, save.seq, save.step, ranks, save.uri)
    events.checkpoint_committed(
        save.events_file, task=save.task, attempt=save.attempt, rank=save.rank, seq=save.seq, step=save.step,
        uri=save.uri, taken_at=save.taken.at, final=save.taken.final,
    )  # fmt: skip


def _abort(pending: PendingCheckpoint, error: BaseException) -> BaseException:
    """The default abandon: remove what was written, quietly; `error` stays the one raised."""
    try:
        pending.abort()
    except Exception:  # the save already failed; a leftover is removed by a later retention pass
        log.debug("gangrun: could not remove the failed save's pending folder %s", pending.location, exc_info=True)
    return error


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
