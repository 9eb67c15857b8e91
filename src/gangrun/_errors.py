"""Every error gangrun raises, in one tree.

    GangrunError                      base; the CLI prints "gangrun: error: <message>" and exits 2,
                                      or 3 for a BackendError (the backend failed, not the user)
    ├── SpecError                     a manifest is invalid; the message names the field
    ├── UsageError                    a command was called wrongly (unknown task, unknown queue, ...)
    │   └── WorkerEnvError(name)      a worker environment variable is malformed; names the variable
    ├── WaitTimeout                   `TaskRun.wait(timeout=...)` ran out; also a built-in TimeoutError
    ├── BackendError                  a backend could not do what was asked
    │   ├── ApiError(status)          the Kubernetes API answered with an error status
    │   │   ├── NotFound              404
    │   │   ├── Conflict              409 (optimistic concurrency lost)
    │   │   └── TooManyRequests       429
    │   └── DaemonUnavailable         the local control plane cannot be reached or started
    └── CheckpointError               a checkpoint could not be read or written
        └── CommitFailed              a save did not commit (the background writer's error, raised once)

    IgnoredLocally (a UserWarning)    a manifest field only a cluster applies was ignored by a local run

User mistakes (SpecError, UsageError) are reported without a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping


class GangrunError(Exception):
    """Base class of every error gangrun raises on purpose."""


class SpecError(GangrunError):
    """A manifest is invalid. `field` is the dotted path of the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


class UsageError(GangrunError):
    """A command or call was used wrongly: unknown task, unknown queue, bad flag value."""


class WorkerEnvError(UsageError):
    """A gangrun worker environment variable is malformed. `name` is the variable."""

    def __init__(self, name: str, problem: str) -> None:
        self.name = name
        super().__init__(f"{name}: {problem}")


class WaitTimeout(GangrunError, TimeoutError):
    """A wait for a task ran out of time; the task goes on. `view` is its last status."""

    def __init__(self, message: str, *, view: Mapping[str, object] | None = None) -> None:
        self.view = view or {}
        super().__init__(message)


class BackendError(GangrunError):
    """A backend could not carry out a request."""


class ApiError(BackendError):
    """The Kubernetes API server answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message  # without the status, for a caller that rewords it
        # Status 0 means no answer at all (connection refused, timeout, TLS): no HTTP status to show.
        super().__init__(f"{message} (HTTP {status})" if status else message)


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class TooManyRequests(ApiError):
    pass


class DaemonUnavailable(BackendError):
    """The local control plane cannot be reached or started."""


class CheckpointError(GangrunError):
    """A checkpoint could not be read or written."""


class CommitFailed(CheckpointError):
    """A save did not commit; raised once, by the next call that waits for it."""


class IgnoredLocally(UserWarning):
    """A manifest field that only a cluster can apply (most of spec.podTemplate) was ignored locally."""
