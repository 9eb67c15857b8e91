"""What `gangrun run` shows while a task runs: its timeline and its workers' output, interleaved.

`watch(backend, name, rank=...)` yields, until the task ends:

- `EventUpdate`: each new timeline event, once, in order;
- `LogLine`: each line of worker output of `rank` (None: every rank), as it is written, across the
  task's attempts, gang restarts and readmissions;
- `StatusUpdate`: the task's status, about twice a second, for a live status line (why it waits:
  `pending`, `queuePosition` and `reason`).

Worker output is read by one thread per attempt (the backend's `logs(follow=True)`), each ending
when the task ends or moves past its attempt; timeline and status are polled from the calling thread.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from gangrun._backends.base import Backend
from gangrun._core.phases import TERMINAL
from gangrun._core.timeline import Event
from gangrun._core.view_types import TaskView
from gangrun._errors import GangrunError, UsageError

POLL = 0.5
DRAIN_TIMEOUT = 10.0  # after the end, how long the log readers get to hand over their last lines
_RANKED = re.compile(r"^\[rank (\d+)\] (.*)$", re.DOTALL)


@dataclass(frozen=True)
class EventUpdate:
    event: Event


@dataclass(frozen=True)
class LogLine:
    rank: int | None  # None: the backend did not say (a note about the logs themselves)
    text: str
    attempt: int


@dataclass(frozen=True)
class StatusUpdate:
    view: TaskView


Update = EventUpdate | LogLine | StatusUpdate


def world_size(view: TaskView) -> int | None:
    if world := view.get("worldSize"):
        return int(world)
    if nodes := view.get("nodes"):
        return int(nodes) * int(view.get("nprocPerNode") or 1)
    return None


def watch(backend: Backend, name: str, *, rank: int | None = 0, poll: float = POLL) -> Iterator[Update]:
    view = backend.get(name)
    world = world_size(view)
    if rank is not None and world is not None and not 0 <= rank < world:
        raise UsageError(f'task "{name}" has ranks 0..{world - 1}, not {rank}')
    lines: queue.Queue[LogLine] = queue.Queue()
    stop = threading.Event()
    readers: dict[int, threading.Thread] = {}

    def read(attempt: int) -> None:
        try:
            for raw in backend.logs(name, rank=rank, attempt=attempt, follow=True):
                if stop.is_set():
                    return
                found = _RANKED.match(raw) if rank is None else None
                lines.put(LogLine(rank=int(found.group(1)) if found else (rank if rank is not None else 0),
                                  text=found.group(2) if found else raw, attempt=attempt))
        except GangrunError as e:  # the run goes on without this attempt's output; say why once
            lines.put(LogLine(rank=None, text=f"no worker output for attempt {attempt}: {e}", attempt=attempt))

    seen = 0
    try:
        while True:
            attempt = int(view["attempt"])
            if attempt not in readers:
                readers[attempt] = threading.Thread(target=read, args=(attempt,), daemon=True,
                                                    name=f"gangrun-logs-{name}-{attempt}")
                readers[attempt].start()
            events = backend.events(name)
            for e in events[seen:]:
                yield EventUpdate(e)
            seen = len(events)
            ended = view["phase"] in TERMINAL
            if ended:
                for t in readers.values():
                    t.join(DRAIN_TIMEOUT)
            yield from _drain(lines, wait=0 if ended else poll)
            yield StatusUpdate(view)
            if ended:
                return
            view = backend.get(name)
    finally:
        stop.set()


def _drain(lines: queue.Queue[LogLine], *, wait: float) -> Iterator[LogLine]:
    """The lines there are, waiting up to `wait` seconds for the first one."""
    try:
        yield lines.get(timeout=wait) if wait > 0 else lines.get_nowait()
    except queue.Empty:
        return
    while True:
        try:
            yield lines.get_nowait()
        except queue.Empty:
            return
