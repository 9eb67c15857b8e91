"""Carrying out what the gang twin asks for: start a round of workers, signal them, write the stop notice.

The twin decides (`gang.py` returns `Effect`s); `Effects.apply` does, through the small `Processes`
interface the daemon implements with real processes and pidfds. It also reads the SDK's events file
of a running gang (`read_checkpoints`: commits and first steps), the other file the workers and the
daemon share.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from gangrun._backends.clock import utc
from gangrun._backends.local.config import Paths
from gangrun._backends.local.gang import Effect, GangTwin, Signal, StartRound, Worker, WriteNotice
from gangrun._backends.local.render import Launch, launch, worker_env
from gangrun._backends.local.task import LocalTask
from gangrun._ckpt.storage import remove_checkpoints
from gangrun._core import worker_env as wenv
from gangrun._core import worker_reports
from gangrun._core.timeline import Event, EventType
from gangrun._core.worker_env import new_start

log = logging.getLogger(__name__)


class Processes(Protocol):
    """How workers are started and signalled (the daemon: real processes watched by pidfds)."""

    def start(self, gang: GangTwin, worker: Worker, launch: Launch, env: dict[str, str]) -> tuple[int, int]:
        """Start one worker. Returns (pid, start time). Raises OSError when it cannot start."""
        ...

    def signal(self, pgids: Iterable[int], sig: int) -> None: ...

    def free_port(self) -> int: ...


class Effects:
    def __init__(self, paths: Paths, processes: Processes) -> None:
        self.paths, self.procs = paths, processes

    def apply(self, task: LocalTask, effects: list[Effect], now: datetime) -> None:
        for eff in effects:
            if isinstance(eff, StartRound):
                self._start_round(task, now)
            elif isinstance(eff, Signal):
                self.procs.signal(eff.pgids, eff.signal)
            elif isinstance(eff, WriteNotice):
                self._write_notice(task, eff)

    def _start_round(self, task: LocalTask, now: datetime) -> None:
        g = task.gang
        assert g is not None, "a StartRound comes from a gang"
        run = self.paths.run(task.name, task.uid, g.attempt)
        run.mkdir(parents=True, exist_ok=True)  # the SDK appends checkpoint events here
        (run / "stop.json").unlink(missing_ok=True)
        wl = task.workload
        spec = launch(task.name, task.uid, task.spec.at_size(g.nodes), g.attempt, cwd=task.doc.get("cwd") or "",
                      paths=self.paths, submitter_env=task.doc.get("env"), executable=task.doc.get("executable"),
                      gpus=wl.gpus if wl is not None and wl.attempt == g.attempt else ())
        g.port = self.procs.free_port()
        start = new_start()  # one id for this round's workers: they all resume from one checkpoint
        started: dict[int, tuple[int, int]] = {}
        cannot = ""
        for w in g.workers:
            try:
                started[w.rank] = self.procs.start(g, w, spec, worker_env(spec, g, w, start=start))
            except OSError as e:  # the command cannot be started at all: a worker that can never start
                cannot = f"rank {w.rank} cannot start {spec.argv[0]!r}: {e.strerror or e}"
                break
            task.record(Event(time=now, type=EventType.WORKER_READY, attempt=g.attempt,
                              message=f"worker rank {w.rank} (node {w.node}) running, pid {started[w.rank][0]}",
                              data={"rank": w.rank, "pid": started[w.rank][0], "restart": g.restarts}))
        if not cannot:  # a readmitted gang is up again from here (the accounting waits for it)
            task.record(Event(time=now, type=EventType.WORKERS_RUNNING, attempt=g.attempt, data={"at": now.isoformat()},
                              message=f"every worker of round {g.restarts} running"))
        self.apply(task, g.round_started(g.port, started, cannot_start=cannot, grace=task.spec.termination_grace,
                                         now=now), now)

    def _write_notice(self, task: LocalTask, n: WriteNotice) -> None:
        """The stop notice (B3), written atomically before the workers get SIGTERM."""
        g = task.gang
        run = self.paths.run(task.name, task.uid, g.attempt if g else task.state.attempt)
        run.mkdir(parents=True, exist_ok=True)
        tmp = run / f".stop.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"cause": n.cause, "message": n.message, "deadline": n.deadline.timestamp()}))
        os.replace(tmp, run / "stop.json")

    def read_checkpoints(self, task: LocalTask, now: datetime) -> None:
        """Turn the SDK's new lines of the gang's attempt (commits, first steps) into timeline events."""
        g = task.gang
        if g is None:
            return
        f = self.paths.run(task.name, task.uid, g.attempt) / "events.jsonl"
        try:
            size = f.stat().st_size
        except OSError:
            return
        if size <= g.events_offset:
            return
        with open(f, "rb") as fh:
            fh.seek(g.events_offset)
            data = fh.read(size - g.events_offset)
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        if end == 0:
            return
        g.events_offset += end
        g.touch()
        for line in data[:end].splitlines():
            e = _checkpoint_event(task, line, attempt=g.attempt, now=now)
            if e is not None:
                task.record(e)


def remove_files(paths: Paths, task: LocalTask) -> None:
    """A deleted task's logs and run files; with `purging`, its checkpoints too. Best effort: the task is
    gone from the store already, and what stays behind is keyed by its identity, which no other task has."""
    for d in (paths.logs(task.name, task.uid), paths.run(task.name, task.uid)):
        shutil.rmtree(d, ignore_errors=True)
    if task.purging:
        root = paths.checkpoint_root(task.name, task.uid, task.spec.checkpoint_uri)
        try:
            remove_checkpoints(root)
        except Exception as e:  # storage unreachable, say: say so in the daemon's log, never fail the delete
            log.warning("gangrun: could not remove the checkpoints of deleted task %s at %s: %s", task.name, root, e)


_LINES = (wenv.EVENT_COMMITTED, wenv.EVENT_FIRST_STEP, wenv.EVENT_RESUME)


def _checkpoint_event(task: LocalTask, line: bytes, *, attempt: int, now: datetime) -> Event | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("type") not in _LINES:
        return None
    at = _time(doc.get("time"), now)
    attempt = doc.get("attempt", attempt)
    if doc["type"] == wenv.EVENT_RESUME:
        return worker_reports.resume_event(doc, attempt=attempt, at=at, now=now)
    if doc["type"] == wenv.EVENT_FIRST_STEP:
        return worker_reports.first_step(task.acct, doc, attempt=attempt, at=at, now=now)[0]
    taken = "takenAt" in doc
    return worker_reports.commit_event(
        attempt=attempt, rank=doc.get("rank", 0), step=doc.get("step"), seq=doc.get("seq"), uri=doc.get("uri"),
        committed_at=at, now=now, taken_at=_time(doc["takenAt"], now) if taken else None,
        save_seconds=doc.get("saveSeconds") if taken else None, final=doc.get("final") is True)


def _time(v: Any, now: datetime) -> datetime:
    """A worker's unix time, never later than `now` (a worker's clock is the daemon's, but rounding)."""
    try:
        return min(utc(float(v)), now)
    except (TypeError, ValueError, OverflowError, OSError):
        return now
