"""`delete --purge` on the local backend: who still resumes from a task's checkpoints, and what deleted
tasks of a name left behind.

A task deleted without `--purge` keeps its checkpoints (`spec.checkpoint.resumeFrom` may load them);
the store remembers where (`Store.kept`), because its `spec.checkpoint.uri` goes with it. A later
`delete NAME --purge` of the deleted name removes them (`purge_kept`), with the folder the home's
default base keeps for that name (tasks deleted before roots were remembered left theirs there).

A purge is refused while a task that has not ended resumes from what it would remove (`dependents`),
naming those tasks; `--force` removes it anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from gangrun._backends.local.config import Paths
from gangrun._backends.local.store import Store
from gangrun._backends.local.task import LocalTask
from gangrun._ckpt.storage import remove_checkpoints
from gangrun._core.checkpoint_root import overlaps, refuse_if_depended_on, resume_source
from gangrun._errors import UsageError

log = logging.getLogger(__name__)


def dependents(tasks: Iterable[LocalTask], roots: list[str], paths: Paths, *, besides: str = "") -> list[str]:
    """The tasks that have not ended whose resumeFrom reads from one of `roots` (except `besides`)."""
    out = []
    for t in tasks:
        if t.terminal or t.name == besides or not t.spec.resume_from:
            continue
        source = resume_source(t.spec.resume_from, paths.checkpoint_base(t.spec.checkpoint_uri))
        if any(overlaps(source, root) for root in roots):
            out.append(t.name)
    return sorted(out)


def kept_roots(store: Store, paths: Paths, name: str) -> list[str]:
    """Where deleted tasks of `name` left checkpoints: the roots the store remembers, and the home's
    default folder of the name when it exists."""
    remembered = store.kept(name)
    default = paths.checkpoint_base("") + f"/{name}"
    if not Path(default).exists():
        return remembered
    return [r for r in remembered if not overlaps(r, default)] + [default]


def purge_kept(store: Store, name: str, roots: list[str]) -> list[str]:
    """Remove each of `roots` and forget it; returns those removed. A root that cannot be removed (its
    storage unreachable) stays remembered, said in the daemon's log, for a later purge."""
    removed = []
    for root in roots:
        try:
            remove_checkpoints(root)
        except Exception as e:  # any storage's error: keep the others going
            log.warning("gangrun: could not remove the checkpoints deleted task %s left at %s: %s", name, root, e)
            continue
        for remembered in store.kept(name):
            if overlaps(remembered, root):
                store.forget_kept(name, remembered)
        removed.append(root)
    return removed


def purge_deleted(store: Store, paths: Paths, tasks: Mapping[str, LocalTask], name: str, *, force: bool) -> list[str]:
    """`delete NAME --purge` of a name no task has: remove the checkpoints deleted tasks of that name kept.
    Returns the roots removed. Raises UsageError for a live name, a name that left nothing, or (unless
    `force`) checkpoints a task that has not ended resumes from."""
    if name in tasks:
        raise UsageError(f'task "{name}" exists: `gangrun delete {name} --purge` removes it with its checkpoints')
    roots = kept_roots(store, paths, name)
    if not roots:
        raise UsageError(f'unknown task "{name}", and no deleted task of that name left checkpoints')
    if not force:
        refuse_if_depended_on(name, dependents(tasks.values(), roots, paths))
    return purge_kept(store, name, roots)
