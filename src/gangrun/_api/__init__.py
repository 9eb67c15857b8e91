"""The launching API: build or read a task, submit it to a backend, follow and manage the run.

    task.py      ClusteredTask: a validated manifest, from keywords or a file
    backends.py  which backend a call means ("local", "kubernetes", $GANGRUN_BACKEND or an instance)
    run.py       TaskRun, submit, attach: status, wait, logs, events, cancel, delete; purge_checkpoints
    watch.py     what `gangrun run` shows: timeline events and worker output, interleaved
    arguments.py the API's own arguments (not the manifest's), each checked once at the call

Every call is synchronous and starts no event loop, so it works the same from a script, a thread or a
Jupyter notebook (whose own loop is already running). `gangrun/__init__.py` re-exports the public names;
the CLI is a thin layer over this package.
"""

from gangrun._api.backends import open_backend
from gangrun._api.run import TaskRun, attach, purge_checkpoints, submit
from gangrun._api.task import ClusteredTask

__all__ = ["ClusteredTask", "TaskRun", "attach", "open_backend", "purge_checkpoints", "submit"]
