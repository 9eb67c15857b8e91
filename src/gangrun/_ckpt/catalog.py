"""What a task's checkpoint root holds: committed saves newest first, the next seq, retention.

Order is (attempt, seq): attempts run one after another, and within an attempt the single writer
numbers its saves upward, so the largest pair is the newest state. Only names are listed; whether a
candidate is complete is decided by the loader, which reads its manifest (see commit.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gangrun._ckpt.commit import PendingCheckpoint, uncommit
from gangrun._ckpt.layout import Entry, attempt_name, join, parse_attempt, parse_entry
from gangrun._ckpt.storage import Storage

log = logging.getLogger("gangrun")


@dataclass(frozen=True, order=True)
class Candidate:
    """A final-named save: committed if its manifest is present (the loader checks)."""

    attempt: int
    seq: int
    path: str


def attempts(storage: Storage, root: str, *, up_to: int) -> list[int]:
    """Attempt numbers that have a folder under `root`, at most `up_to`, newest first."""
    found = {n for n in map(parse_attempt, storage.list_names(root)) if n is not None and n <= up_to}
    return sorted(found, reverse=True)


def entries(storage: Storage, attempt_dir: str) -> list[Entry]:
    """Every name gangrun wrote in one attempt folder, newest seq first."""
    parsed = (parse_entry(n) for n in storage.list_names(attempt_dir))
    return sorted((e for e in parsed if e is not None), reverse=True)


def folders(storage: Storage, root: str, *, attempt: int) -> Iterator[tuple[int, str]]:
    """(attempt, folder): this attempt's, then each earlier attempt's that exists, newest first.

    Lazy: the root is listed only once the caller is done with this attempt's folder.
    """
    yield attempt, join(root, attempt_name(attempt))
    for n in attempts(storage, root, up_to=attempt - 1):
        yield n, join(root, attempt_name(n))


def candidates(storage: Storage, root: str, *, attempt: int) -> Iterator[Candidate]:
    """Final-named saves, this attempt's first, then each earlier attempt's, newest first.

    Lazy: an earlier attempt's folder is listed only if everything newer was rejected.
    """
    for n, folder in folders(storage, root, attempt=attempt):
        for e in entries(storage, folder):
            if e.final:
                yield Candidate(n, e.seq, join(folder, e.name))


def next_seq(storage: Storage, attempt_dir: str) -> int:
    """One more than any seq in the folder, leftovers included, so a new save never reuses a name."""
    found = entries(storage, attempt_dir)
    return (found[0].seq + 1) if found else 1


def apply_retention(
    storage: Storage, root: str, *, attempt: int, committed_seq: int, keep_last: int | None, keep: str | None = None
) -> list[str]:
    """After a commit: keep the newest `keep_last` committed saves of the task, remove the rest and
    the leftovers of unfinished saves. Returns the removed paths. `keep`: a committed save kept in any
    case, not counted in `keep_last` (the one the gang's current start resumed from: a slow rank may
    still be loading it).

    Leftovers in this attempt are removed only below `committed_seq` (this process writes one save
    at a time, so they belong to a killed predecessor); earlier attempts are over, so all of theirs go.
    """
    removed: list[str] = []
    kept = 0
    for n, folder in folders(storage, root, attempt=attempt):
        for e in entries(storage, folder):
            path = join(folder, e.name)
            if n == attempt and e.seq > committed_seq:
                continue  # newer than what we just wrote: not ours to judge
            if e.final and PendingCheckpoint.is_committed(storage, path):
                if path == keep:
                    continue
                kept += 1
                if keep_last is None or kept <= keep_last:
                    continue
                uncommit(storage, path)
            elif n == attempt and e.seq == committed_seq:
                continue
            else:
                storage.remove(path)
            removed.append(path)
    if removed:
        log.debug("gangrun: removed %d old checkpoint folder(s) under %s", len(removed), root)
    return removed


def retain(
    storage: Storage, root: str, *, attempt: int, committed_seq: int, keep_last: int | None, keep: str | None = None,
    stale: Iterable[str] = (), where: str,
) -> bool:
    """`apply_retention` after the commit of `committed_seq`, then remove `stale` (what the saver
    knows to be obsolete); run by whoever committed, in the background, since nobody waits for it.
    Never raises: the commit stands, and what is left is removed at the next commit (returns False)."""
    try:
        apply_retention(storage, root, attempt=attempt, committed_seq=committed_seq, keep_last=keep_last, keep=keep)
        for path in stale:
            storage.remove(path)
    except Exception as e:
        log.warning("gangrun: could not remove old checkpoints under %s: %r", where, e)
        return False
    return True
