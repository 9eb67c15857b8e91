"""The worker side of the task's event timeline.

When the backend sets ``GANGRUN_EVENTS_FILE``, the SDK appends one JSON line to it for each of:

- ``checkpoint_committed``: a committed checkpoint, with when its state was taken (``takenAt``:
  when save() was called), how long the save took (``saveSeconds``, from the call to the commit),
  and whether it was a ``final`` save (made after the stop notice, in the grace period);
- ``first_step``: this process's first training step after its load (or after it started, when it
  loads nothing). A step is a save, a ``ctx.should_stop()`` call or an explicit ``ctx.progress()``;
  the time from the gang's start to it is the gang's restoring time, which is not productive. ``step``
  is the step the caller named then (None if it named none); ``loaded`` whether its load found a
  checkpoint and ``loadedStep`` that checkpoint's step (both absent when the process never loaded);
- ``resume_from``: what rank 0's load found at ``spec.checkpoint.resumeFrom`` (``source``) when the
  task had nothing of its own: the checkpoint it loaded (``uri``, ``step``), or ``uri`` null when
  there was nothing there and the task starts from scratch.

Each line is written with a single ``write`` on an ``O_APPEND`` descriptor, so lines from many ranks
and processes never interleave (a short line is written atomically by the kernel in append mode).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

from gangrun._core import worker_env as wenv

log = logging.getLogger("gangrun")

EVENTS_FILE_ENV = wenv.EVENTS_FILE
COMMITTED, FIRST_STEP, RESUME = wenv.EVENT_COMMITTED, wenv.EVENT_FIRST_STEP, wenv.EVENT_RESUME

_stepped: set[str] = set()  # events files this process has reported its first step (since its load) to
_load: dict[str, Any] = {}  # what this process's newest load found: {"loaded": bool, "loadedStep": int | None}
_step_lock = threading.Lock()


def checkpoint_committed(
    events_file: str | None,
    *,
    task: str | None,
    attempt: int,
    rank: int,
    seq: int,
    step: int | None,
    uri: str,
    taken_at: float | None = None,
    final: bool = False,
    now: float | None = None,
) -> None:
    """Append a ``checkpoint_committed`` line; a failure to record is logged, never raised (the
    checkpoint is committed either way, and a timeline gap must not fail training)."""
    if not events_file:
        return
    t = time.time() if now is None else now
    doc: dict[str, Any] = {"type": COMMITTED, "task": task, "attempt": attempt, "rank": rank, "seq": seq,
                           "step": step, "uri": uri, "time": t}
    if taken_at is not None:
        doc.update(takenAt=taken_at, saveSeconds=round(max(0.0, t - taken_at), 3), final=final)
    _append(events_file, doc)


def resume_result(events_file: str | None, *, task: str | None, attempt: int, rank: int, source: str,
                  uri: str | None, step: int | None = None, now: float | None = None) -> None:
    """Append a ``resume_from`` line: what a load found at resumeFrom `source` (`uri` None: nothing)."""
    if not events_file:
        return
    _append(events_file, {"type": RESUME, "task": task, "attempt": attempt, "rank": rank, "source": source,
                          "uri": uri, "step": step, "time": time.time() if now is None else now})


def loaded(*, found: bool, step: int | None = None) -> None:
    """This process loaded (`found`: a checkpoint of `step`; else it found none and starts afresh): its next
    step is the first one after the load, and its report says what was loaded."""
    with _step_lock:
        _stepped.clear()
        _load.clear()
        _load.update(loaded=found, loadedStep=step if found else None)


def first_step(events_file: str | None, *, task: str | None, attempt: int | None, rank: int,
               step: int | None = None, now: float | None = None) -> None:
    """Report this process's first step after its load, once (cheap on every later call)."""
    if not events_file or events_file in _stepped:
        return
    with _step_lock:
        if events_file in _stepped:
            return
        _stepped.add(events_file)
        load = dict(_load)
    _append(events_file, {"type": FIRST_STEP, "task": task, "attempt": attempt, "rank": rank, "step": step,
                          "time": time.time() if now is None else now, **load})


def _append(events_file: str, doc: dict[str, Any]) -> None:
    line = json.dumps(doc, separators=(",", ":"))
    try:
        fd = os.open(events_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError as e:
        log.warning("gangrun: could not record the %s event in %s: %s", doc["type"], events_file, e)
