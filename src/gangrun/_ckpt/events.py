"""The checkpoint side of the task's event timeline.

When the backend sets ``GANGRUN_EVENTS_FILE``, every commit appends one JSON line to it. The line is
written with a single ``write`` on an ``O_APPEND`` descriptor, so lines from many ranks and processes
never interleave (a short line is written atomically by the kernel in append mode).
"""

from __future__ import annotations

import json
import logging
import os
import time

log = logging.getLogger("gangrun")

EVENTS_FILE_ENV = "GANGRUN_EVENTS_FILE"


def checkpoint_committed(
    events_file: str | None,
    *,
    task: str | None,
    attempt: int,
    rank: int,
    seq: int,
    step: int | None,
    uri: str,
    now: float | None = None,
) -> None:
    """Append a ``checkpoint_committed`` line; a failure to record is logged, never raised (the
    checkpoint is committed either way, and a timeline gap must not fail training)."""
    if not events_file:
        return
    line = json.dumps(
        {
            "type": "checkpoint_committed",
            "task": task,
            "attempt": attempt,
            "rank": rank,
            "seq": seq,
            "step": step,
            "uri": uri,
            "time": time.time() if now is None else now,
        },
        separators=(",", ":"),
    )
    try:
        fd = os.open(events_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError as e:
        log.warning("gangrun: could not record the checkpoint event in %s: %s", events_file, e)
