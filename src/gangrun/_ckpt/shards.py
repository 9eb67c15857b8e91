"""Sharded saves: every rank writes its own part, and one commit makes them a checkpoint together.

No new service: the ranks coordinate through the store, and the gang supplies what they share
(attempt, restart attempt, step, world size). The layout is drawn in layout.py. One save of step `s`
by restart attempt `r`:

1. Rank 0 picks the seq (the next one of the attempt folder), creates the pending folder and writes
   the rendezvous ``shards-r<r>-s<s>.json`` (``{"seq": N}``, one atomic write). The other ranks
   read it (polling) and so derive the same pending folder: ``ckpt-<N>.shard-r<r>-s<s>/`` on rename
   stores, ``ckpt-<N>/`` on marker stores. This step, and `ShardSave`, are rendezvous.py.
2. Every rank writes its part under ``data/rank-<rank>/``, makes it durable, then writes its part
   marker ``parts/rank-<rank>.json`` (what the part holds: files, sizes, CRC-32s) last. A rank
   that has no part (its write failed, its input was bad) leaves ``parts/rank-<rank>.failed``
   (why, in one line) instead, so rank 0 gives up at once. A rank whose write failed removes what
   it wrote of its part first: when the disk is full, that is what makes room for the marker.
3. Rank 0 waits for every marker, checks that every listed file is there with its size, and
   commits through the same path as any save (commit.py): the manifest (kind "sharded", every
   part) and a rename on local filesystems, the manifest written last on object stores. The other
   ranks' blocking saves return once they see the commit.

A rank killed at any moment leaves no committed checkpoint with a missing or torn part: the commit
happens only after every marker, and a marker only after its part's data is durable. A save that
cannot complete (a rank died or failed, or the timeout passed) is abandoned: rank 0 marks the
rendezvous abandoned, with the reason, and removes the pending folder; every rank then raises
ShardSaveAbandoned with that same one-line reason (a rank that failed composes the same line
itself from its own error).

A gang killed mid-save leaves its rendezvous behind. Readmitted after a preemption, it runs the
same attempt and restart attempt again and may save the same step: a rank can then read the old
rendezvous before rank 0 replaces it. Such a rank notices the new one while it waits for the
commit and moves its part there (`wait_committed`). A leftover marked abandoned is told apart by
when it was opened: before this process started, so by an earlier run of the gang; the rank
ignores it and waits for rank 0's new rendezvous, and the re-save commits as usual.
"""

from __future__ import annotations

import json
import logging

from gangrun._ckpt import rendezvous, transfer
from gangrun._ckpt.layout import MANIFEST, PARTS, join, part_name
from gangrun._ckpt.logs import say
from gangrun._ckpt.manifest import ManifestError, Part
from gangrun._ckpt.polls import Polls, peer_lost
from gangrun._ckpt.rendezvous import ShardSave, ShardSaveAbandoned

log = logging.getLogger("gangrun")

#: How long a rank whose part failed waits for rank 0 to abandon the save, so that it raises rank
#: 0's line (which names every rank that failed) rather than its own.
AGREE_SECONDS = 10.0


def write_part(save: ShardSave, rank: int, src: transfer.Source) -> Part:
    """Step 2: this rank's part, made durable, then its marker.

    On failure the partial part is removed first (on a full disk it is what fills it), then a
    `.failed` marker tells rank 0; raises ShardSaveAbandoned with the line every rank will raise."""
    storage = save.storage
    folder = save.part_dir(rank)
    try:
        storage.makedirs(folder)
        files, dirs = transfer.write_source(storage, folder, src)
        storage.sync_tree(folder)  # durable before the marker that vouches for it
        part = Part(rank=rank, kind=src.kind, name=src.name, files=tuple(files), dirs=tuple(dirs))
        _write_marker(save, part)
        return part
    except BaseException as e:
        why = rendezvous.abandoned(save) if rank != 0 else None
        if why is not None:  # rank 0 gave up and removed the folder this rank was writing into
            _discard(save)
            raise ShardSaveAbandoned(why) from e
        try:
            storage.remove(folder)
        except Exception:  # the marker below may still fit; the timeout ends the save otherwise
            log.debug("gangrun: could not remove this rank's partial part", exc_info=True)
        if rank != 0:
            report_failure(save, rank, e)
        if not isinstance(e, Exception):  # an interrupt stays one
            raise
        line = failed_parts(save.step, [rank], reason(e))
        if rank != 0:  # rank 0's line, which also names any other rank that failed at the same time
            line = _await_abandoned(save, AGREE_SECONDS) or line
        raise ShardSaveAbandoned(line) from e


def _await_abandoned(save: ShardSave, timeout: float) -> str | None:
    for _ in Polls(timeout=timeout, local=save.storage.local):
        why = rendezvous.abandoned(save)
        if why is not None:
            return why
    return None


def reason(e: BaseException) -> str:
    """An error as one line: what a `.failed` marker holds and every rank's message repeats."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if isinstance(e, OSError) else f"{type(e).__name__}: {text}"


def failed_parts(step: int, ranks: list[int], why: str) -> str:
    """The line every rank raises when ranks could not write their part (`why`: the first one's reason)."""
    return f"sharded save of step {step} abandoned: rank(s) {_ranks(ranks)} failed to write their part: {why}"


def _write_marker(save: ShardSave, part: Part) -> None:
    save.storage.makedirs(join(save.pending.location, PARTS))
    # Visible whole or not at all; made durable by rank 0's sync before the commit.
    save.storage.write_bytes(save.marker(part.rank), json.dumps(part.to_doc()).encode(), sync=False)


def report_failure(save: ShardSave, rank: int, why: object) -> None:
    """Tell rank 0 at once that this rank has no part for the save (a ``.failed`` marker), rather
    than let it wait for the timeout. Best effort: the timeout still ends the save. If rank 0 gave
    the save up already (its own part failed too), the marker is discarded with the folder."""
    try:
        save.storage.makedirs(join(save.pending.location, PARTS))
        text = why if isinstance(why, str) else reason(why) if isinstance(why, BaseException) else str(why)
        save.storage.write_bytes(save.marker(rank, ".failed"), text[:500].encode(), sync=False)
        if rendezvous.abandoned(save) is not None:
            _discard(save)
    except Exception:
        log.debug("gangrun: could not report the failed part to rank 0", exc_info=True)


def _discard(save: ShardSave) -> None:
    """A rank other than 0 that finds the save abandoned after writing into its folder (a part, a
    marker) removes the folder, which its write may have brought back after rank 0 removed it. Rank 0
    marks the rendezvous before it removes the folder, so whichever removal comes last, nothing is left."""
    try:
        save.storage.remove(save.pending.location)
    except Exception:  # a leftover is removed by a later retention pass
        log.debug("gangrun: could not remove the abandoned save of step %d", save.step, exc_info=True)


def collect(save: ShardSave, world_size: int, *, timeout: float) -> tuple[Part, ...]:
    """Step 3 (rank 0): every rank's part, once all markers are in and every listed file is there.

    Raises ShardSaveAbandoned naming the ranks that failed or did not finish in time.
    """
    storage = save.storage
    parts_dir = join(save.pending.location, PARTS)
    wanted = {part_name(r) + ".json": r for r in range(world_size)}
    failed: list[int] = []
    missing: list[int] = list(range(world_size))
    lost: str | None = None
    for _ in Polls(timeout=timeout, local=storage.local):
        names = set(storage.list_names(parts_dir))
        failed = [r for r in range(world_size) if part_name(r) + ".failed" in names]
        missing = [r for n, r in wanted.items() if n not in names]
        if failed or not missing or (lost := peer_lost()):
            break
    what = f"sharded save of step {save.step}"
    if failed:
        try:
            why = save.storage.read_bytes(save.marker(failed[0], ".failed")).decode(errors="replace").strip()
        except Exception:  # the marker's presence is what matters
            why = ""
        raise ShardSaveAbandoned(failed_parts(save.step, failed, why or "(no reason given)"))
    if missing and lost:
        raise ShardSaveAbandoned(f"{what} abandoned: rank(s) {_ranks(missing)} had not written their part when the "
                                 f"gang was stopped for a lost peer ({lost})")
    if missing:
        raise ShardSaveAbandoned(f"{what} abandoned: rank(s) {_ranks(missing)} did not finish within {timeout:.0f}s")
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
                raise ShardSaveAbandoned(f"{what}: rank {r}'s {f.path} is not as its marker says")
        parts.append(part)
    return tuple(parts)


def wait_committed(save: ShardSave, part: Part, *, timeout: float) -> ShardSave:
    """The other ranks, once their part is in: return once rank 0 committed; raise if it abandoned
    the save or `timeout` seconds passed without news. Returns the save that committed.

    That is not `save` when `save` was a leftover (see `rendezvous.open_save`): rank 0 then
    publishes a rendezvous with a higher seq, which a killed gang's file never gets, and this rank
    moves its part into that save (a rename of its folder on a filesystem) and writes its marker
    there. The part's data is durable already, and the marker still comes after it.
    """
    storage = save.storage
    polls = Polls(timeout=timeout, local=storage.local)
    for _ in polls:
        if storage.exists(join(save.pending.final, MANIFEST)):
            return save
        news = rendezvous.read(storage, save.rendezvous)
        if news is not None and news.seq > save.seq and news.abandoned is None:
            newer = save.at_seq(news.seq)
            log.info("gangrun: step %d is saved as seq %d, not as the leftover seq %d: moving this rank's part there",
                     save.step, newer.seq, save.seq)  # fmt: skip
            try:
                storage.move_tree(save.part_dir(part.rank), newer.part_dir(part.rank))
                _write_marker(newer, part)
            except BaseException as e:
                report_failure(newer, part.rank, e)
                raise
            save = newer
            polls.restart()
            continue
        if news is not None and news.seq >= save.seq and news.abandoned is not None:
            _discard(save)
            raise ShardSaveAbandoned(news.abandoned)
        if not storage.exists(save.pending.location):
            # Renamed (committed) or removed (abandoned) since the first look: look again.
            if storage.exists(join(save.pending.final, MANIFEST)):
                return save
            raise ShardSaveAbandoned(f"sharded save of step {save.step} was abandoned (see rank 0's log)")
        if lost := peer_lost():  # rank 0 may be the one lost: nobody would commit
            raise ShardSaveAbandoned(f"sharded save of step {save.step}: not committed when the gang was stopped "
                                     f"for a lost peer ({lost})")
    raise ShardSaveAbandoned(f"sharded save of step {save.step}: not committed within {timeout:.0f}s")


def abandon(save: ShardSave, why: object) -> ShardSaveAbandoned:
    """Rank 0: give up a save that cannot complete, remove what it wrote, and say so. Returns the
    error every rank raises (the same line: `why` itself when it is one already).

    The rendezvous stays, marked abandoned with that line, so that a rank that has not read it yet
    raises at once instead of waiting; rank 0's next sharded save removes it. The mark goes first,
    so that a rank whose writes fail as the folder vanishes finds it; if it does not fit (a full
    disk), the folder is removed to make room and the mark written after.
    """
    if isinstance(why, ShardSaveAbandoned):
        err = why
    else:
        text = reason(why) if isinstance(why, BaseException) else str(why)
        err = ShardSaveAbandoned(f"sharded save of step {save.step} abandoned: rank 0: {text}")
    message = str(err)[:500]
    marked = rendezvous.mark_abandoned(save, message)
    try:
        save.storage.remove(save.pending.location)
    except Exception:  # a leftover is removed by a later retention pass
        log.debug("gangrun: could not remove the abandoned save of step %d", save.step, exc_info=True)
    if not marked:
        # With the room the removal made; the timeout ends the other ranks' wait otherwise.
        rendezvous.mark_abandoned(save, message)
    say(f"gangrun: {message} (seq {save.seq})")
    return err


def give_up(save: ShardSave, rank: int, why: object) -> None:
    """This rank has no part for an open save (its input was bad, its snapshot failed): rank 0
    abandons the save, any other rank reports the failure so that rank 0 abandons it."""
    text = reason(why) if isinstance(why, BaseException) else str(why)
    if rank == 0:
        abandon(save, ShardSaveAbandoned(failed_parts(save.step, [0], text)))
    else:
        report_failure(save, rank, text)


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
