"""Sharded saves: every rank writes its own part, and one commit makes them a checkpoint together.

No new service: the ranks coordinate through the store, and the gang supplies what they share
(attempt, restart attempt, step, world size). The layout is drawn in layout.py. One save of step `s`
by restart attempt `r`:

1. Rank 0 picks the seq (the next one of the attempt folder), creates the pending folder and writes
   the rendezvous ``shards-r<r>-s<s>.json`` (``{"seq": N}``, one atomic write). The other ranks
   read it (polling) and so derive the same pending folder: ``ckpt-<N>.shard-r<r>-s<s>/`` on rename
   stores, ``ckpt-<N>/`` on marker stores.
2. Every rank writes its part under ``data/rank-<rank>/``, makes it durable, then writes its part
   marker ``parts/rank-<rank>.json`` (what the part holds: files, sizes, CRC-32s) last. A rank
   whose write fails leaves ``parts/rank-<rank>.failed`` instead, so rank 0 gives up at once.
3. Rank 0 waits for every marker, checks that every listed file is there with its size, and
   commits with the same protocol as any save (commit.py): the manifest (kind "sharded", every
   part) and a rename on local filesystems, the manifest written last on object stores. The other
   ranks' blocking saves return once they see the commit.

A rank killed at any moment leaves no committed checkpoint with a missing or torn part: the commit
happens only after every marker, and a marker only after its part's data is durable. A save that
cannot complete (a rank died or failed, or the timeout passed) is abandoned: rank 0 removes the
pending folder and the rendezvous and says so; the other ranks see the folder vanish and raise.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gangrun._ckpt import catalog, transfer
from gangrun._ckpt.commit import PendingCheckpoint, shared_pending
from gangrun._ckpt.layout import (
    MANIFEST,
    PARTS,
    entry_name,
    is_rendezvous,
    join,
    part_name,
    rendezvous_name,
    shard_tag,
)
from gangrun._ckpt.logs import say
from gangrun._ckpt.manifest import ManifestError, Part
from gangrun._ckpt.storage import Storage
from gangrun._errors import CommitFailed

log = logging.getLogger("gangrun")


class ShardSaveAbandoned(CommitFailed):
    """A sharded save that could not complete; nothing of it was committed."""


@dataclass(frozen=True)
class ShardSave:
    """One sharded save, as every rank sees it once the rendezvous is done."""

    storage: Storage
    attempt_dir: str
    restart: int
    step: int
    seq: int
    pending: PendingCheckpoint

    @property
    def rendezvous(self) -> str:
        return join(self.attempt_dir, rendezvous_name(self.restart, self.step))

    def part_dir(self, rank: int) -> str:
        return join(self.pending.data_dir, part_name(rank))

    def marker(self, rank: int, suffix: str = ".json") -> str:
        return join(self.pending.location, PARTS, part_name(rank) + suffix)


def _poll(check: Callable[[], bool], *, timeout: float, local: bool) -> bool:
    """Call `check` until it returns True (then True) or `timeout` seconds pass (then False).

    A look at a local folder costs microseconds, so it is repeated often (the ranks of a save finish
    close together, and every wasted interval is added to the save); a look at an object store is
    a request, so it backs off to a few per second.
    """
    first, most = (0.0005, 0.005) if local else (0.01, 0.2)
    deadline = time.monotonic() + timeout
    delay = first
    while True:
        if check():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(most, delay * 2)


def open_save(
    storage: Storage,
    attempt_dir: str,
    *,
    rank: int,
    restart: int,
    step: int,
    seq_floor: int,
    timeout: float,
    protocol: str | None = None,
) -> ShardSave:
    """Step 1: rank 0 picks the seq and publishes it; every other rank reads it (waits up to `timeout`)."""
    name = rendezvous_name(restart, step)
    tag = shard_tag(restart, step)
    if rank == 0:
        seq = max(catalog.next_seq(storage, attempt_dir), seq_floor)
        for stale in storage.list_names(attempt_dir):  # one sharded save at a time: others are leftovers
            if is_rendezvous(stale):
                storage.remove(join(attempt_dir, stale))
        pending = shared_pending(storage, join(attempt_dir, entry_name(seq)), tag=tag, protocol=protocol)
        pending.create()
        # sync=False: the claim is never needed after a crash.
        storage.write_bytes(join(attempt_dir, name), json.dumps({"seq": seq}).encode(), sync=False)
        return ShardSave(storage, attempt_dir, restart, step, seq, pending)
    found: list[int] = []

    def read() -> bool:
        try:
            doc = json.loads(storage.read_bytes(join(attempt_dir, name)))
        except (FileNotFoundError, ValueError):
            return False
        if isinstance(doc, dict) and type(doc.get("seq")) is int and doc["seq"] >= 1:
            found.append(doc["seq"])
            return True
        return False

    if not _poll(read, timeout=timeout, local=storage.local):
        raise ShardSaveAbandoned(f"sharded save of step {step}: rank 0 did not start it within {timeout:.0f}s")
    seq = found[0]
    pending = shared_pending(storage, join(attempt_dir, entry_name(seq)), tag=tag, protocol=protocol)
    return ShardSave(storage, attempt_dir, restart, step, seq, pending)


def write_part(save: ShardSave, rank: int, src: transfer.Source) -> Part:
    """Step 2: this rank's part, made durable, then its marker. On failure, a `.failed` marker."""
    storage = save.storage
    try:
        folder = save.part_dir(rank)
        storage.makedirs(folder)
        files, dirs = transfer.write_source(storage, folder, src)
        storage.sync_tree(folder)  # durable before the marker that vouches for it
        part = Part(rank=rank, kind=src.kind, name=src.name, files=tuple(files), dirs=tuple(dirs))
        storage.makedirs(join(save.pending.location, PARTS))
        # Visible whole or not at all; made durable by rank 0's sync before the commit.
        storage.write_bytes(save.marker(rank), json.dumps(part.to_doc()).encode(), sync=False)
        return part
    except BaseException as e:
        try:  # tell rank 0 at once rather than let it wait for the timeout
            storage.makedirs(join(save.pending.location, PARTS))
            storage.write_bytes(save.marker(rank, ".failed"), repr(e).encode(), sync=False)
        except Exception:  # rank 0's timeout still ends the save
            log.debug("gangrun: could not report the failed part to rank 0", exc_info=True)
        raise


def collect(save: ShardSave, world_size: int, *, timeout: float) -> tuple[Part, ...]:
    """Step 3 (rank 0): every rank's part, once all markers are in and every listed file is there.

    Raises ShardSaveAbandoned naming the ranks that failed or did not finish in time.
    """
    storage = save.storage
    parts_dir = join(save.pending.location, PARTS)
    wanted = {part_name(r) + ".json": r for r in range(world_size)}
    failed: list[int] = []
    missing: list[int] = []

    def all_in() -> bool:
        names = set(storage.list_names(parts_dir))
        failed[:] = [r for r in range(world_size) if part_name(r) + ".failed" in names]
        missing[:] = [r for n, r in wanted.items() if n not in names]
        return bool(failed) or not missing

    if not _poll(all_in, timeout=timeout, local=storage.local):
        raise ShardSaveAbandoned(f"sharded save of step {save.step}: rank(s) {_ranks(missing)} "
                                 f"did not finish within {timeout:.0f}s")
    if failed:
        raise ShardSaveAbandoned(f"sharded save of step {save.step}: rank(s) {_ranks(failed)} "
                                 "failed to write their part")
    parts: list[Part] = []
    sizes = storage.sizes(save.pending.data_dir)
    for r in range(world_size):
        try:
            part = Part.from_doc(json.loads(storage.read_bytes(save.marker(r))), f"rank {r}'s part marker")
        except (ValueError, ManifestError) as e:
            raise ShardSaveAbandoned(f"sharded save of step {save.step}: {e}") from e
        if part.rank != r:
            raise ShardSaveAbandoned(f"sharded save of step {save.step}: rank {r}'s marker names rank {part.rank}")
        for f in part.files:
            if sizes.get(f"{part_name(r)}/{f.path}") != f.size:
                raise ShardSaveAbandoned(f"sharded save of step {save.step}: "
                                         f"rank {r}'s {f.path} is not as its marker says")
        parts.append(part)
    return tuple(parts)


def wait_committed(save: ShardSave, *, timeout: float) -> None:
    """The other ranks: return once rank 0 committed; raise if it abandoned the save or timed out."""
    storage = save.storage
    final = save.pending.final
    gone: list[bool] = []

    def done() -> bool:
        if storage.exists(join(final, MANIFEST)):
            return True
        if save.pending.location != final and not storage.exists(save.pending.location):
            # Renamed (committed) or removed (abandoned) since the first look: look again.
            gone.append(not storage.exists(join(final, MANIFEST)))
            return True
        if save.pending.location == final and not storage.exists(save.rendezvous):
            gone.append(not storage.exists(join(final, MANIFEST)))
            return True
        return False

    if not _poll(done, timeout=timeout, local=storage.local):
        raise ShardSaveAbandoned(f"sharded save of step {save.step}: not committed within {timeout:.0f}s")
    if gone and gone[0]:
        raise ShardSaveAbandoned(f"sharded save of step {save.step} was abandoned (see rank 0's log)")


def abandon(save: ShardSave, why: object) -> None:
    """Rank 0: remove everything of a save that cannot complete, and say so."""
    for path in (save.pending.location, save.rendezvous):
        try:
            save.storage.remove(path)
        except Exception:  # a leftover is removed by a later retention pass
            log.debug("gangrun: could not remove %s", path, exc_info=True)
    say(f"gangrun: abandoned the sharded save of step {save.step} (seq {save.seq}): {why}")


def finish(save: ShardSave) -> None:
    """Rank 0, after the commit: the rendezvous has served (every rank read it before its marker)."""
    save.storage.remove(save.rendezvous)


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
