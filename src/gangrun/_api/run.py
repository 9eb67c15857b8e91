"""`TaskRun`: a handle on one task of a backend, and `submit` / `attach`, which make one.

A TaskRun holds only the task's name and its backend; every method asks the backend afresh, so
several handles (or a handle and the CLI) see the same task. Nothing here starts an event loop or
a thread that outlives the call, except `watch`, whose log readers end with the task.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gangrun._api import arguments
from gangrun._api.backends import open_backend
from gangrun._api.task import ClusteredTask
from gangrun._backends.base import Backend, SupportsFollow, SupportsPurgeDeleted
from gangrun._core.phases import TERMINAL
from gangrun._core.pod_merge import local_ignored
from gangrun._core.view_types import TaskView
from gangrun._errors import IgnoredLocally, UsageError, WaitTimeout

if TYPE_CHECKING:
    from gangrun._api.watch import Update

POLL = 0.5


class TaskRun:
    """One task on one backend: `status()`, `wait()`, `logs()`, `events()`, `cancel()`, `delete()`."""

    def __init__(self, name: str, backend: Backend, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._name, self._backend = name, backend
        self._clock, self._sleep = clock, sleep

    @property
    def name(self) -> str:
        """The task's name (the generated one when the task was submitted with `generate_name`)."""
        return self._name

    @property
    def backend(self) -> Backend:
        return self._backend

    def status(self) -> TaskView:
        """The task's status: the document `gangrun get NAME -o json` prints."""
        return self._backend.get(self._name)

    def done(self) -> bool:
        """Whether the task has ended (Succeeded, Failed or Aborted)."""
        return self.status()["phase"] in TERMINAL

    def wait(self, timeout: float | None = None) -> TaskView:
        """Block until the task ends and return its final status.

        Raises WaitTimeout (a TimeoutError) after `timeout` seconds; the task goes on running.
        """
        timeout = arguments.seconds(timeout, "timeout")
        deadline = None if timeout is None else self._clock() + timeout
        view = self.status()
        while view["phase"] not in TERMINAL:
            left = None if deadline is None else deadline - self._clock()
            if left is not None and left <= 0:
                raise WaitTimeout(f"task {self._name} is still {view['phase']} after {timeout:g}s "
                                  f"({view['reason']})", view=view)
            view = self._next(view, min(left, 1.0) if left is not None else 1.0)
        return view

    def _next(self, view: TaskView, slice_: float) -> TaskView:
        """The next status: at once when it changes where the backend can say so, else after a short poll."""
        if isinstance(self._backend, SupportsFollow):
            key = (view["attempt"], view["phaseVersion"], view["phase"])
            return self._backend.wait_for_change(self._name, after_version=key, timeout=slice_)
        self._sleep(min(POLL, slice_))
        return self.status()

    def logs(self, rank: int | None = 0, attempt: int | None = None, *, round: int | None = None) -> str:
        """Worker output of `rank` (None: every rank, each line prefixed `[rank N]`) in `attempt` (None: the
        current one), of every round (whole-gang restart) oldest first, or of `round` alone, as one text:
        it costs the text's size in memory (`log_lines` does not)."""
        pieces, piece = [], []  # joined a megabyte at a time: the text once, plus a megabyte
        size = 0
        for line in self.log_lines(rank, attempt, round=round):
            piece.append(line if line.endswith("\n") else line + "\n")
            size += len(line) + 1
            if size >= 1 << 20:
                pieces.append("".join(piece))
                piece, size = [], 0
        pieces.append("".join(piece))
        return "".join(pieces)

    def log_lines(self, rank: int | None = 0, attempt: int | None = None, *, round: int | None = None,
                  follow: bool = False) -> Iterator[str]:
        """The same output line by line, read a chunk at a time (a log of any size costs about one chunk);
        with `follow`, the output so far then new lines as they are written, until the task ends: without
        an `attempt`, from the current attempt on into each next one (a retry, a preemption that ends the
        attempt), as on every backend a gang restart or a readmission inside one attempt is followed into
        its new workers. `round` (a whole-gang restart's number, from 0) cannot go with `follow`."""
        rank = arguments.index(rank, "rank", first=0, none_means="every rank")
        attempt = arguments.index(attempt, "attempt", first=1, none_means="the current attempt")
        round = arguments.index(round, "round", first=0, none_means="every round")
        if follow and round is not None:
            raise UsageError("round= shows one round's output; follow=True follows the attempt from its first "
                             "round on: use one or the other")
        if follow and attempt is None:
            return self._follow_attempts(rank)
        return self._backend.logs(self._name, rank=rank, attempt=attempt, round=round, follow=follow)

    def _follow_attempts(self, rank: int | None) -> Iterator[str]:
        """A backend follows one attempt, until the task ends or moves past it; then the next one."""
        n = int(self.status()["attempt"])
        while True:
            yield from self._backend.logs(self._name, rank=rank, attempt=n, follow=True)
            view = self.status()
            if view["phase"] in TERMINAL and int(view["attempt"]) <= n:
                return
            n = min(n + 1, int(view["attempt"]))

    def events(self) -> list[dict[str, Any]]:
        """The task's timeline, as `gangrun events NAME -o json` prints it."""
        return [e.for_json() for e in self._backend.events(self._name)]

    def cancel(self) -> bool:
        """Stop the task (it ends Aborted). Returns False when it had already ended."""
        return self._backend.cancel(self._name)

    def delete(self, force: bool = False, purge: bool = False) -> bool:
        """Remove the ended task, its timeline and its logs, so that its name can be used again. Its checkpoints
        are kept (only `resume_from` loads them again) unless `purge`. A task still running is refused unless
        `force`, which cancels it first and returns once its workers have stopped."""
        return self._backend.delete(self._name, force=force, purge=purge)

    def watch(self, rank: int | None = 0) -> Iterator[Update]:
        """What `gangrun run` shows, as it happens: timeline events, worker output of `rank` (None: every
        rank) and the status, until the task ends (see `gangrun._api.watch`)."""
        from gangrun._api.watch import watch

        rank = arguments.index(rank, "rank", first=0, none_means="every rank")
        return watch(self._backend, self._name, rank=rank)

    def __repr__(self) -> str:
        return f"TaskRun(name={self._name!r}, backend={getattr(self._backend, 'name', '?')!r})"


def submit(task: ClusteredTask | str | os.PathLike[str], backend: str | Backend | None = None, *,
           namespace: str | None = None, kubeconfig: str | None = None, context: str | None = None,
           home: str | Path | None = None) -> TaskRun:
    """Submit `task` (a ClusteredTask or a manifest file) and return its TaskRun at once.

    `backend` is "local" (the default, or `$GANGRUN_BACKEND`), "kubernetes", or a backend object; the
    keywords pick the cluster (`namespace`, `kubeconfig`, `context`) or the local state (`home`).
    """
    if isinstance(task, (str, os.PathLike)):
        task = ClusteredTask.from_file(task)
    if not isinstance(task, ClusteredTask):
        raise UsageError(f"task: must be a gangrun.ClusteredTask or a manifest file, got {type(task).__name__}")
    be = open_backend(backend, namespace=namespace, kubeconfig=kubeconfig, context=context, home=home)
    run = TaskRun(be.submit(task.spec), be)
    ignored = local_ignored(task.spec.pod_template) if be.name == "local" else []
    if ignored:  # said once, at submit: nothing the user wrote is dropped silently
        warnings.warn(IgnoredLocally(f"{run.name}: the local backend runs processes, not pods, and ignores "
                                     f"{', '.join(ignored)}"), stacklevel=2)
    return run


def attach(name: str, backend: str | Backend | None = None, *, namespace: str | None = None,
           kubeconfig: str | None = None, context: str | None = None,
           home: str | Path | None = None) -> TaskRun:
    """A TaskRun for a task submitted before (by this process, another one, or the CLI). An unknown name is a
    UsageError that lists the known ones."""
    name = arguments.task_name(name)
    be = open_backend(backend, namespace=namespace, kubeconfig=kubeconfig, context=context, home=home)
    be.get(name)
    return TaskRun(name, be)


def purge_checkpoints(name: str, backend: str | Backend | None = None, *, force: bool = False,
                      namespace: str | None = None, kubeconfig: str | None = None, context: str | None = None,
                      home: str | Path | None = None) -> list[str]:
    """Remove the checkpoints that deleted tasks named `name` kept (deleted without `purge`); returns
    where they were. `gangrun delete NAME --purge` of a name no task has.

    A name that no deleted task left checkpoints under is a UsageError, and so is a task that has not
    ended and resumes from them (`spec.checkpoint.resumeFrom`), unless `force`. The Kubernetes backend
    keeps no record of a deleted task, so there the error says where its checkpoints are.
    """
    name = arguments.task_name(name)
    be = open_backend(backend, namespace=namespace, kubeconfig=kubeconfig, context=context, home=home)
    if not isinstance(be, SupportsPurgeDeleted):
        raise UsageError(f'unknown task "{name}": the {be.name} backend keeps no record of a deleted task\'s '
                         f"checkpoints; they stay under <spec.checkpoint.uri>/{name}/, to be removed there")
    return be.purge_deleted(name, force=force)
