"""The Kubernetes backend: a ClusteredTask controller on JobSet + Kueue (see docs/kubernetes.md).

The lifecycle and its I/O shell:

    reconcile.py    one reconcile: objects -> status + actions (pure), on the core's lifecycle step
    stored.py       a task's typed spec, and the state and accounting its status stores
    status.py       the status a reconcile writes: state, accounting, conditions
    seen_events.py  what the controller saw itself (workers' reports, admission, ...) as timeline events
    adapter.py      objects -> Observation (pure); reports.py the workers' reports read from their pods
    fields.py       total readers of API objects as dicts; nodes.py a worker's node about to go (B9)
    render.py       TaskSpec + attempt -> the JobSet (pure); hardening.py the worker pod's security defaults
    controller.py   informers -> work queue -> sync (the I/O shell); runner.py `gangrun controller`
    tombstones.py   deleted pods kept until the status holds their news
    stop_notices.py the stop notices written onto pods, before any delete
    indexes.py      the informer indexes a sync reads through; informer.py list + watch into a cache
    workqueue.py    keyed queue, backoff, timers; leader.py Lease leader election
    client.py       thin REST client, errors by status; permissions.py the calls the controller may make
    crd.py          the CRD, generated; events.py timeline <-> Kubernetes Events; metrics.py Prometheus

What a task needs beyond its JobSet:

    create.py       creating a task exactly once, however often the create is retried
    durable.py      checkpoints that survive a pod, or a refusal at submit
    dependents.py   which tasks still resume from a checkpoint root (delete --purge)
    elastic.py      an elastic gang's size; queues.py and quota.py what Kueue has free for it
    boost.py        checkpoint-aware preemption: each gang's Workload annotated with its boost, kept by a sync
    live_reports.py running workers' checkpoints, polled from each gang's first worker
    preemptor.py    who preempted a gang, named on its timeline
    pending.py      why a gang waits: Kueue's message and the queue position
    logkeep.py      each ended worker pod's log read once into kept_output.py, a ConfigMap per task
    worker_logs.py  `gangrun logs`: kept output, then the pods still there; logfollow.py `-f`, each round's
                    pods as they come
    backend.py      KubeBackend: the CLI's Backend on a cluster; checks.py what a submit checks first

Only `client.py` imports the `kubernetes` package, lazily, so `render` works without it.
"""

from gangrun._backends.kube.backend import KubeBackend
from gangrun._backends.kube.render import jobset_name, render_jobset
from gangrun._backends.kube.runner import run_controller

__all__ = ["KubeBackend", "jobset_name", "render_jobset", "run_controller"]
