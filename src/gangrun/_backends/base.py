"""What every backend offers the CLI: a small required Protocol, checked once per backend in tests.

Each backend keeps one `TaskState` per task (the ClusteredTask status, or a SQLite row), feeds the
lifecycle engine (`gangrun._core.engine.decide`) with its observations and carries out the action.
The public Python API (`gangrun.submit`, `gangrun.TaskRun`) and through it the CLI only speak this
Protocol, so `get`, `describe`, `events`, `logs`, `cancel` and `delete` read the same on both backends.
"""

from __future__ import annotations

import builtins  # the `list` method shadows the builtin inside the class body
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from gangrun._core.spec import TaskSpec
from gangrun._core.timeline import Event
from gangrun._core.view_types import ListedView, TaskView


@runtime_checkable
class Backend(Protocol):
    name: str

    def submit(self, spec: TaskSpec) -> str:
        """Store the task and start driving it. Returns its name, made from `spec.generate_name` when the
        spec has no name. Refuses a bad queue or a duplicate name."""
        ...

    def get(self, name: str) -> TaskView:
        """The task's view (`gangrun._core.view_types.TaskView`). Raises UsageError for an unknown task, and
        for a task whose stored record no longer reads."""
        ...

    def list(self) -> list[ListedView]:
        """Every task's view; a backend that keeps records of its own lists one that no longer reads as an
        `UnreadableView` (never leaves it out)."""
        ...

    def events(self, name: str) -> builtins.list[Event]:
        ...

    def logs(self, name: str, *, rank: int | None = None, attempt: int | None = None, round: int | None = None,
             follow: bool = False) -> Iterator[str]:
        """Worker output lines of one attempt (None: the current one), prefixed by rank when several ranks
        are shown: of every round (whole-gang restart) the backend still has, oldest first, or of `round`
        alone (a UsageError with `follow`). With `follow`, new lines as they are written, across the
        attempt's gang restarts and readmissions, until the task ends or moves to a later attempt
        (`TaskRun.log_lines` goes on there)."""
        ...

    def cancel(self, name: str) -> bool:
        """Abort the task. Returns whether anything changed (False when it had already ended)."""
        ...

    def delete(self, name: str, *, force: bool = False, purge: bool = False) -> bool:
        """Remove an ended task and its records (timeline, logs), so that its name can be used again.
        Its checkpoints are kept unless `purge`; no other task loads them except by
        `spec.checkpoint.resumeFrom`.

        A task that has not ended is refused with a UsageError unless `force`, which cancels it first.
        Returns whether a task was removed; an unknown task is a UsageError.
        """
        ...


@runtime_checkable
class SupportsFollow(Protocol):
    def wait_for_change(self, name: str, *, after_version: tuple[int, int, str], timeout: float) -> TaskView:
        """Block until the task's (attempt, phaseVersion, phase) differs from `after_version`, or timeout."""
        ...


@runtime_checkable
class SupportsPurgeDeleted(Protocol):
    def purge_deleted(self, name: str, *, force: bool = False) -> builtins.list[str]:
        """Remove the checkpoints that deleted tasks of `name` kept (`delete` without `purge`); returns
        where they were. A name no deleted task left checkpoints under is a UsageError, as is a live task
        that resumes from them unless `force`."""
        ...


@runtime_checkable
class SupportsLogTail(Protocol):
    def log_tail(self, name: str, *, rank: int | None = None, attempt: int | None = None, max_lines: int,
                 max_bytes: int) -> tuple[builtins.list[str], bool]:
        """The newest lines of `logs(...)`, read without the older ones (at most `max_bytes`), and whether
        older lines were left out."""
        ...
