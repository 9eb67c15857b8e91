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

if _typing.TYPE_CHECKING:
    from gangrun._api import ClusteredTask, TaskRun, attach, purge_checkpoints, submit
    from gangrun._worker.context import Context, context
    from gangrun.checkpoint import Checkpoint

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

# Everything but the errors is imported on first use. A worker process only needs `context()` (never
# the launching API), and every process that starts from inside the package pays `import gangrun`
# first: every pod's launcher (`python -m gangrun.launch`), which needs neither. Import budget: `import
# gangrun` loads no gangrun module but the errors (tests/test_import_budget.py).
_LAZY = {"ClusteredTask": "gangrun._api", "TaskRun": "gangrun._api", "attach": "gangrun._api",
         "purge_checkpoints": "gangrun._api", "submit": "gangrun._api", "Context": "gangrun._worker.context",
         "context": "gangrun._worker.context", "Checkpoint": "gangrun.checkpoint"}


def __getattr__(name: str) -> _typing.Any:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name == "checkpoint":  # `import gangrun; gangrun.checkpoint.X`, as when `import gangrun` loaded it
        return importlib.import_module("gangrun.checkpoint")
    raise AttributeError(f"module 'gangrun' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
