"""Checkpoints that survive attempts: load the newest complete state, save atomically, in the background.

    ckpt = gangrun.context().checkpoint       # or Checkpoint.for_path("s3://bucket/runs/train", attempt=2)
    path = ckpt.load()                        # this attempt's newest save, else the newest of earlier attempts
    ckpt.save(b"...", step=120)               # bytes, a file or a directory; visible only once complete
    ckpt.save("state/", step=140, blocking=False)   # snapshot now, upload in the background
    ckpt.wait()                               # flush; a background failure is raised here, once

Load order (DESIGN.md S10, B1): this attempt's saves newest first, then each earlier attempt's, newest
first. A save that cannot be read (missing data, size or checksum mismatch, bad manifest) is skipped
with a log line and the next one is tried. `JOBSET_RESTART_ATTEMPT` plays no part: a readmission or a
JobSet restart re-runs the same attempt, whose own saves are the newest state.

Who writes: in a gang, only rank 0 writes (the common data-parallel pattern: rank 0 saves the
replicated state, every rank loads it). `save()` on another rank writes nothing, returns None and says
so once in the log. Pass ``writer=True`` to a `Checkpoint` of your own to write from elsewhere; two
writers must not share one attempt folder.

Layout and commit protocol: see `gangrun._ckpt.layout` and `gangrun._ckpt.commit`, and
docs/checkpoints.md.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gangrun._ckpt import catalog, events, transfer
from gangrun._ckpt import writer as writer_mod
from gangrun._ckpt.commit import pending_for
from gangrun._ckpt.logs import say
from gangrun._ckpt.layout import attempt_name, entry_name, join, split_attempt_path
from gangrun._ckpt.manifest import Manifest
from gangrun._ckpt.storage import open_storage
from gangrun._errors import CheckpointError, CommitFailed, UsageError

__all__ = ["Checkpoint", "SaveInfo"]

log = logging.getLogger("gangrun")
LoadedFrom = Literal["own", "previous"]


@dataclass(frozen=True)
class SaveInfo:
    """A save: committed at `uri` when save() returns (blocking), or once the writer is done."""

    seq: int
    attempt: int
    step: int | None
    uri: str


class Checkpoint:
    """The checkpoints of one task, seen from one attempt: `<root>/attempt-<attempt>/ckpt-<seq>/`."""

    def __init__(
        self,
        root: str,
        *,
        attempt: int = 1,
        task: str | None = None,
        rank: int = 0,
        writer: bool | None = None,
        keep_last: int | None = 3,
        cache_dir: str | os.PathLike[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        events_file: str | None = None,
        protocol: Literal["rename", "marker"] | None = None,
    ) -> None:
        if attempt < 1:
            raise UsageError(f"attempt must be >= 1, got {attempt}")
        if keep_last is not None and keep_last < 1:
            raise UsageError(f"keep_last must be >= 1 or None (keep all), got {keep_last}")
        self.root = root.rstrip("/")
        self.attempt = attempt
        self.task = task
        self.rank = rank
        self.writer = (rank == 0) if writer is None else writer
        self.keep_last = keep_last
        self._storage, self._root_path = open_storage(self.root, storage_options)
        self._attempt_path = join(self._root_path, attempt_name(attempt))
        self._events_file = events_file
        self._protocol = protocol
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._bg = writer_mod.BackgroundWriter(self.uri)
        self._lock = threading.Lock()
        self._last_seq = 0
        self._said_not_writer = False
        self._loaded: Path | None = None
        self._load_done = False
        self.loaded_from: LoadedFrom | None = None
        self.loaded_uri: str | None = None
        self.loaded_step: int | None = None
        self.loaded_attempt: int | None = None
        self.loaded_seq: int | None = None

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

    @property
    def uri(self) -> str:
        """This attempt's folder."""
        return join(self.root, attempt_name(self.attempt))

    def __repr__(self) -> str:
        return f"Checkpoint({self.uri!r}, rank={self.rank}, writer={self.writer})"

    # ---------------------------------------------------------------- load

    def load(self) -> Path | None:
        """Restore the newest complete checkpoint; returns a file (bytes/file saves), a directory
        (directory saves) or None when there is none. The first call decides; later calls return
        the same path."""
        if self._load_done:
            return self._loaded
        for cand in catalog.candidates(self._storage, self._root_path, attempt=self.attempt):
            uri = self._uri_of(cand.attempt, cand.seq)
            try:
                manifest = transfer.read_manifest(self._storage, cand.path)
                if manifest is None:
                    log.debug("gangrun: %s has no manifest: an unfinished save, not a checkpoint", uri)
                    continue
                path = transfer.read_checkpoint(self._storage, cand.path, manifest, self._cache())
            except (CheckpointError, OSError, ValueError) as e:
                say(f"gangrun: skipping checkpoint {uri}: {e}; trying the next one", logging.WARNING)
                continue
            own = cand.attempt == self.attempt
            self.loaded_from = "own" if own else "previous"
            self.loaded_uri, self.loaded_step = uri, manifest.step
            self.loaded_attempt, self.loaded_seq = cand.attempt, cand.seq
            self._loaded, self._load_done = path, True
            where = "this attempt" if own else f"previous attempt {cand.attempt}"
            say(f"gangrun: loaded checkpoint from {where} (seq {cand.seq}, step {manifest.step}): {uri}")
            return path
        self._load_done = True
        say(f"gangrun: no checkpoint found (looked in attempts {self.attempt} to 1 under {self.root})")
        return None

    async def aload(self) -> Path | None:
        """`load()` without blocking the event loop."""
        return await asyncio.to_thread(self.load)

    # ---------------------------------------------------------------- save

    def save(
        self, data: bytes | str | os.PathLike[str], *, step: int | None = None, blocking: bool = True, snapshot: bool = True
    ) -> SaveInfo | None:
        """Save bytes, a file or a directory as the next checkpoint of this attempt.

        blocking=True returns once committed (raises CommitFailed if not). blocking=False returns
        once the data is snapshotted and commits in the background (see `wait()`); with
        snapshot=False nothing is copied first, and the caller promises not to change `data` until
        `wait()` or the next save returns. Returns None, writing nothing, on a rank that does not
        write (see the module docstring).
        """
        if not self.writer:
            if not self._said_not_writer:
                self._said_not_writer = True
                say(f"gangrun: rank {self.rank} does not write checkpoints (rank 0 saves the replicated state)")
            return None
        if step is not None and not isinstance(step, int):
            raise TypeError(f"step must be an int or None, not {type(step).__name__}")
        src = transfer.source_of(data)
        with self._lock:
            self._bg.wait()  # one save in flight at a time; raises a previous failure once
            seq = max(catalog.next_seq(self._storage, self._attempt_path), self._last_seq + 1)
            self._last_seq = seq
            info = SaveInfo(seq, self.attempt, step, self._uri_of(self.attempt, seq))
            if blocking:
                writer_mod.ACTIVE.enter()
                try:
                    self._commit(src, seq, step)
                except CheckpointError:
                    raise
                except Exception as e:
                    raise CommitFailed(f"checkpoint save to {info.uri} failed: {e}") from e
                finally:
                    writer_mod.ACTIVE.exit()
            else:
                staged = transfer.snapshot(src, self._staging(seq)) if snapshot else src
                self._bg.submit(lambda: self._commit(staged, seq, step))
        return info

    async def asave(
        self, data: bytes | str | os.PathLike[str], *, step: int | None = None, blocking: bool = True, snapshot: bool = True
    ) -> SaveInfo | None:
        """`save()` without blocking the event loop."""
        return await asyncio.to_thread(self.save, data, step=step, blocking=blocking, snapshot=snapshot)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background save; False on timeout. Raises CommitFailed once if it failed."""
        return self._bg.wait(timeout)

    def _commit(self, src: transfer.Source, seq: int, step: int | None) -> None:
        pending = pending_for(self._storage, join(self._attempt_path, entry_name(seq)), protocol=self._protocol)
        try:
            pending.create()
            files, dirs = transfer.write_source(self._storage, pending.data_dir, src)
            manifest = Manifest(
                kind=src.kind, name=src.name, seq=seq, attempt=self.attempt, task=self.task, rank=self.rank,
                step=step, created=time.time(), files=tuple(files), dirs=tuple(dirs),
            )  # fmt: skip
            pending.finalize(manifest.to_bytes())
        except BaseException:
            try:
                pending.abort()
            except Exception:  # the save already failed; a leftover is removed by a later retention pass
                pass
            raise
        finally:
            src.discard()
        uri = self._uri_of(self.attempt, seq)
        log.info("gangrun: committed checkpoint seq %d (step %s): %s", seq, step, uri)
        events.checkpoint_committed(
            self._events_file, task=self.task, attempt=self.attempt, rank=self.rank, seq=seq, step=step, uri=uri
        )
        try:
            catalog.apply_retention(
                self._storage, self._root_path, attempt=self.attempt, committed_seq=seq, keep_last=self.keep_last
            )
        except Exception as e:  # the commit stands; old saves are retried at the next commit
            log.warning("gangrun: could not remove old checkpoints under %s: %r", self.root, e)

    # ---------------------------------------------------------------- places

    def _uri_of(self, attempt: int, seq: int) -> str:
        return join(self.root, attempt_name(attempt), entry_name(seq))

    def _cache(self) -> Path:
        if self._cache_dir is None:
            # Restored copies live until the interpreter exits (a Path handed out must stay valid
            # after this object is gone); pass cache_dir= to keep them longer.
            self._cache_dir = Path(tempfile.mkdtemp(prefix="ckpt-", dir=_process_cache()))
        self._cache_dir.mkdir(parents=True, exist_ok=True)
        return self._cache_dir

    def _staging(self, seq: int) -> str:
        tag = f"{entry_name(seq)}.stage-{uuid.uuid4().hex[:8]}"
        if self._storage.local:
            # Same filesystem as the checkpoint, so the writer moves files instead of copying again;
            # its name marks it as a leftover that retention removes if this process dies.
            self._storage.makedirs(self._attempt_path)
            return join(self._attempt_path, tag)
        return str(self._cache() / tag)



@functools.cache
def _process_cache() -> str:
    path = tempfile.mkdtemp(prefix="gangrun-cache-")
    atexit.register(shutil.rmtree, path, True)
    return path
