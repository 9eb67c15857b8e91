"""The Kubernetes backend: a ClusteredTask controller on JobSet + Kueue (see docs/kubernetes.md).

The lifecycle and its I/O shell:

    reconcile.py    one reconcile: objects -> status + actions (pure), on the core's lifecycle step
    adapter.py      objects -> Observation, and the workers' reports (pure)
    render.py       TaskSpec + attempt -> the JobSet (pure); hardening.py the worker pod's security defaults
    controller.py   informers -> work queue -> sync (the I/O shell); runner.py `gangrun controller`
    indexes.py      the informer indexes a sync reads through; informer.py list + watch into a cache
    workqueue.py    keyed queue, backoff, timers; leader.py Lease leader election
    client.py       thin REST client, errors by status; permissions.py the calls the controller may make
    crd.py          the CRD, generated; events.py timeline <-> Kubernetes Events; metrics.py Prometheus

What a task needs beyond its JobSet:

    create.py       creating a task exactly once, however often the create is retried
    durable.py      checkpoints that survive a pod, or a refusal at submit
    dependents.py   which tasks still resume from a checkpoint root (delete --purge)
    elastic.py      an elastic gang's size; queues.py and quota.py what Kueue has free for it
    boost.py        checkpoint-aware preemption: each gang's Workload annotated with its boost
    live_reports.py running workers' checkpoints, polled from each gang's first worker
    preemptor.py    who preempted a gang, named on its timeline
    pending.py      why a gang waits: Kueue's message and the queue position
    logkeep.py      each ended worker pod's log read once into kept_output.py, a ConfigMap per task
    logfollow.py    `gangrun logs -f`: an attempt's worker pods, each round's as they come
    backend.py      KubeBackend: the CLI's Backend on a cluster

Only `client.py` imports the `kubernetes` package, lazily, so `render` works without it.
"""

from gangrun._backends.kube.backend import KubeBackend
from gangrun._backends.kube.render import jobset_name, render_jobset
from gangrun._backends.kube.runner import run_controller

__all__ = ["KubeBackend", "jobset_name", "render_jobset", "run_controller"]
