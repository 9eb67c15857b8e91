"""What a worker reports about its checkpoints when it exits, and how the controller reads it back.

Inside a pod the SDK appends one JSON line per committed checkpoint to GANGRUN_EVENTS_FILE
(`gangrun._ckpt.events`). When the worker exits, `gangrun.launch` condenses that file into the
container's termination message, which the kubelet copies into the pod's status
(`state.terminated.message`, at most 4096 bytes), where the controller reads it. That is how a
commit made inside a pod reaches the task's accounting and timeline without the controller reading
the checkpoint store.

    report(lines)  → the termination message: {"gangrun": 1, "commits": N, "newest": {...}}
    read(message)  → the newest `Commit` in it, or None for any other or malformed text
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

VERSION = 1
LIMIT = 4096  # the kubelet keeps at most this many bytes of a termination message
COMMITTED = "checkpoint_committed"


@dataclass(frozen=True, kw_only=True)
class Commit:
    """The newest checkpoint one worker committed, as its termination message says."""

    attempt: int
    at: datetime
    step: int | None = None
    seq: int | None = None
    rank: int = 0
    uri: str = ""


def _commits(lines: Iterable[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill mid-write
        if isinstance(doc, dict) and doc.get("type") == COMMITTED and isinstance(doc.get("time"), (int, float)):
            out.append(doc)
    return out


def report(lines: Iterable[str]) -> str:
    """The termination message for the events file's `lines`; "" when nothing committed."""
    commits = _commits(lines)
    if not commits:
        return ""
    newest = max(commits, key=lambda d: d["time"])
    keep = {k: newest.get(k) for k in ("attempt", "rank", "seq", "step", "time", "uri")}
    text = json.dumps({"gangrun": VERSION, "commits": len(commits), "newest": keep}, separators=(",", ":"))
    if len(text.encode()) > LIMIT:  # only a very long URI gets here: the time and step matter more
        keep["uri"] = ""
        text = json.dumps({"gangrun": VERSION, "commits": len(commits), "newest": keep}, separators=(",", ":"))
    return text


def read(message: str) -> Commit | None:
    """The newest commit of a termination message written by `report`."""
    try:
        doc = json.loads(message)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("gangrun") != VERSION or not isinstance(doc.get("newest"), dict):
        return None
    n = doc["newest"]
    attempt, t = n.get("attempt"), n.get("time")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or isinstance(t, bool) \
            or not isinstance(t, (int, float)):
        return None
    try:
        at = datetime.fromtimestamp(float(t), UTC)
    except (OverflowError, OSError, ValueError):
        return None

    def whole(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return Commit(attempt=attempt, at=at, step=whole(n.get("step")), seq=whole(n.get("seq")),
                  rank=whole(n.get("rank")) or 0, uri=n.get("uri") if isinstance(n.get("uri"), str) else "")
