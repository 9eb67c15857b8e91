"""The Kubernetes backend: a ClusteredTask controller on JobSet + Kueue (see docs/kubernetes.md).

    render.py     TaskSpec + attempt → the JobSet (pure)          adapter.py   objects → Observation (pure)
    reconcile.py  one reconcile: objects → status + actions (pure) crd.py       the CRD, generated
    controller.py informers → work queue → sync (the I/O shell)   runner.py    `gangrun controller`
    client.py     thin REST client, errors by status               informer.py  list + watch into a cache
    workqueue.py  keyed queue, backoff, timers                     leader.py    Lease leader election
    events.py     timeline ↔ Kubernetes Events                     metrics.py   Prometheus text + probes
    backend.py    KubeBackend: the CLI's Backend on a cluster

Only `client.py` imports the `kubernetes` package, lazily, so `render` works without it.
"""

from gangrun._backends.kube.backend import KubeBackend
from gangrun._backends.kube.render import jobset_name, render_jobset
from gangrun._backends.kube.runner import run_controller

__all__ = ["KubeBackend", "jobset_name", "render_jobset", "run_controller"]
