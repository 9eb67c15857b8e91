"""What a worker reports about its checkpoints when it exits, and how the controller reads it back.

Inside a pod the SDK appends one JSON line per committed checkpoint to GANGRUN_EVENTS_FILE
(`gangrun._ckpt.events`). When the worker exits, `gangrun.launch` condenses that file into the
container's termination message, which the kubelet copies into the pod's status
(`state.terminated.message`, at most 4096 bytes), where the controller reads it. That is how a
commit made inside a pod reaches the task's accounting and timeline without the controller reading
the checkpoint store.

    report(lines)       → the termination message:
                          {"gangrun": 1, "commits": N, "newest": {...}, "firstStep": <unix seconds>,
                           "firstStepOf": {"rank", "loaded", "loadedStep"}, "resume": {...}}
    Summary             the same, folded a line at a time (the launcher's live report, `_live_report`)
    read(message)       → the newest `Commit` in it, or None for any other or malformed text
    first_step(message) → when the worker took its first step after its load, and what it loaded, or None
    resume(message)     → what spec.checkpoint.resumeFrom gave rank 0's newest load, or None

The newest commit says when its state was taken (`takenAt`), how long its save took and whether it
was the final save in the grace period; `firstStep` ends the gang's restoring time. Both correct
the accounting of the stop at which the controller reads them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gangrun._core import worker_env as wenv

VERSION = 1
LIMIT = 4096  # the kubelet keeps at most this many bytes of a termination message
COMMITTED, FIRST_STEP, RESUME = wenv.EVENT_COMMITTED, wenv.EVENT_FIRST_STEP, wenv.EVENT_RESUME


@dataclass(frozen=True, kw_only=True)
class Commit:
    """The newest checkpoint one worker committed, as its termination message says."""

    attempt: int
    at: datetime
    step: int | None = None
    seq: int | None = None
    rank: int = 0
    uri: str = ""
    taken_at: datetime | None = None  # when its state was taken (save() called)
    save_seconds: float | None = None  # from save() to the commit
    final: bool = False  # saved after the stop notice (in the grace period)


class Summary:
    """The report of an events file, folded line by line: a worker's live report reads only the lines
    written since it last looked, however long the run."""

    def __init__(self) -> None:
        self.commits = 0
        self._newest: dict[str, Any] | None = None
        self._first_step: dict[str, Any] | None = None
        self._resume: dict[str, Any] | None = None

    def add(self, line: str) -> None:
        try:
            doc = json.loads(line)
        except ValueError:
            return  # a line cut by a kill mid-write
        if not isinstance(doc, dict) or not _number(doc.get("time")):
            return
        if doc.get("type") == COMMITTED:
            self.commits += 1
            if self._newest is None or doc["time"] >= self._newest["time"]:
                self._newest = doc
        elif doc.get("type") == FIRST_STEP and (self._first_step is None or doc["time"] >= self._first_step["time"]):
            # the newest: a process that loaded twice stepped after its last load
            self._first_step = {k: doc[k] for k in ("time", "rank", "loaded", "loadedStep") if k in doc}
        elif doc.get("type") == RESUME and (self._resume is None or doc["time"] >= self._resume["time"]):
            self._resume = {k: doc.get(k) for k in ("attempt", "source", "uri", "step", "time")}

    def text(self) -> str:
        """The termination message; "" when nothing was reported."""
        if not self.commits and self._first_step is None and self._resume is None:
            return ""
        doc: dict[str, Any] = {"gangrun": VERSION, "commits": self.commits}
        if self._first_step is not None:
            doc["firstStep"] = self._first_step["time"]
            doc["firstStepOf"] = {k: v for k, v in self._first_step.items() if k != "time"}
        if self._resume is not None:
            doc["resume"] = self._resume
        keep: dict[str, Any] = {}
        if self._newest is not None:
            keep = {k: self._newest.get(k) for k in ("attempt", "rank", "seq", "step", "time", "uri", "takenAt",
                                                     "saveSeconds", "final") if k in self._newest}
            doc["newest"] = keep
        text = json.dumps(doc, separators=(",", ":"))
        if len(text.encode()) > LIMIT:  # only very long URIs get here: the time and step matter more
            keep["uri"] = ""
            if self._resume is not None:
                doc["resume"] = {**self._resume, "source": self._resume["source"][:256],
                                 "uri": "(too long to report)" if self._resume.get("uri") else None}
            text = json.dumps(doc, separators=(",", ":"))
        return text


def report(lines: Iterable[str]) -> str:
    """The termination message for the events file's `lines`; "" when nothing was reported."""
    summary = Summary()
    for line in lines:
        summary.add(line)
    return summary.text()


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _time(v: Any) -> datetime | None:
    if not _number(v):
        return None
    try:
        return datetime.fromtimestamp(float(v), UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _doc(message: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(message)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("gangrun") == VERSION else None


def first_step(message: str) -> dict[str, Any] | None:
    """The first step after its load of the worker that wrote `message`, as its `first_step` line says:
    `time` (a datetime), `rank`, and `loaded`/`loadedStep` when it loaded; None when it did not say."""
    doc = _doc(message)
    t = _time(doc.get("firstStep")) if doc is not None else None
    if doc is None or t is None:
        return None
    of = doc.get("firstStepOf")
    return {**(of if isinstance(of, dict) else {}), "time": t}


def resume(message: str) -> dict[str, Any] | None:
    """What spec.checkpoint.resumeFrom gave the newest load the worker reported (the `resume_from` line of
    `gangrun._ckpt.events`: source, uri (None: nothing there), step, attempt, time), or None."""
    doc = _doc(message)
    r = doc.get("resume") if doc is not None else None
    return r if isinstance(r, dict) and _number(r.get("time")) and isinstance(r.get("source"), str) else None


def read(message: str) -> Commit | None:
    """The newest commit of a termination message written by `report`."""
    doc = _doc(message)
    if doc is None or not isinstance(doc.get("newest"), dict):
        return None
    n = doc["newest"]
    attempt, at = n.get("attempt"), _time(n.get("time"))
    if isinstance(attempt, bool) or not isinstance(attempt, int) or at is None:
        return None
    seconds = n.get("saveSeconds")

    def whole(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return Commit(attempt=attempt, at=at, step=whole(n.get("step")), seq=whole(n.get("seq")),
                  rank=whole(n.get("rank")) or 0, uri=n.get("uri") if isinstance(n.get("uri"), str) else "",
                  taken_at=_time(n.get("takenAt")), save_seconds=float(seconds) if _number(seconds) else None,
                  final=n.get("final") is True)
