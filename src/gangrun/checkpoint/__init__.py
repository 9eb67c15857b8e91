"""Checkpoints that survive attempts: load the newest complete state, save atomically, in the background.

    ckpt = gangrun.context().checkpoint       # or Checkpoint.for_path("s3://bucket/runs/train", attempt=2)
    path = ckpt.load()                        # this attempt's newest save, else the newest of earlier attempts
    ckpt.save(b"...", step=120)               # bytes, a file or a directory; visible only once complete
    ckpt.save("state/", step=140, blocking=False)   # snapshot now, upload in the background
    ckpt.wait()                               # flush; a background failure is raised here, once

Load order: this attempt's saves newest first, then each earlier attempt's, newest first, then
(``resume_from``, the manifest's ``spec.checkpoint.resumeFrom``) the saves at the URI the task was
asked to start from, newest first: another task's checkpoints are loaded only that way. A save that
cannot be read (missing data, size or checksum mismatch, bad manifest) is skipped with a log line and
the next one is tried. `JOBSET_RESTART_ATTEMPT` plays no part: a readmission or a JobSet restart
re-runs the same attempt, whose own saves are the newest state.

Who writes: in a gang, only rank 0 writes (the common data-parallel pattern: rank 0 saves the
replicated state, every rank loads it). `save()` on another rank writes nothing, returns None and says
so once in the log. Pass ``writer=True`` to a `Checkpoint` of your own to write from elsewhere; two
writers must not share one attempt folder.

Sharded state: ``save(part, step=n, shard=True)`` on every rank; the checkpoint commits once all
`world_size` parts are in (`gangrun._ckpt.shards`). `load()` then returns this rank's part, and
`loaded_world_size` / `shard_path(rank)` serve a script whose world size changed.

Layout and commit protocol: see `gangrun._ckpt.layout` and `gangrun._ckpt.commit`, and
docs/checkpoints.md.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gangrun._ckpt import cache, catalog, events, notice, resume, shards, transfer
from gangrun._ckpt import writer as writer_mod
from gangrun._ckpt.catalog import Candidate
from gangrun._ckpt.commit import pending_for, uncommit
from gangrun._ckpt.layout import attempt_name, entry_name, join, split_attempt_path
from gangrun._ckpt.logs import say
from gangrun._ckpt.manifest import Manifest, ManifestError
from gangrun._ckpt.storage import Storage, open_storage
from gangrun._errors import CheckpointError, CommitFailed, UsageError

__all__ = ["Checkpoint", "SaveInfo"]

log = logging.getLogger("gangrun")
LoadedFrom = Literal["own", "previous"]


class _Withdrawn(CheckpointError):
    """This rank's part of a sharded checkpoint is corrupt although the other ranks may load it."""


@dataclass(frozen=True)
class SaveInfo:
    """A save: committed at `uri` when save() returns (blocking), or once the writer is done."""

    seq: int
    attempt: int
    step: int | None
    uri: str


@dataclass(frozen=True)
class _Taken:
    """When a save's state was taken (save() was called), and whether the gang was stopping then."""

    at: float
    final: bool


class Checkpoint:
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
        # Outside a gang, where this checkpoint is (gangrun._context): said at the first load or save.
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
        the same path.

        For a sharded checkpoint it returns this rank's part (None on a rank the checkpoint has no
        part for: see `loaded_world_size` and `shard_path`). Every rank makes the same choice: a
        sharded checkpoint is taken only if every part is present with the sizes its manifest lists.
        """
        if self._load_done:
            return self._loaded
        self._say_where()
        skipped = 0
        own = ((self._storage, c, self._uri_of(c.attempt, c.seq))
               for c in catalog.candidates(self._storage, self._root_path, attempt=self.attempt))
        for storage, cand, uri in itertools.chain(own, self._resume_candidates()):
            try:
                manifest = transfer.read_manifest(storage, cand.path)
                if manifest is None:
                    log.debug("gangrun: %s has no manifest: an unfinished save, not a checkpoint", uri)
                    continue
                if (manifest.attempt, manifest.seq) != (cand.attempt, cand.seq):
                    raise ManifestError(f"its manifest is of attempt {manifest.attempt} seq {manifest.seq}")
                path = self._restore(storage, cand, manifest, uri)
            except _Withdrawn:
                raise
            except (CheckpointError, OSError, ValueError) as e:
                # ValueError: a name the OS cannot take; whatever is wrong, this candidate is unusable.
                skipped += 1
                say(f"gangrun: skipping checkpoint {uri}: {e}; trying the next one", logging.WARNING)
                continue
            mine = storage is self._storage and cand.path.startswith(self._root_path + "/")
            this = mine and cand.attempt == self.attempt
            self.loaded_from = "own" if this else "previous"
            self.loaded_uri, self.loaded_step = uri, manifest.step
            self.loaded_attempt, self.loaded_seq = cand.attempt, cand.seq
            self.loaded_world_size = manifest.world_size
            self._loaded_manifest, self._loaded_path, self._loaded_storage = manifest, cand.path, storage
            self._loaded, self._load_done = path, True
            where = ("this attempt" if this else f"previous attempt {cand.attempt}" if mine else
                     f"spec.checkpoint.resumeFrom {self.resume_from}")
            part = ""
            if manifest.kind == "sharded":
                have = f"rank {self.rank}'s part" if path is not None else f"no part for rank {self.rank}"
                part = f", sharded over {manifest.world_size} ranks: {have}"
            say(f"gangrun: loaded checkpoint from {where} (seq {cand.seq}, step {manifest.step}{part}): {uri}")
            events.loaded(found=True, step=manifest.step)
            return path
        self._load_done = True
        events.loaded(found=False)
        also = f" nor at resumeFrom {self.resume_from}" if self.resume_from else ""
        if skipped:
            say(
                f"gangrun: no usable checkpoint: all {skipped} checkpoint(s) found under {self.root}{also} "
                f"were unreadable (skipped above); starting from scratch",
                logging.WARNING,
            )
        else:
            say(f"gangrun: no checkpoint found (looked in attempts {self.attempt} to 1 under {self.root}{also})")
        return None

    def _resume_candidates(self) -> Iterator[tuple[Storage, Candidate, str]]:
        """The saves at `resume_from`, newest first, each with its URI. Listed only once this task's own
        saves are exhausted."""
        if not self.resume_from:
            return
        storage, path = open_storage(self.resume_from, self._storage_options)
        for cand in resume.candidates(storage, path):
            yield storage, cand, self.resume_from + cand.path[len(path.rstrip("/")):]

    def _restore(self, storage: Storage, cand: Candidate, manifest: Manifest, uri: str) -> Path | None:
        if manifest.kind != "sharded":
            return transfer.read_checkpoint(storage, cand.path, manifest, self._cache())
        transfer.check_parts(storage, cand.path, manifest)
        part = manifest.part(self.rank)
        if part is None:
            return None
        try:
            return transfer.read_part(storage, cand.path, manifest, part, self._cache())
        except transfer.CorruptCheckpoint as e:
            # The other ranks found every part in place and may load this checkpoint: skipping it
            # here alone would resume the gang from two different steps. Withdraw it instead, so
            # that the restarted gang agrees on the previous one, and stop this rank.
            try:
                uncommit(storage, cand.path)
            except Exception:  # the error below still stops this rank
                log.warning("gangrun: could not withdraw %s", uri, exc_info=True)
            raise _Withdrawn(
                f"rank {self.rank}'s part of {uri} is corrupt ({e}); the checkpoint was withdrawn so that a "
                f"restarted gang resumes from the previous one on every rank"
            ) from e

    def shard_path(self, rank: int) -> Path:
        """Rank `rank`'s part of the loaded sharded checkpoint, restored and verified (for
        resharding when the world size changed). Raises UsageError when none is loaded."""
        manifest = self._loaded_manifest
        if manifest is None or manifest.kind != "sharded" or self._loaded_path is None:
            raise UsageError("shard_path() needs a sharded checkpoint loaded by load() first")
        part = manifest.part(rank)
        if part is None:
            raise UsageError(f"rank must be in 0..{len(manifest.parts) - 1} (loaded_world_size), got {rank}")
        if rank not in self._shard_paths:
            if rank == self.rank and self._loaded is not None:
                self._shard_paths[rank] = self._loaded
            else:
                restored = transfer.read_part(self._loaded_storage, self._loaded_path, manifest, part, self._cache())
                self._shard_paths[rank] = restored
        return self._shard_paths[rank]

    async def aload(self) -> Path | None:
        """`load()` without blocking the event loop."""
        return await asyncio.to_thread(self.load)

    # ---------------------------------------------------------------- save

    def save(
        self,
        data: bytes | str | os.PathLike[str],
        *,
        step: int | None = None,
        blocking: bool = True,
        snapshot: bool = True,
        shard: bool = False,
    ) -> SaveInfo | None:
        """Save bytes, a file or a directory as the next checkpoint of this attempt.

        blocking=True returns once committed (raises CommitFailed if not). blocking=False returns
        once the data is snapshotted and commits in the background (see `wait()`); with
        snapshot=False nothing is copied first, and the caller promises not to change `data` until
        `wait()` or the next save returns. Returns None, writing nothing, on a rank that does not
        write (see the module docstring).

        What blocking=False blocks for: bytes are snapshotted for free (an immutable copy), but a
        file or directory is copied whole (a kernel copy on the same filesystem; a hard link would
        not protect it from training rewriting a file in place). That copy is most of what a
        blocking save itself does, so it cannot be the 5% of one that a background save should
        block for: it measured 25-35% of a 1 GiB save on ext4 here (nearly nothing on a
        filesystem with reflinks, XFS or Btrfs, where the kernel clones the blocks instead). To
        block for well under 1%, pass bytes, or write each checkpoint to a fresh directory and
        pass snapshot=False; for torch state dicts, gangrun.torch.save_state stages the tensors
        into buffers it reuses.

        shard=True: every rank of the gang calls it with its own part and the same `step` (which
        must grow from one sharded save to the next); the checkpoint commits once all
        `world_size` parts are written. A save that cannot complete is abandoned and raises
        CommitFailed on every rank still running: at once when a rank's write fails or it has
        nothing to save (that rank raises its own error), after `shard_timeout` seconds when a
        rank died. keep_last retention runs after the commit, in the background (`wait()`).
        """
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            raise TypeError(f"step must be an int or None, not {type(step).__name__}")
        self._say_where()
        taken = _Taken(at=time.time(), final=notice.stopping())  # the state as of now
        events.first_step(self._events_file, task=self.task, attempt=self.attempt, rank=self.rank, step=step,
                          now=taken.at)
        if shard:
            return self._save_shard(data, step=step, blocking=blocking, snapshot=snapshot, taken=taken)
        if not self.writer:
            if not self._said_not_writer:
                self._said_not_writer = True
                say(f"gangrun: rank {self.rank} does not write checkpoints (rank 0 saves the replicated state)")
            return None
        src = transfer.source_of(data)
        with self._lock:
            self._bg.wait()  # one save in flight at a time; raises a previous failure once
            seq = max(catalog.next_seq(self._storage, self._attempt_path), self._last_seq + 1)
            self._last_seq = seq
            info = SaveInfo(seq, self.attempt, step, self._uri_of(self.attempt, seq))
            if blocking:
                self._run_blocking(lambda: self._commit(src, seq, step, taken), info)
                self._bg.submit(lambda: self._retain(seq))
            else:
                staged = transfer.snapshot(src, self._staging(seq)) if snapshot else src

                def job() -> None:
                    self._commit(staged, seq, step, taken)
                    self._retain(seq)

                self._bg.submit(job)
        return info

    def _save_shard(
        self, data: bytes | str | os.PathLike[str], *, step: int | None, blocking: bool, snapshot: bool, taken: _Taken
    ) -> SaveInfo:
        if step is None:
            raise UsageError("a sharded save needs step= (the same on every rank)")
        if self.world_size is None:
            raise UsageError("a sharded save needs the gang's world_size (gangrun.context() sets it)")
        try:
            src: transfer.Source | None = transfer.source_of(data)
            bad: Exception | None = None
        except (TypeError, UsageError) as e:
            # Raised below, once the save is open: the other ranks are told that this rank has no
            # part, so they give up at once instead of waiting for it until the timeout.
            src, bad = None, e
        with self._lock:
            self._bg.wait()
            if self._last_shard_step is not None and step <= self._last_shard_step:
                raise UsageError(f"sharded save steps must grow: step {step} after step {self._last_shard_step}")
            self._last_shard_step = step
            try:
                save = shards.open_save(
                    self._storage, self._attempt_path, rank=self.rank, restart=self.restart_attempt, step=step,
                    seq_floor=self._last_seq + 1, timeout=self.shard_timeout, protocol=self._protocol,
                )  # fmt: skip
            except CommitFailed:
                if bad is not None:  # this rank's own mistake is what it must report
                    raise bad from None
                raise
            self._last_seq = save.seq
            info = SaveInfo(save.seq, self.attempt, step, self._uri_of(self.attempt, save.seq))
            try:
                if bad is not None:
                    raise bad
                assert src is not None
                staged = transfer.snapshot(src, self._staging(save.seq)) if snapshot and not blocking else src
            except BaseException as e:
                shards.give_up(save, self.rank, e)
                raise
            if not blocking:
                # In the rare case that this rank joined a killed gang's leftover save (shards.py),
                # the commit has a higher seq than `info` says; a blocking save returns the right one.
                def job() -> None:
                    self._commit_shard(save, staged, taken)
                    if self.rank == 0:  # who commits, prunes
                        self._retain(save.seq)

                self._bg.submit(job)
                return info
            committed: list[shards.ShardSave] = []
            self._run_blocking(lambda: committed.append(self._commit_shard(save, staged, taken)), info)
            if self.rank == 0:
                self._bg.submit(lambda: self._retain(save.seq))
            done = committed[0]
            return SaveInfo(done.seq, self.attempt, step, self._uri_of(self.attempt, done.seq))

    def _run_blocking(self, job: Callable[[], None], info: SaveInfo) -> None:
        writer_mod.ACTIVE.enter()
        try:
            job()
        except CheckpointError:
            raise
        except Exception as e:
            raise CommitFailed(f"checkpoint save to {info.uri} failed: {e}") from e
        finally:
            writer_mod.ACTIVE.exit()

    async def asave(
        self,
        data: bytes | str | os.PathLike[str],
        *,
        step: int | None = None,
        blocking: bool = True,
        snapshot: bool = True,
        shard: bool = False,
    ) -> SaveInfo | None:
        """`save()` without blocking the event loop."""
        return await asyncio.to_thread(self.save, data, step=step, blocking=blocking, snapshot=snapshot, shard=shard)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background save; False on timeout. Raises CommitFailed once if it failed."""
        return self._bg.wait(timeout)

    def _commit(self, src: transfer.Source, seq: int, step: int | None, taken: _Taken) -> None:
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
                log.debug("gangrun: could not remove the failed save's pending folder", exc_info=True)
            raise
        finally:
            src.discard()
        self._committed(seq, step, taken)

    def _commit_shard(self, save: shards.ShardSave, src: transfer.Source, taken: _Taken) -> shards.ShardSave:
        """Write this rank's part and see the save committed (rank 0 commits it); returns the save
        that committed, which on a rank other than 0 may be a newer one than `save` (shards.py)."""
        try:
            if self.rank != 0:
                part = shards.write_part(save, self.rank, src)
                return shards.wait_committed(save, part, timeout=self.shard_timeout)
            try:
                mine = shards.write_part(save, 0, src)
                assert self.world_size is not None  # checked by save()
                parts = shards.collect(save, self.world_size, timeout=self.shard_timeout)
                parts = (mine, *parts[1:])
                manifest = Manifest(
                    kind="sharded", name="", seq=save.seq, attempt=self.attempt, task=self.task, rank=0,
                    step=save.step, created=time.time(), world_size=self.world_size, parts=parts,
                )  # fmt: skip
                save.pending.finalize(manifest.to_bytes())
            except BaseException as e:
                err = shards.abandon(save, e)
                if err is not e and isinstance(e, Exception):  # every rank raises the same line
                    raise err from e
                raise
        finally:
            src.discard()
        shards.finish(save)
        self._committed(save.seq, save.step, taken)
        return save

    def _committed(self, seq: int, step: int | None, taken: _Taken) -> None:
        uri = self._uri_of(self.attempt, seq)
        log.info("gangrun: committed checkpoint seq %d (step %s): %s", seq, step, uri)
        events.checkpoint_committed(
            self._events_file, task=self.task, attempt=self.attempt, rank=self.rank, seq=seq, step=step, uri=uri,
            taken_at=taken.at, final=taken.final,
        )

    def _retain(self, seq: int) -> None:
        """After the commit of `seq`: remove what `keep_last` no longer keeps. Run by the background
        writer, also after a blocking save: removing a checkpoint as large as the one just written
        takes a sizeable part of a save (a fifth of a sharded 1 GiB save here), and nobody waits for
        it, except `wait()`, the next save and the exit flush."""
        try:
            catalog.apply_retention(
                self._storage, self._root_path, attempt=self.attempt, committed_seq=seq, keep_last=self.keep_last
            )
        except Exception as e:  # the commit stands; old saves are retried at the next commit
            log.warning("gangrun: could not remove old checkpoints under %s: %r", self.root, e)

    # ---------------------------------------------------------------- places

    def _say_where(self) -> None:
        """Once, on rank 0: where the checkpoints of a script run outside a gang go."""
        where, self._where = self._where, None
        if where and self.rank == 0:
            say(where)

    def _uri_of(self, attempt: int, seq: int) -> str:
        return join(self.root, attempt_name(attempt), entry_name(seq))

    def _cache(self) -> Path:
        if self._cache_dir is None:
            # Restored copies live until the process ends (a Path handed out must stay valid after
            # this object is gone), and no longer (cache.py); pass cache_dir= to keep them.
            self._cache_dir = Path(cache.process_cache()) / f"ckpt-{uuid.uuid4().hex[:12]}"
        self._cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self._cache_dir

    def _staging(self, seq: int) -> str:
        tag = f"{entry_name(seq)}.stage-{uuid.uuid4().hex[:8]}"
        if self._storage.local:
            # Same filesystem as the checkpoint, so the writer moves files instead of copying again;
            # its name marks it as a leftover that retention removes if this process dies.
            self._storage.makedirs(self._attempt_path)
            return join(self._attempt_path, tag)
        return str(self._cache() / tag)

