"""Which ClusteredTasks still read a checkpoint root through `spec.checkpoint.resumeFrom`: what a
`delete --purge` of that root would pull away from under them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from gangrun._backends.kube.render import resume_uri
from gangrun._backends.kube.stored import load_state, spec_or_none
from gangrun._core.checkpoint_root import overlaps


def resuming_from(tasks: Iterable[dict[str, Any]], root: str, *, besides: str, now: datetime) -> list[str]:
    """The names of `tasks` (ClusteredTask objects) that have not ended and resume from `root`, except
    `besides`, sorted."""
    out = []
    for t in tasks:
        spec = spec_or_none(t)
        if spec is None:  # a task no controller can run resumes from nothing
            continue
        if (spec.name != besides and spec.resume_from and overlaps(resume_uri(spec), root)
                and not load_state(t, now=now).phase.terminal):
            out.append(spec.name)
    return sorted(out)
