"""The web page's data: a task-list row, and a task's timeline as lanes to draw (B5), from plain values.

`timeline(view, events, now=)` takes the `get -o json` view (attempts, evictions with their
readmission, accounting) and the `events -o json` timeline, and returns what a chart draws, one lane
per attempt:

    segments  queued (gang created → admitted), starting (→ whole gang up), running, waiting
              (preempted → readmitted), restarting (a worker exited → the gang is up again)
    marks     checkpoint (each commit, with its step; the final save committed while the gang waits
              for re-admission is drawn at the stop), preempted (and by whom), evicted, readmitted,
              restarted, resumed (the checkpoint a gang start loaded: the newest committed before it,
              of this attempt or an earlier one), resized (an elastic gang's new size), ended (the
              attempt's outcome); an elastic gang's running segments say the size it ran at
    lost      work thrown away by a stop: the time since the newest checkpoint, as the backend
              accounted it (`accounting.workLost`)

Times are ISO-8601 text in and out; an open span ends at `now`. The page only maps times to pixels.
The view is read as typed (`gangrun._core.view_types`), tolerating one without the keys a view may
lack (an unreadable task, a view from an older backend).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gangrun._core import badput
from gangrun._core.eviction import EvictionKind
from gangrun._core.timeline import EventType
from gangrun._core.view_types import AccountingView, AttemptView, EvictionView, ListedView, TaskView

Doc = dict[str, Any]
WAITING_TEXT = "waiting for re-admission"


def task_row(view: ListedView) -> Doc:
    """One row of the task list: what a user scans for (phase, why, attempt, retries left, goodput)."""
    task: TaskView | None = None if "unreadable" in view else view
    accounting = _accounting(task)
    reason = str(view.get("reason") or "")
    phase = str(view.get("phase") or "")
    waiting = phase in ("Queued", "WaitingForResources") or WAITING_TEXT in reason
    return {
        "name": view.get("name"), "phase": phase, "reason": reason, "attempt": view.get("attempt"),
        "retriesLeft": view.get("retriesLeft"), "userRetriesUsed": view.get("userRetriesUsed"),
        "systemRetriesUsed": view.get("systemRetriesUsed"),
        "goodput": accounting.get("goodput") if accounting else None,
        "preemptions": _preemptions(task),
        "waiting": waiting, "pending": view.get("pending"), "queuePosition": view.get("queuePosition"),
        "queue": view.get("queue"), "priorityClass": view.get("priorityClass"),
    }


def _accounting(view: TaskView | None) -> AccountingView | None:
    """The view's accounting, or None for a view without it (or an empty one)."""
    accounting = None if view is None else view.get("accounting")
    return accounting if isinstance(accounting, dict) and accounting else None


def _preemptions(view: TaskView | None) -> int:
    """Evictions of the gang, of every cause."""
    return sum(((None if view is None else view.get("evictionsByCause")) or {}).values())


@dataclass(frozen=True)
class _Ev:
    at: datetime
    type: str
    attempt: int | None
    message: str
    data: Doc


def _sizes(own: list[_Ev]) -> list[tuple[datetime, str]]:
    """(from when, label) of an elastic gang's sizes: its admission below the full size, each resize."""
    out = []
    for e in own:
        to = e.data.get("to") if e.type == EventType.RESIZED.value else (
            e.data.get("nodes") if e.type == EventType.ADMITTED.value else None)
        of = e.data.get("of")
        if to is not None and of:
            out.append((e.at, "gang running" if to == of else f"gang running on {to} of {of} nodes"))
    return out


def _by_size(a: datetime, b: datetime, sizes: list[tuple[datetime, str]]) -> list[tuple[datetime, datetime, str]]:
    """The span a..b cut where the gang's size changed, each piece with its label."""
    label = next((lb for at, lb in reversed(sizes) if at <= a), "gang running")
    out, start = [], a
    for at, lb in sizes:
        if a < at < b:
            out.append((start, at, label))
            start, label = at, lb
    out.append((start, b, label))
    return out


def _t(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) and text else None


def _iso(t: datetime) -> str:
    return t.isoformat()


def _events(docs: list[Doc]) -> list[_Ev]:
    out = []
    for d in docs:
        at = _t(d.get("time"))
        if at is not None:
            out.append(_Ev(at=at, type=str(d.get("type") or ""), attempt=d.get("attempt"),
                           message=str(d.get("message") or ""), data=d.get("data") or {}))
    return sorted(out, key=lambda e: e.at)


def _checkpoints(events: list[_Ev]) -> list[Doc]:
    return [{"kind": "checkpoint", "at": _iso(e.at), "attempt": e.attempt, "step": e.data.get("step"),
             "label": f"step {e.data['step']}" if e.data.get("step") is not None else "checkpoint",
             "message": e.message} for e in events if e.type == EventType.CHECKPOINT.value]


def _resumed_from(checkpoints: list[Doc], start: datetime) -> Doc | None:
    """The checkpoint a gang started at `start` loads: the newest committed before it (any attempt, B1)."""
    before = [c for c in checkpoints if (at := _t(c["at"])) is not None and at <= start]
    return before[-1] if before else None


Span = tuple[datetime, datetime]


def _subtract(span: Span, holes: list[Span]) -> list[Span]:
    """`span` minus the `holes` (sorted or not), as sorted, non-empty pieces."""
    pieces = [span]
    for h0, h1 in sorted(holes):
        nxt = []
        for a, b in pieces:
            if h1 <= a or h0 >= b:
                nxt.append((a, b))
                continue
            if h0 > a:
                nxt.append((a, h0))
            if h1 < b:
                nxt.append((h1, b))
        pieces = nxt
    return [(a, b) for a, b in pieces if b > a]


def _at_the_stop(mark: Doc, waits: list[Span]) -> Doc:
    """A checkpoint committed while the gang waits for re-admission is the final save of the grace
    period: drawn at the stop, where its work was done, not inside the wait (nothing ran there)."""
    at = _t(mark["at"])
    stop = next((a for a, b in waits if at is not None and a < at < b), None)
    if stop is None or at is None:
        return mark
    late = f"the final save of the grace period, committed {(at - stop).total_seconds():.1f} s after the stop"
    return {**mark, "at": _iso(stop), "committedAt": mark["at"],
            "message": f"{mark['message']}; {late}" if mark.get("message") else late}


def _linked(lanes: list[Doc]) -> list[Doc]:
    """The lanes with each `resumed` mark pointing at where its checkpoint is drawn (a final save drawn
    at its stop), so that the page links the two."""
    drawn = {m["committedAt"]: m["at"] for lane in lanes for m in lane["marks"] if "committedAt" in m}
    if not drawn:
        return lanes
    return [{**lane, "marks": [
        {**m, "checkpoint": {**m["checkpoint"], "at": drawn.get(m["checkpoint"]["at"], m["checkpoint"]["at"])}}
        if m["kind"] == "resumed" else m for m in lane["marks"]]} for lane in lanes]


def _evictions(view: TaskView, events: list[_Ev]) -> list[EvictionView] | list[Doc]:
    """The view's evictions; from the timeline (a preemption until its readmission) for a view without them."""
    evictions = view.get("evictions")
    if isinstance(evictions, list):
        return list(evictions)
    out: list[Doc] = []
    for e in events:
        if e.type in (EventType.PREEMPTED.value, EventType.EVICTED.value):
            kind = EvictionKind.PREEMPTED.value if e.type == EventType.PREEMPTED.value else EvictionKind.OTHER.value
            out.append({"attempt": e.attempt, "kind": kind, "at": _iso(e.at), "readmittedAt": None})
        elif e.type == EventType.READMITTED.value and out and out[-1]["readmittedAt"] is None:
            out[-1]["readmittedAt"] = _iso(e.at)
    return out


def _lane(attempt: AttemptView, view: TaskView, events: list[_Ev], checkpoints: list[Doc], *, now: datetime) -> Doc:
    n = attempt.get("number")
    start = _t(attempt.get("startedAt")) or now
    end = _t(attempt.get("endedAt")) or now
    own = [e for e in events if e.attempt == n]
    admitted = next((e.at for e in own if e.type == EventType.ADMITTED.value), None)
    running_at = _t(attempt.get("runningAt")) or next((e.at for e in own if e.type == EventType.GANG_STARTED.value),
                                                      None)
    segments: list[Doc] = []
    marks: list[Doc] = []

    def segment(kind: str, a: datetime, b: datetime, label: str) -> None:
        if b > a:
            segments.append({"kind": kind, "start": _iso(a), "end": _iso(b), "label": label})

    up_from = running_at
    if up_from is None:  # never fully up: queued, then starting once admitted
        segment("queued", start, admitted or end, "queued for admission")
        if admitted is not None:
            segment("starting", admitted, end, "admitted, workers starting")
    else:
        segment("queued", start, min(admitted or up_from, up_from), "queued for admission")
        if admitted is not None and admitted < up_from:
            segment("starting", admitted, up_from, "admitted, workers starting")

    holes: list[tuple[datetime, datetime]] = []
    waits: list[Span] = []
    for ev in _evictions(view, events):
        if ev.get("attempt") != n:
            continue
        at = _t(ev.get("at"))
        if at is None:
            continue
        back = _t(ev.get("readmittedAt"))
        ended_by_it = back is not None and _t(attempt.get("endedAt")) == back
        if ev.get("kind") == EvictionKind.PREEMPTED.value and not ended_by_it:
            until = back or end
            holes.append((at, until))
            waited = f"waited {(until - at).total_seconds():.1f}s for re-admission"
            segment("waiting", at, until, WAITING_TEXT if back is None else waited)
            waits.append((at, until))
        elif back is not None and ended_by_it:
            holes.append((at, back))
    exited: datetime | None = None
    for e in own:
        if e.type == EventType.WORKER_EXITED.value:
            exited = exited or e.at
        elif e.type == EventType.RESTARTED.value:
            if exited is not None:
                holes.append((exited, e.at))
                segment("restarting", exited, e.at, "whole-gang restart")
            exited = None
            marks.append({"kind": "restarted", "at": _iso(e.at), "label": "gang restarted", "message": e.message})
        elif e.type == EventType.PREEMPTED.value:
            by = e.data.get("preemptor")
            marks.append({"kind": "preempted", "at": _iso(e.at), "by": by,
                          "label": f"preempted by {by}" if by else f"preempted ({e.data.get('detail') or 'Kueue'})",
                          "message": e.message})
        elif e.type == EventType.EVICTED.value:
            marks.append({"kind": "evicted", "at": _iso(e.at), "label": f"evicted: {e.data.get('reason') or 'Kueue'}",
                          "message": e.message})
        elif e.type == EventType.READMITTED.value:
            marks.append({"kind": "readmitted", "at": _iso(e.at), "label": "readmitted", "message": e.message})
        elif e.type == EventType.RESIZED.value:
            marks.append({"kind": "resized", "at": _iso(e.at), "message": e.message,
                          "label": f"{e.data.get('from')} → {e.data.get('to')} nodes"})
    if up_from is not None:
        sizes = _sizes(own)
        for a, b in _subtract((up_from, end), holes):
            for c, d, label in _by_size(a, b, sizes):
                segment("running", c, d, label)

    # Each time the whole gang (re)starts it loads its newest checkpoint: the first start of the attempt,
    # each readmission, each whole-gang restart.
    starts = [up_from] if up_from is not None else []
    starts += [t for m in marks if m["kind"] in ("readmitted", "restarted") and (t := _t(m["at"])) is not None]
    for s in sorted(starts):
        found = _resumed_from(checkpoints, s)
        if found is not None:
            where = "" if found.get("attempt") == n else f" of attempt {found.get('attempt')}"
            marks.append({"kind": "resumed", "at": _iso(s), "label": f"resumed from {found['label']}{where}",
                          "checkpoint": {"at": found["at"], "step": found.get("step"),
                                         "attempt": found.get("attempt")}})
    marks.extend(_at_the_stop(c, waits) for c in checkpoints if c.get("attempt") == n)
    if attempt.get("endedAt"):
        marks.append({"kind": "ended", "at": _iso(end), "label": str(attempt.get("outcome") or "ended"),
                      "message": attempt.get("reason") or ""})

    accounting = _accounting(view)
    lost = []
    for w in (accounting.get("workLost") if accounting else None) or []:
        at, seconds = _t(w.get("at")), float(w.get("seconds") or 0)
        if w.get("attempt") == n and at is not None and seconds > 0:
            lost.append({"start": _iso(at - timedelta(seconds=seconds)), "end": _iso(at), "seconds": seconds,
                         "cause": w.get("cause")})
    segments.sort(key=lambda s: s["start"])
    marks.sort(key=lambda m: m["at"])
    return {"attempt": n, "start": _iso(start), "end": _iso(end), "outcome": attempt.get("outcome"),
            "reason": attempt.get("reason"), "segments": segments, "marks": marks, "lost": lost}


def timeline(view: TaskView, events: list[Doc], *, now: datetime) -> Doc:
    """The chart of one task: a lane per attempt, and the numbers beside it."""
    evs = _events(events)
    checkpoints = _checkpoints(evs)
    lanes = _linked([_lane(a, view, evs, checkpoints, now=now) for a in view.get("attempts") or []])
    submitted = next((e.at for e in evs if e.type == EventType.SUBMITTED.value), None)
    starts = [_t(lane["start"]) for lane in lanes] + ([submitted] if submitted else [])
    ends = [_t(lane["end"]) for lane in lanes]
    start = min((t for t in starts if t is not None), default=now)
    end = max((t for t in ends if t is not None), default=now)
    accounting = _accounting(view)
    return {
        "name": view.get("name"), "phase": view.get("phase"), "reason": view.get("reason"),
        "start": _iso(start), "end": _iso(max(end, start)), "now": _iso(now),
        "lanes": lanes,
        "summary": {
            "goodput": accounting.get("goodput") if accounting else None,
            "preemptions": _preemptions(view),
            "waitingForReadmissionSeconds": view.get("waitingForReadmissionSeconds"),
            "workLostSeconds": accounting.get("workLostSeconds") if accounting else None,
            "queuedSeconds": accounting.get("queuedSeconds") if accounting else None,
            "restoringSeconds": accounting.get("restoringSeconds") if accounting else None,
            "badputSeconds": accounting.get("badputSeconds") if accounting else None,
            "badputCauses": badput.for_json(),  # the page labels the causes from here, in this order
            "stepSeconds": accounting.get("stepSeconds") if accounting else None,
            "grace": accounting.get("grace") if accounting else None,
            "checkpoints": len(checkpoints),
        },
    }
