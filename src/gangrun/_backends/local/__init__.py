"""The local backend: an embedded control plane with Kueue's admission and JobSet's gang semantics.

`LocalBackend` (client.py) is the whole public surface; see docs/local-backend.md for the design.

    client.py      LocalBackend: the Backend protocol, up/down/status, evict/deactivate/activate
    protocol.py    JSON-lines RPC over the daemon's Unix socket
    daemon.py      the single-threaded process: selector, pidfds, timers
    controller.py  tasks in memory, operations, the admission cycle, recovery
    reconcile.py   one task: twins move, engine decides, one write, one action
    admission.py   pure Kueue-like admission and preemption
    workload.py    the Workload twin and Kueue's condition write order
    gang.py        the JobSet twin: process gangs, restarts, suspension
    launcher.py    starting and killing workers so none is orphaned
    store.py       SQLite
    tasks.py       a task in memory, its view and its accounting
    config.py      files under GANGRUN_HOME, quota, queues, priority classes
"""

from gangrun._backends.local.client import LocalBackend

__all__ = ["LocalBackend"]
