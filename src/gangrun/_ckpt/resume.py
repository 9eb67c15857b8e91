"""Where `spec.checkpoint.resumeFrom` points, as saves to try newest first.

The backend hands the worker one URI (GANGRUN_RESUME_FROM); it is read at the first level that fits:

    .../attempt-<N>/ckpt-<seq>      one checkpoint (its manifest is there)
    .../attempt-<N>                 an attempt folder: its saves, newest first
    <root>                          a task's root (holding attempt-<N> folders): as the task itself
                                    would load, newest attempt first
    <base>/<name>                   the folder of every task of one name, each task's root in a
                                    folder named by its identity: the task whose newest complete
                                    checkpoint is the newest, then the others, newest first

Only names are listed, plus one manifest per task root to order the tasks of a name; the loader checks
every candidate as it checks its own (a save without a manifest, or one that does not verify, is
skipped for the next one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from gangrun._ckpt import catalog, transfer
from gangrun._ckpt.catalog import Candidate
from gangrun._ckpt.layout import MANIFEST, join, parse_attempt, parse_entry
from gangrun._ckpt.manifest import ManifestError
from gangrun._ckpt.storage import Storage

log = logging.getLogger("gangrun")
_ANY_ATTEMPT = 1 << 30


def candidates(storage: Storage, path: str) -> Iterator[Candidate]:
    """The saves at or under `path`, newest first (see the module's table)."""
    path = path.rstrip("/")
    parent, _, last = path.rpartition("/")
    entry, attempt = parse_entry(last), parse_attempt(parent.rpartition("/")[2])
    if entry is not None and entry.final and attempt is not None and storage.exists(join(path, MANIFEST)):
        yield Candidate(attempt, entry.seq, path)
        return
    n = parse_attempt(last)
    if n is not None:
        for e in catalog.entries(storage, path):
            if e.final:
                yield Candidate(n, e.seq, join(path, e.name))
        return
    for root in _task_roots(storage, path):
        yield from catalog.candidates(storage, root, attempt=_newest_attempt(storage, root))


def _newest_attempt(storage: Storage, root: str) -> int:
    found = catalog.attempts(storage, root, up_to=_ANY_ATTEMPT)
    return found[0] if found else 0


def _task_roots(storage: Storage, path: str) -> list[str]:
    """`path` if it is a task's root, and each folder under it that is one, newest checkpoint first."""
    roots = [r for r in (path, *(join(path, n) for n in sorted(storage.list_names(path)) if parse_attempt(n) is None))
             if _newest_attempt(storage, r)]
    return sorted(roots, key=lambda r: _newest_commit(storage, r), reverse=True)


def _newest_commit(storage: Storage, root: str) -> float:
    """When the newest committed save under `root` was made (0: none readable)."""
    for cand in catalog.candidates(storage, root, attempt=_newest_attempt(storage, root)):
        try:
            manifest = transfer.read_manifest(storage, cand.path)
        except (ManifestError, OSError) as e:
            log.debug("gangrun: %s: %s", cand.path, e)
            continue
        if manifest is not None:
            return manifest.created
    return 0.0
