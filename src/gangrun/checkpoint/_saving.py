"""The saving half of `Checkpoint`: a save of bytes, a file or a directory, whole or one rank's part.

Every save takes the one commit path of `gangrun._ckpt.commit` (the data, the manifest last, then
the report) and runs on the background writer's terms (`gangrun._ckpt.writer`: here when blocking,
in the background otherwise, retention after it in the background either way). Sharded saves
coordinate the ranks through the store (`gangrun._ckpt.rendezvous`, `gangrun._ckpt.shards`).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gangrun._ckpt import catalog, commit, events, rendezvous, shards, transfer
from gangrun._ckpt import writer as writer_mod
from gangrun._ckpt.commit import Content, Taken
from gangrun._ckpt.layout import entry_name, join
from gangrun._ckpt.logs import say
from gangrun._errors import CheckpointError, CommitFailed, UsageError
from gangrun.checkpoint._places import Places

_T = TypeVar("_T")


@dataclass(frozen=True)
class SaveInfo:
    """A save: committed at `uri` when save() returns (blocking), or once the writer is done."""

    seq: int
    attempt: int
    step: int | None
    uri: str


class Saving(Places):
    """What `Checkpoint` sets up for saving (see its constructor)."""

    world_size: int | None
    restart_attempt: int
    shard_timeout: float
    writer: bool
    keep_last: int | None
    _keep: str | None
    _stale: list[str]
    _protocol: str | None
    _bg: writer_mod.BackgroundWriter
    _lock: threading.Lock
    _last_seq: int
    _said_not_writer: bool
    _last_shard_step: int | None

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
        taken = Taken.now()  # the state as of now
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
            staged = transfer.snapshot(src, self._staging(seq)) if snapshot and not blocking else src
            self._run(info, lambda: self._commit(staged, seq, step, taken), blocking=blocking,
                      then=lambda: self._retain(seq))  # fmt: skip
        return info

    def _save_shard(
        self, data: bytes | str | os.PathLike[str], *, step: int | None, blocking: bool, snapshot: bool, taken: Taken
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
                save = rendezvous.open_save(
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
            # In the rare case that this rank joined a killed gang's leftover save (shards.py), the
            # commit has a higher seq than `info` says; a blocking save returns the right one.
            done = self._run(info, lambda: self._commit_shard(save, staged, taken), blocking=blocking,
                             then=(lambda: self._retain(save.seq)) if self.rank == 0 else None)  # who commits, prunes
            if done is None:
                return info
            return SaveInfo(done.seq, self.attempt, step, self._uri_of(self.attempt, done.seq))

    def _run(
        self, info: SaveInfo, job: Callable[[], _T], *, blocking: bool, then: Callable[[], None] | None
    ) -> _T | None:
        """`job` on the background writer's terms (writer.py); a blocking one raises CommitFailed
        naming the save for any failure that is not a CheckpointError already."""
        if not blocking:
            return self._bg.run(job, blocking=False, then=then)

        def failing_as_commit() -> _T:
            try:
                return job()
            except CheckpointError:
                raise
            except Exception as e:
                raise CommitFailed(f"checkpoint save to {info.uri} failed: {e}") from e

        return self._bg.run(failing_as_commit, blocking=True, then=then)

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
        import asyncio  # loaded already: an event loop runs this (a worker that never awaits skips 30 ms)

        return await asyncio.to_thread(self.save, data, step=step, blocking=blocking, snapshot=snapshot, shard=shard)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background save; False on timeout. Raises CommitFailed once if it failed."""
        return self._bg.wait(timeout)

    def _commit(self, src: transfer.Source, seq: int, step: int | None, taken: Taken) -> None:
        pending = commit.pending_for(self._storage, join(self._attempt_path, entry_name(seq)), protocol=self._protocol)

        def write() -> Content:
            try:
                pending.create()
                files, dirs = transfer.write_source(self._storage, pending.data_dir, src)
            finally:
                src.discard()
            return Content(kind=src.kind, name=src.name, files=tuple(files), dirs=tuple(dirs))

        commit.commit(pending, self._save_of(seq, step, taken), write)

    def _commit_shard(self, save: rendezvous.ShardSave, src: transfer.Source, taken: Taken) -> rendezvous.ShardSave:
        """Write this rank's part and see the save committed (rank 0 commits it); returns the save
        that committed, which on a rank other than 0 may be a newer one than `save` (shards.py)."""
        if self.rank != 0:  # rank 0 commits, and reports the commit
            try:
                part = shards.write_part(save, self.rank, src)
            finally:
                src.discard()
            return shards.wait_committed(save, part, timeout=self.shard_timeout)
        world_size = self.world_size
        assert world_size is not None  # checked by save()

        def write() -> Content:
            try:
                mine = shards.write_part(save, 0, src)
            finally:
                src.discard()
            parts = shards.collect(save, world_size, timeout=self.shard_timeout)
            return Content(kind="sharded", world_size=world_size, parts=(mine, *parts[1:]))

        commit.commit(save.pending, self._save_of(save.seq, save.step, taken), write,
                      abandon=lambda e: shards.abandon(save, e), after=lambda: rendezvous.finish(save))  # fmt: skip
        return save

    def _save_of(self, seq: int, step: int | None, taken: Taken) -> commit.Save:
        return commit.Save(task=self.task, attempt=self.attempt, rank=self.rank, seq=seq, step=step,
                           uri=self._uri_of(self.attempt, seq), taken=taken, events_file=self._events_file)

    def _retain(self, seq: int) -> None:
        """After the commit of `seq`: remove what `keep_last` no longer keeps, and earlier starts'
        resume points. Run by the background writer, also after a blocking save: removing a
        checkpoint as large as the one just written takes a sizeable part of a save (a fifth of a
        sharded 1 GiB save here), and nobody waits for it, except `wait()`, the next save and the
        exit flush."""
        if catalog.retain(self._storage, self._root_path, attempt=self.attempt, committed_seq=seq,
                          keep_last=self.keep_last, keep=self._keep, stale=self._stale, where=self.root):
            self._stale = []

    def _staging(self, seq: int) -> str:
        tag = f"{entry_name(seq)}.stage-{uuid.uuid4().hex[:8]}"
        if self._storage.local:
            # Same filesystem as the checkpoint, so the writer moves files instead of copying again;
            # its name marks it as a leftover that retention removes if this process dies.
            self._storage.makedirs(self._attempt_path)
            return join(self._attempt_path, tag)
        return str(self._cache() / tag)
