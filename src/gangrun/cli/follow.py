"""`gangrun run`: print a task's timeline and its workers' output as they happen, with a live status line.

Every line says where it comes from: `[gangrun]` for the timeline, `[rank N]` for worker output. On a
terminal the last line is a status line, redrawn in place, that says why the task waits while it does
(Kueue's pending message, its place in the queue); elsewhere a line is printed when that changes.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from gangrun._api.run import TaskRun
from gangrun._api.watch import EventUpdate, LogLine, StatusUpdate
from gangrun._core import phases
from gangrun._core.view_types import TaskView
from gangrun.cli import output

TERMINAL = phases.TERMINAL  # a view's phase is the phase's string value; they compare equal


def follow_run(run: TaskRun, *, rank: int | None = 0, stream: TextIO | None = None) -> TaskView:
    """Print what `run.watch(rank)` yields until the task ends; return the final status."""
    out = stream or sys.stdout
    live = out.isatty()
    started = time.monotonic()
    view: TaskView | None = None
    shown_why = ""
    drawn = False

    def say(line: str) -> None:
        nonlocal drawn
        out.write(("\r\033[K" if drawn else "") + line + "\n")
        drawn = False

    for update in run.watch(rank=rank):
        if isinstance(update, EventUpdate):
            say(output.prefixed(output.TIMELINE, output.event_line(update.event)))
        elif isinstance(update, LogLine):
            source = output.TIMELINE if update.rank is None else f"[rank {update.rank}]"
            say(output.prefixed(source, update.text))
        elif isinstance(update, StatusUpdate):
            view = update.view
            if live and view["phase"] not in TERMINAL:
                out.write("\r\033[K" + output.status_line(view, elapsed=time.monotonic() - started, width=_width(out)))
                drawn = True
            elif not live:
                why = output.waiting_why(view)
                if why and why != shown_why:
                    say(output.prefixed(output.TIMELINE, f"waiting: {why}"))
                shown_why = why
        out.flush()
    assert view is not None, "watch yields the status before it ends"
    say(f"{run.name}: {view['phase']} — {view['reason']}")
    out.flush()
    return view


def _width(out: TextIO) -> int:
    try:
        import shutil

        return shutil.get_terminal_size((120, 24)).columns - 1
    except (OSError, ValueError):
        return 119
