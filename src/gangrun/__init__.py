"""gangrun: preemption-tolerant multi-node training gangs.

Launching (scripts, notebooks):

    task = gangrun.ClusteredTask.from_file("train.yaml")    # or ClusteredTask(name=..., nodes=2, command=[...])
    run = gangrun.submit(task, backend="local")             # -> TaskRun: status, wait, logs, events, cancel, delete
    gangrun.attach("train")                                 # a TaskRun for a task that exists
    gangrun.purge_checkpoints("train")                      # what deleted tasks of that name kept

Inside a worker: `gangrun.context()` (rank, world size, attempt) and its `checkpoint`.
"""

import typing as _typing

from gangrun._errors import BackendError, GangrunError, SpecError, UsageError, WaitTimeout
from gangrun._worker.context import Context, context
from gangrun.checkpoint import Checkpoint

if _typing.TYPE_CHECKING:
    from gangrun._api import ClusteredTask, TaskRun, attach, purge_checkpoints, submit

__all__ = [
    "BackendError",
    "Checkpoint",
    "ClusteredTask",
    "Context",
    "GangrunError",
    "SpecError",
    "TaskRun",
    "UsageError",
    "WaitTimeout",
    "attach",
    "context",
    "purge_checkpoints",
    "submit",
]

# The launching API is imported on first use: a worker process only needs `context()`, and every
# worker of every gang imports gangrun at start.
_LAZY = {"ClusteredTask", "TaskRun", "attach", "purge_checkpoints", "submit"}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        import gangrun._api

        value = getattr(gangrun._api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gangrun' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
