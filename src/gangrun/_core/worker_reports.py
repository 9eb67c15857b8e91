"""What workers report about their checkpoints, as timeline events: the same on both backends.

A worker's SDK writes a line for each commit, for its first step after a load (or a fresh start) and
for what `spec.checkpoint.resumeFrom` gave its load (`gangrun._ckpt.events`). The local backend reads
the lines from the attempt's events file; on Kubernetes the launcher folds them into the pod's
termination message and live report (`gangrun._checkpoint_report`). Either way they become events here:

    commit_event(...)                 CheckpointCommitted
    first_step(ledger, doc, ...)      FirstStep, and the accounting after it (unchanged: not news)
    resume_event(doc, ...)            ResumedFrom, or the warning ResumeFromFoundNothing
    resume_result(event)              what a task's `resumeFromResult` shows

Each is stamped when it is read (`now`), which keeps the timeline in order; when it happened is in
its data.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from gangrun._core.accounting import Accounting
from gangrun._core.timeline import Event, EventType
from gangrun._core.view_types import ResumeFromResult


def commit_event(*, attempt: int, rank: int, step: int | None, seq: int | None, uri: str | None,
                 committed_at: datetime, now: datetime, taken_at: datetime | None = None,
                 save_seconds: float | None = None, final: bool = False) -> Event:
    what = f"step {step}" if step is not None else f"seq {seq}"
    data: dict[str, Any] = {"step": step, "seq": seq, "uri": uri, "committedAt": min(committed_at, now).isoformat()}
    if taken_at is not None:
        data["takenAt"] = min(taken_at, now).isoformat()
    if save_seconds is not None:
        data.update(saveSeconds=save_seconds, final=final)
    return Event(time=now, type=EventType.CHECKPOINT, attempt=attempt, data=data,
                 message=f"checkpoint committed ({what}) by rank {rank}")


def first_step(ledger: Accounting, doc: dict[str, Any], *, attempt: int, at: datetime,
               now: datetime) -> tuple[Event, Accounting]:
    """A worker's first step (its `first_step` line: rank, and `loaded`/`loadedStep` when it loaded) at
    `at`: the event, and the accounting after it. An accounting that did not change knew the step."""
    at = min(at, now)
    event = Event(time=now, type=EventType.FIRST_STEP, attempt=doc.get("attempt", attempt), message="",
                  data={"at": at.isoformat(), "rank": doc.get("rank", 0)})
    after = ledger.apply(event)
    return replace(event, message=first_step_message(doc) + _since_up(after, at)), after


def first_step_message(doc: dict[str, Any]) -> str:
    """Who took a first step and after loading what; never the step of its first save, which is not
    what it loaded, and no load at all when the worker never said it loaded."""
    who = f"rank {doc.get('rank', 0)} took its first step"
    if "loaded" not in doc:
        return who
    if not doc["loaded"]:
        return f"{who} (nothing to load: a fresh start)"
    step = doc.get("loadedStep")
    return f"{who} after loading step {step}" if step is not None else f"{who} after loading its checkpoint"


def _since_up(after: Accounting, t: datetime) -> str:
    """How long after the gang came up the step was, and whether that was the task's first start."""
    up = after.up_since if after.stepped_at == t else (after.last_up.start if after.last_up else None)
    if up is None:
        return ""
    first = " (the task's first start)" if up == after.first_up else ""
    return f", {(t - up).total_seconds():.1f} s after the gang came up{first}"


def resume_event(doc: dict[str, Any], *, attempt: int, at: datetime, now: datetime) -> Event:
    """What `spec.checkpoint.resumeFrom` gave a worker's load (its `resume_from` line): the checkpoint
    it loaded, or a warning that there was none. `at` is when the load happened."""
    source, uri = str(doc.get("source") or ""), doc.get("uri")
    data = {"source": source, "uri": uri, "step": doc.get("step"), "at": at.isoformat()}
    if uri:
        return Event(time=now, type=EventType.RESUMED_FROM, attempt=doc.get("attempt", attempt), data=data,
                     message=f"loaded {uri} (step {doc.get('step')}) from spec.checkpoint.resumeFrom {source}")
    return Event(time=now, type=EventType.RESUME_FOUND_NOTHING, attempt=doc.get("attempt", attempt), data=data,
                 message=f"warning: spec.checkpoint.resumeFrom {source} holds no complete checkpoint; "
                         "the task starts from scratch")


def resume_result(event: Event) -> ResumeFromResult:
    """What a ResumedFrom or ResumeFromFoundNothing event says, as a task's `resumeFromResult` shows it."""
    return {"found": event.type is EventType.RESUMED_FROM, "uri": event.data.get("uri"),
            "step": event.data.get("step"), "at": event.data.get("at")}
