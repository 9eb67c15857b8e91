"""The loading half of `Checkpoint`: which checkpoint a process resumes from, and its restored copy.

Load order: this attempt's saves newest first, then each earlier attempt's, newest first, then
(``resume_from``, the manifest's ``spec.checkpoint.resumeFrom``) the saves at the URI the task was
asked to start from, newest first: another task's checkpoints are loaded only that way.
`JOBSET_RESTART_ATTEMPT` plays no part: a readmission or a JobSet restart re-runs the same attempt,
whose own saves are the newest state.

Alone, a process skips a save it cannot read (missing data, size or checksum mismatch, bad manifest)
with a log line and tries the next. In a gang start, every rank takes the one rank 0 chose
(`gangrun._ckpt.resume_point`), and a checkpoint is never skipped on one rank alone.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from gangrun._ckpt import catalog, events, notice, resume, resume_point, transfer
from gangrun._ckpt.catalog import Candidate
from gangrun._ckpt.commit import uncommit
from gangrun._ckpt.logs import say
from gangrun._ckpt.manifest import Manifest, ManifestError
from gangrun._ckpt.resume_point import ResumePoint, Where
from gangrun._ckpt.storage import Storage, open_storage
from gangrun._errors import CheckpointError, UsageError
from gangrun.checkpoint._places import Places

log = logging.getLogger("gangrun")
LoadedFrom = Literal["own", "previous"]


class _Withdrawn(CheckpointError):
    """A checkpoint (or this rank's part of it) is corrupt although the other ranks may load it."""


class Loading(Places):
    """What `Checkpoint` sets up for loading (see its constructor)."""

    world_size: int | None
    shard_timeout: float
    resume_from: str | None
    start: str | None
    loaded_from: LoadedFrom | None
    loaded_uri: str | None
    loaded_step: int | None
    loaded_attempt: int | None
    loaded_seq: int | None
    loaded_world_size: int | None
    _storage_options: dict[str, Any] | None
    _loaded_storage: Storage
    _loaded: Path | None
    _load_done: bool
    _loaded_manifest: Manifest | None
    _loaded_path: str | None
    _shard_paths: dict[int, Path]
    _keep: str | None
    _stale: list[str]

    def load(self) -> Path | None:
        """Restore the newest complete checkpoint; returns a file (bytes/file saves), a directory
        (directory saves) or None when there is none. The first call decides; later calls return
        the same path.

        In a gang every rank of one start loads the same checkpoint: rank 0 chooses it and the
        others load what rank 0 chose, whenever they get there (`gangrun._ckpt.resume_point`).

        For a sharded checkpoint it returns this rank's part (None on a rank the checkpoint has no
        part for: see `loaded_world_size` and `shard_path`). A sharded checkpoint is taken only if
        every part is present with the sizes its manifest lists.
        """
        if self._load_done:
            return self._loaded
        self._say_where()
        if self._agreed:
            return self._load_agreed()
        skipped = 0
        for storage, cand, uri in self._candidates():
            try:
                manifest = self._manifest(storage, cand, uri)
                if manifest is None:
                    continue
                path = self._restore(storage, cand, manifest, uri)
            except _Withdrawn:
                raise
            except (CheckpointError, OSError, ValueError) as e:
                # ValueError: a name the OS cannot take; whatever is wrong, this candidate is unusable.
                skipped += 1
                say(f"gangrun: skipping checkpoint {uri}: {e}; trying the next one", logging.WARNING)
                continue
            return self._took(storage, cand, uri, manifest, path)
        self._took_nothing(skipped)
        return None

    @property
    def _agreed(self) -> bool:
        """Whether this rank takes part in a start's one choice (a gang start of more than one rank)."""
        return bool(self.start) and (self.world_size or 1) > 1

    def _load_agreed(self) -> Path | None:
        assert self.start is not None
        point = resume_point.read(self._storage, self._attempt_path, self.start)
        if point is None and self.rank != 0:
            point = resume_point.wait(self._storage, self._attempt_path, self.start, rank=self.rank,
                                      timeout=self.shard_timeout, stopping=notice.stopping)
        if point is None:
            point = self._choose()
            resume_point.publish(self._storage, self._attempt_path, self.start, point)
        if self.rank == 0:  # who commits, prunes: earlier starts' choices, at the first commit
            folders = [f for _, f in catalog.folders(self._storage, self._root_path, attempt=self.attempt)]
            self._stale = resume_point.earlier(self._storage, folders, self.start)
        if point.uri is None:
            self._took_nothing(0)
            return None
        storage, cand = self._located(point)
        if storage is self._storage:
            self._keep = cand.path  # retention must not remove it while this start may still load it
        try:
            manifest = self._manifest(storage, cand, point.uri)
            if manifest is None:
                raise CheckpointError("its manifest is gone")
            path = self._restore(storage, cand, manifest, point.uri, withdraw=True)
        except _Withdrawn:
            raise
        except (CheckpointError, OSError, ValueError) as e:
            # Skipping it here alone would resume this rank from another step than its peers.
            raise CheckpointError(f"rank {self.rank} cannot load {point.uri}, the checkpoint this start of the gang "
                                  f"resumes from: {e}") from e
        return self._took(storage, cand, point.uri, manifest, path)

    def _choose(self) -> ResumePoint:
        """Rank 0: the newest checkpoint whose manifest and parts are in place, before reading its data."""
        for storage, cand, uri in self._candidates():
            try:
                manifest = self._manifest(storage, cand, uri)
                if manifest is None:
                    continue
                if manifest.kind == "sharded":
                    transfer.check_parts(storage, cand.path, manifest)
            except (CheckpointError, OSError, ValueError) as e:
                say(f"gangrun: skipping checkpoint {uri}: {e}; trying the next one", logging.WARNING)
                continue
            return ResumePoint(uri=uri, attempt=cand.attempt, seq=cand.seq, step=manifest.step,
                               where=self._where_of(storage, cand))
        return ResumePoint(uri=None)

    def _located(self, point: ResumePoint) -> tuple[Storage, Candidate]:
        """Where the chosen checkpoint is: under this task's root, or at resume_from."""
        assert point.uri is not None and point.attempt is not None and point.seq is not None
        if point.where != "resumeFrom":
            storage, base, root = self._storage, self._root_path, self.root
        elif self.resume_from:
            storage, base = open_storage(self.resume_from, self._storage_options)
            root = self.resume_from
        else:
            raise CheckpointError(f"rank 0 chose {point.uri} from resumeFrom, which this rank was not given")
        if not point.uri.startswith(root + "/"):
            raise CheckpointError(f"rank 0 chose {point.uri}, which is not under {root}")
        return storage, Candidate(point.attempt, point.seq, base.rstrip("/") + point.uri[len(root):])

    def _candidates(self) -> Iterator[tuple[Storage, Candidate, str]]:
        """Every save to try, newest first, each with its URI: this task's own, then resume_from's."""
        own = ((self._storage, c, self._uri_of(c.attempt, c.seq))
               for c in catalog.candidates(self._storage, self._root_path, attempt=self.attempt))
        return itertools.chain(own, self._resume_candidates())

    def _manifest(self, storage: Storage, cand: Candidate, uri: str) -> Manifest | None:
        manifest = transfer.read_manifest(storage, cand.path)
        if manifest is None:
            log.debug("gangrun: %s has no manifest: an unfinished save, not a checkpoint", uri)
            return None
        if (manifest.attempt, manifest.seq) != (cand.attempt, cand.seq):
            raise ManifestError(f"its manifest is of attempt {manifest.attempt} seq {manifest.seq}")
        return manifest

    def _where_of(self, storage: Storage, cand: Candidate) -> Where:
        mine = storage is self._storage and cand.path.startswith(self._root_path + "/")
        return ("own" if cand.attempt == self.attempt else "previous") if mine else "resumeFrom"

    def _took(self, storage: Storage, cand: Candidate, uri: str, manifest: Manifest, path: Path | None) -> Path | None:
        where = self._where_of(storage, cand)
        self.loaded_from = "own" if where == "own" else "previous"
        self.loaded_uri, self.loaded_step = uri, manifest.step
        self.loaded_attempt, self.loaded_seq = cand.attempt, cand.seq
        self.loaded_world_size = manifest.world_size
        self._loaded_manifest, self._loaded_path, self._loaded_storage = manifest, cand.path, storage
        self._loaded, self._load_done = path, True
        said = {"own": "this attempt", "previous": f"previous attempt {cand.attempt}",
                "resumeFrom": f"spec.checkpoint.resumeFrom {self.resume_from}"}[where]
        part = ""
        if manifest.kind == "sharded":
            have = f"rank {self.rank}'s part" if path is not None else f"no part for rank {self.rank}"
            part = f", sharded over {manifest.world_size} ranks: {have}"
        say(f"gangrun: loaded checkpoint from {said} (seq {cand.seq}, step {manifest.step}{part}): {uri}")
        events.loaded(found=True, step=manifest.step)
        if where == "resumeFrom":
            self._report_resume(uri, manifest.step)
        return path

    def _took_nothing(self, skipped: int) -> None:
        self._load_done = True
        events.loaded(found=False)
        self._report_resume(None, None)
        also = f" nor at resumeFrom {self.resume_from}" if self.resume_from else ""
        if skipped:
            say(
                f"gangrun: no usable checkpoint: all {skipped} checkpoint(s) found under {self.root}{also} "
                f"were unreadable (skipped above); starting from scratch",
                logging.WARNING,
            )
        else:
            say(f"gangrun: no checkpoint found (looked in attempts {self.attempt} to 1 under {self.root}{also})")

    def _report_resume(self, uri: str | None, step: int | None) -> None:
        """Tell the backend what resumeFrom gave (rank 0 only: every rank makes the same choice), so a
        source that held nothing is a warning on the timeline, not a silent start from scratch."""
        if self.resume_from and self.rank == 0:
            events.resume_result(self._events_file, task=self.task, attempt=self.attempt, rank=self.rank,
                                 source=self.resume_from, uri=uri, step=step)

    def _resume_candidates(self) -> Iterator[tuple[Storage, Candidate, str]]:
        """The saves at `resume_from`, newest first, each with its URI. Listed only once this task's own
        saves are exhausted."""
        if not self.resume_from:
            return
        storage, path = open_storage(self.resume_from, self._storage_options)
        for cand in resume.candidates(storage, path):
            yield storage, cand, self.resume_from + cand.path[len(path.rstrip("/")):]

    def _restore(self, storage: Storage, cand: Candidate, manifest: Manifest, uri: str, *,
                 withdraw: bool = False) -> Path | None:
        """Read the checkpoint (this rank's part of a sharded one) into the cache, verified. A corrupt
        one is withdrawn when other ranks may load it (`withdraw`, and always for a sharded one):
        skipping it here alone would resume the gang from two different steps. Withdrawn, it is
        passed over by every rank of the restarted gang, which agrees on the previous one."""
        try:
            if manifest.kind != "sharded":
                return transfer.read_checkpoint(storage, cand.path, manifest, self._cache())
            transfer.check_parts(storage, cand.path, manifest)
            part = manifest.part(self.rank)
            if part is None:
                return None
            withdraw = True
            return transfer.read_part(storage, cand.path, manifest, part, self._cache())
        except transfer.CorruptCheckpoint as e:
            if not withdraw:
                raise
            try:
                uncommit(storage, cand.path)
            except Exception:  # the error below still stops this rank
                log.warning("gangrun: could not withdraw %s", uri, exc_info=True)
            what = f"rank {self.rank}'s part of {uri}" if manifest.kind == "sharded" else uri
            raise _Withdrawn(
                f"{what} is corrupt ({e}); the checkpoint was withdrawn so that a "
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
        import asyncio  # loaded already: an event loop runs this (a worker that never awaits skips 30 ms)

        return await asyncio.to_thread(self.load)

