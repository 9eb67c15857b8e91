"""Checkpoints that survive attempts: load the newest complete state, save atomically, in the background.

    ckpt = gangrun.context().checkpoint       # or Checkpoint.for_path("s3://bucket/runs/train", attempt=2)
    path = ckpt.load()                        # this attempt's newest save, else the newest of earlier attempts
    ckpt.save(b"...", step=120)               # bytes, a file or a directory; visible only once complete
    ckpt.save("state/", step=140, blocking=False)   # snapshot now, upload in the background
    ckpt.wait()                               # flush; a background failure is raised here, once

Load order, and one resume point for every rank of a gang start: see `gangrun.checkpoint._loading`.

Who writes: in a gang, only rank 0 writes (the common data-parallel pattern: rank 0 saves the
replicated state, every rank loads it). `save()` on another rank writes nothing, returns None and says
so once in the log. Pass ``writer=True`` to a `Checkpoint` of your own to write from elsewhere; two
writers must not share one attempt folder.

Sharded state: ``save(part, step=n, shard=True)`` on every rank; the checkpoint commits once all
`world_size` parts are in (`gangrun._ckpt.shards`). `load()` then returns this rank's part, and
`loaded_world_size` / `shard_path(rank)` serve a script whose world size changed.

Layout and commit protocol: see `gangrun._ckpt.layout` and `gangrun._ckpt.commit`, and
docs/checkpoints.md. The class is in three parts: where it is (`_places`), loading (`_loading`) and
saving (`_saving`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Literal

from gangrun._ckpt import writer as writer_mod
from gangrun._ckpt.layout import attempt_name, join, split_attempt_path
from gangrun._ckpt.manifest import Manifest
from gangrun._ckpt.storage import open_storage
from gangrun._errors import UsageError
from gangrun.checkpoint._loading import LoadedFrom, Loading
from gangrun.checkpoint._saving import SaveInfo, Saving

__all__ = ["Checkpoint", "SaveInfo"]


class Checkpoint(Loading, Saving):
    """The checkpoints of one task, seen from one attempt: `<root>/attempt-<attempt>/ckpt-<seq>/`."""

    def __init__(
        self,
        root: str,
        *,
        attempt: int = 1,
        task: str | None = None,
        rank: int = 0,
        world_size: int | None = None,
        restart_attempt: int = 0,
        writer: bool | None = None,
        keep_last: int | None = 3,
        cache_dir: str | os.PathLike[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        events_file: str | None = None,
        protocol: Literal["rename", "marker"] | None = None,
        shard_timeout: float = 300.0,
        resume_from: str | None = None,
        start: str | None = None,
    ) -> None:
        if attempt < 1:
            raise UsageError(f"attempt must be >= 1, got {attempt}")
        if rank < 0:
            raise UsageError(f"rank must be >= 0, got {rank}")
        if world_size is not None and rank >= world_size:
            raise UsageError(f"rank must be in 0..{world_size - 1} (world_size {world_size}), got {rank}")
        if restart_attempt < 0:
            raise UsageError(f"restart_attempt must be >= 0, got {restart_attempt}")
        if not shard_timeout > 0:
            raise UsageError(f"shard_timeout must be > 0 seconds, got {shard_timeout}")
        if keep_last is not None and keep_last < 1:
            raise UsageError(f"keep_last must be >= 1 or None (keep all), got {keep_last}")
        self.root = root.rstrip("/")
        self.attempt = attempt
        self.task = task
        self.rank = rank
        self.world_size = world_size
        self.restart_attempt = restart_attempt
        self.shard_timeout = shard_timeout
        self.writer = (rank == 0) if writer is None else writer
        self.keep_last = keep_last
        self._storage, self._root_path = open_storage(self.root, storage_options)
        #: Where this task was asked to start from when it has no checkpoint of its own (a URI), or None.
        self.resume_from = resume_from.rstrip("/") if resume_from else None
        #: This start of the gang (GANGRUN_START): its ranks load the checkpoint rank 0 chose for it.
        self.start = start or None
        self._keep: str | None = None  # the checkpoint this start resumed from: kept by retention
        self._stale: list[str] = []  # earlier starts' choices, removed at the first commit
        self._storage_options = storage_options
        self._loaded_storage = self._storage
        self._attempt_path = join(self._root_path, attempt_name(attempt))
        self._events_file = events_file
        self._protocol = protocol
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._bg = writer_mod.BackgroundWriter(self.uri)
        self._lock = threading.Lock()
        self._last_seq = 0
        self._said_not_writer = False
        self._last_shard_step: int | None = None
        self._loaded: Path | None = None
        self._load_done = False
        self._loaded_manifest: Manifest | None = None
        self._loaded_path: str | None = None
        self._shard_paths: dict[int, Path] = {}
        # Outside a gang, where this checkpoint is (gangrun._worker.context): said at the first load or save.
        self._where: str | None = None
        self.loaded_from: LoadedFrom | None = None
        self.loaded_uri: str | None = None
        self.loaded_step: int | None = None
        self.loaded_attempt: int | None = None
        self.loaded_seq: int | None = None
        #: The world size a sharded checkpoint was written with (None: not loaded, or not sharded).
        self.loaded_world_size: int | None = None

    @classmethod
    def for_path(cls, uri: str, *, attempt: int = 1, **kwargs: Any) -> Checkpoint:
        """A checkpoint rooted at `uri` (the task's root, holding ``attempt-<N>`` folders)."""
        return cls(uri, attempt=attempt, **kwargs)

    @classmethod
    def for_attempt_path(cls, path: str, **kwargs: Any) -> Checkpoint:
        """From an attempt folder such as ``GANGRUN_CHECKPOINT_PATH`` (``<root>/attempt-<N>``)."""
        split = split_attempt_path(path)
        if split is None:
            raise UsageError(f"checkpoint path {path!r} does not end in attempt-<N>")
        return cls(split[0], attempt=split[1], **kwargs)

    def __repr__(self) -> str:
        return f"Checkpoint({self.uri!r}, rank={self.rank}, writer={self.writer})"
