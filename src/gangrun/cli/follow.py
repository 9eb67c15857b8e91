"""`gangrun run`: follow a task until it ends, printing its timeline and a live status line."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from gangrun._backends.base import Backend, SupportsFollow
from gangrun.cli import output

TERMINAL = {"Succeeded", "Failed", "Aborted"}
POLL = 0.5


def follow_task(be: Backend, name: str, *, quiet: bool = False,
                stream: TextIO | None = None) -> dict[str, Any]:
    """Print each new timeline event, and on a terminal the live phase line; return the final view."""
    out = stream or sys.stdout
    live = out.isatty() and not quiet
    started = time.monotonic()
    seen = 0
    view = be.get(name)
    while True:
        events = be.events(name)
        if not quiet:
            if live:
                out.write("\r\033[K")
            for e in events[seen:]:
                out.write(output.event_line(e) + "\n")
            if live:
                elapsed = int(time.monotonic() - started)
                out.write(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {view['phase']}  attempt {view['attempt']}  "
                          f"{output.shorten_reason(view['reason'], 100)}")
            out.flush()
        seen = len(events)
        if view["phase"] in TERMINAL:
            break
        view = _next_view(be, name, view)
    if not quiet:
        out.write(("\n" if live else "") + f"{name}: {view['phase']} — {view['reason']}\n")
        out.flush()
    return view


def _next_view(be: Backend, name: str, view: dict[str, Any]) -> dict[str, Any]:
    if isinstance(be, SupportsFollow):
        key = (view["attempt"], view["phaseVersion"], view["phase"])
        return be.wait_for_change(name, after_version=key, timeout=1.0)
    time.sleep(POLL)
    return be.get(name)
