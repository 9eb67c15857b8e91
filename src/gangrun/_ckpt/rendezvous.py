"""Step 1 of a sharded save (shards.py): the rendezvous through which every rank learns the seq.

Rank 0 picks the seq (the next one of the attempt folder), creates the pending folder and writes
``shards-r<r>-s<s>.json`` in the attempt folder: ``{"seq": N, "opened": <when>}``, one atomic write.
Every other rank reads it (polling) and so derives the same pending folder (`ShardSave.pending`).
Rank 0 marks it abandoned, with the reason, when it gives the save up (ranks that read it late
raise that reason at once), and removes it after the commit.

A gang killed mid-save leaves its rendezvous behind; one marked abandoned is told apart by when it
was opened: before this process started (`process_started`), so by an earlier run of the gang.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, replace

from gangrun._ckpt import catalog
from gangrun._ckpt.commit import PendingCheckpoint, shared_pending
from gangrun._ckpt.layout import PARTS, entry_name, is_rendezvous, join, part_name, rendezvous_name, shard_tag
from gangrun._ckpt.polls import Polls
from gangrun._ckpt.storage import Storage
from gangrun._errors import CommitFailed

log = logging.getLogger("gangrun")


def _process_started() -> float:
    """When this process started, on the wall clock (Linux: from /proc, to the clock tick; elsewhere,
    when this module was imported, which a script does at its start)."""
    now = time.time()
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time after boot
        return now - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return now


_started: tuple[int, float] | None = None  # (pid, start): a forked child has a start of its own


def process_started() -> float:
    """When this process started: a rendezvous opened before it is a leftover of an earlier run."""
    global _started
    pid = os.getpid()
    if _started is None or _started[0] != pid:
        _started = (pid, _process_started())
    return _started[1]


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
    protocol: str | None  # the commit protocol override (tests), None: what the storage supports

    @property
    def pending(self) -> PendingCheckpoint:
        """The same location on every rank: the folder is named by the seq, restart and step alone."""
        final = join(self.attempt_dir, entry_name(self.seq))
        return shared_pending(self.storage, final, tag=shard_tag(self.restart, self.step), protocol=self.protocol)

    def at_seq(self, seq: int) -> ShardSave:
        return replace(self, seq=seq)

    @property
    def rendezvous(self) -> str:
        return join(self.attempt_dir, rendezvous_name(self.restart, self.step))

    def part_dir(self, rank: int) -> str:
        return join(self.pending.data_dir, part_name(rank))

    def marker(self, rank: int, suffix: str = ".json") -> str:
        return join(self.pending.location, PARTS, part_name(rank) + suffix)


@dataclass(frozen=True)
class Rendezvous:
    seq: int
    abandoned: str | None  # why, once rank 0 gave the save up (late ranks learn it here)
    opened: float | None  # when rank 0 opened the save (wall clock); None in files of older versions

    def leftover(self, since: float) -> bool:
        """Abandoned by a run of the gang older than `since` (this rank's start), not by this one."""
        return self.abandoned is not None and self.opened is not None and self.opened < since


def read(storage: Storage, path: str) -> Rendezvous | None:
    """The rendezvous at `path`; None while it is absent (or, on a store without atomic writes,
    not yet whole)."""
    try:
        doc = json.loads(storage.read_bytes(path))
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(doc, dict) or type(doc.get("seq")) is not int or doc["seq"] < 1:
        return None
    why, opened = doc.get("abandoned"), doc.get("opened")
    return Rendezvous(
        doc["seq"], None if why is None else str(why), float(opened) if isinstance(opened, (int, float)) else None
    )


def open_save(
    storage: Storage,
    attempt_dir: str,
    *,
    rank: int,
    restart: int,
    step: int,
    seq_floor: int,
    timeout: float,
    since: float | None = None,
    protocol: str | None = None,
) -> ShardSave:
    """Step 1: rank 0 picks the seq and publishes it; every other rank reads it (waits up to `timeout`).

    The rendezvous a rank reads may be a leftover: a gang killed during its save of this step,
    readmitted with the same restart attempt (a readmission is not a JobSet restart), saves the
    same step again, and a rank can get there before rank 0 replaces the file. A leftover that is
    still open cannot be told from the outside, so `wait_committed` watches for it and moves the
    part (see there). One marked abandoned and opened before `since` (default: when this process
    started) is an earlier run's: it is passed over, and the rank waits for the new one. Clocks of
    different nodes may disagree by a little; a readmission takes far longer than that.
    """
    since = process_started() if since is None else since
    name = rendezvous_name(restart, step)
    if rank == 0:
        seq = max(catalog.next_seq(storage, attempt_dir), seq_floor)
        save = ShardSave(storage, attempt_dir, restart, step, seq, protocol)
        save.pending.create()  # first: the new seq is above every leftover before any rank can read it
        for stale in storage.list_names(attempt_dir):  # one sharded save at a time: others are leftovers
            if is_rendezvous(stale):
                storage.remove(join(attempt_dir, stale))
        # No fsync: a rendezvous is never needed after a crash.
        doc = {"seq": save.seq, "opened": time.time()}
        storage.write_bytes(join(attempt_dir, name), json.dumps(doc).encode(), sync=False)
        return save
    found: Rendezvous | None = None
    passed_over = False
    for _ in Polls(timeout=timeout, local=storage.local):
        found = read(storage, join(attempt_dir, name))
        if found is not None and found.leftover(since):
            if not passed_over:
                passed_over = True
                log.info("gangrun: step %d's rendezvous is an earlier run's abandoned save (seq %d): "
                         "waiting for rank 0's", step, found.seq)  # fmt: skip
            found = None
            continue
        if found is not None:
            break
    if found is None:
        raise ShardSaveAbandoned(
            f"sharded save of step {step} abandoned: rank 0 did not start it within {timeout:.0f}s"
        )
    if found.abandoned is not None:
        raise ShardSaveAbandoned(found.abandoned)
    return ShardSave(storage, attempt_dir, restart, step, found.seq, protocol)


def abandoned(save: ShardSave) -> str | None:
    """Why rank 0 abandoned this save (or the one that replaced it), if it did."""
    try:
        news = read(save.storage, save.rendezvous)
    except Exception:  # the store is failing too: the caller reports its own error
        return None
    return news.abandoned if news is not None and news.seq >= save.seq else None


def _read_quietly(save: ShardSave) -> Rendezvous | None:
    """The rendezvous of `save`; None when absent or unreadable."""
    try:
        return read(save.storage, save.rendezvous)
    except Exception:
        return None


def mark_abandoned(save: ShardSave, why: str) -> bool:
    """Rank 0: mark the rendezvous abandoned with `why`, keeping when it was opened (a rank of a
    later run of the gang must still see it as an earlier run's). Returns whether it was written."""
    old = _read_quietly(save)
    doc = {"seq": save.seq, "abandoned": why, "opened": old.opened if old and old.seq == save.seq else None}
    try:
        save.storage.write_bytes(save.rendezvous, json.dumps(doc).encode(), sync=False)
        return True
    except Exception:
        log.debug("gangrun: could not mark the sharded save of step %d abandoned", save.step, exc_info=True)
        return False


def finish(save: ShardSave) -> None:
    """Rank 0, after the commit: the rendezvous has served (every rank read it before its marker)."""
    save.storage.remove(save.rendezvous)
