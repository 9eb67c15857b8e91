"""The local backend: an embedded control plane with Kueue's admission and JobSet's gang semantics.

`LocalBackend` (backend.py) is the whole public surface; see docs/local-backend.md for the design.
The modules mirror the Kubernetes backend's: the same concept has the same name in both.

    backend.py     LocalBackend: the Backend protocol, up/down/status, evict/deactivate/activate
    protocol.py    JSON-lines RPC over the daemon's Unix socket (the API client's counterpart)
    daemon.py      the single-threaded process: selector, pidfds, timers, the one clock
    metrics_http.py  the daemon's Prometheus endpoint, in its selector
    controller.py  the shell: tasks in memory, rounds of jobs → reconcile → store → act → admission
    operations.py  what a client asks of the controller (submit, cancel, delete, evict, ...) and worker exits
    reads.py       what a client reads of it: views, the queue's status, metrics
    shutdown.py    `local down`: stop every gang, kill at the deadline, store the gangs as lost
    reconcile.py   pure: one task and its twins → new state + actions (CreateJobSet, DeleteJobSet, ...)
    adapter.py     the twins as the engine's Observation
    render.py      what the workers of an attempt are started with
    task.py        a task in memory (state, accounting, twins) and its view
    admission.py   pure Kueue-like admission and preemption
    jobs.py        Kueue's job reconciler on the twins: suspend, release, resume, finish
    workload.py    the Workload twin and Kueue's condition write order
    gang.py        the JobSet twin: gangs of processes, restarts, suspension, node loss
    gang_storage.py  the JobSet twin's stored form in a task's row
    effects.py     carrying out what the gang twin asks: start a round, signal, write the stop notice;
                   the SDK's lines of a running attempt read into its timeline
    scheduler.py   Kueue's scheduling cycle on the twins: who holds quota, who waits
    status.py      what the control plane tells about its queue: places, `local status`, why a gang waits
    inject.py      evictions injected on purpose (`gangrun local evict`, B6)
    recovery.py    a daemon starting on the state an earlier one left
    resume_check.py  a spec.checkpoint.resumeFrom known at submit to find nothing is refused
    purge.py       `delete --purge`: who still resumes from a task, what deleted tasks left
    logfiles.py    worker log files read in bounded chunks, and their newest lines
    launcher.py    starting and killing workers so none is orphaned
    orphans.py     ending what workers started in other sessions (a mark, the daemon as subreaper)
    store.py       SQLite
    config.py      files under GANGRUN_HOME, quota, queues, priority classes
"""

from gangrun._backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
