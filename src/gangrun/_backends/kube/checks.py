"""What `KubeBackend` checks before it submits, so that a task the cluster would never run is refused
then, naming the field: the kubeconfig named is there, the LocalQueue exists, the API server takes the
worker pod (a dry run). A check that cannot be made (forbidden, Kueue not served) lets the submit go on.
"""

from __future__ import annotations

import os
from dataclasses import replace

from gangrun._backends.kube.client import LOCAL_QUEUES, NAMESPACES, PODS, KubeApi
from gangrun._backends.kube.render import REPLICATED_JOB, render_jobset
from gangrun._core.spec import TaskSpec
from gangrun._errors import ApiError, NotFound, SpecError, UsageError


def check_kubeconfig(path: str | None) -> None:
    """Name a kubeconfig that is not there: the client library only says no configuration was found."""
    if path is not None:
        if not os.path.isfile(path):
            raise UsageError(f"--kubeconfig {path}: no such file")
        return
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed and not any(os.path.isfile(p) for p in listed):
        raise UsageError(f"KUBECONFIG: no such file: {os.pathsep.join(listed)}")


def namespace_missing(api: KubeApi, namespace: str) -> bool:
    """Whether the namespace is known not to exist (a user who may not read namespaces gets False)."""
    try:
        api.get(NAMESPACES, None, namespace)
    except NotFound:
        return True
    except ApiError:
        return False
    return False


def check_queue(api: KubeApi, namespace: str, queue_name: str) -> None:
    try:
        api.get(LOCAL_QUEUES, namespace, queue_name)
    except NotFound:
        if namespace_missing(api, namespace):
            raise UsageError(f"namespace {namespace} does not exist (metadata.namespace or -n)") from None
        raise UsageError(f'spec.queue: the Kueue LocalQueue "{queue_name}" does not exist in namespace '
                         f'{namespace}') from None
    except ApiError:
        pass  # forbidden or Kueue not served to us: Kueue itself reports a missing queue later


def check_pod(api: KubeApi, namespace: str, spec: TaskSpec) -> None:
    """Ask the API server to validate one worker pod (a dry run): a podTemplate it would refuse is a
    manifest error now, not a gang that never starts because its Job cannot create pods."""
    if not spec.pod_template:
        return
    if not spec.name:  # generateName: the API server names the task later; any name of that shape will do
        spec = replace(spec, name=f"{spec.generate_name}xxxxx")
    js = render_jobset(spec, attempt=1)
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    name = js["metadata"]["name"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**template["metadata"], "name": f"{name}-{REPLICATED_JOB}-0-0", "namespace": namespace},
           "spec": {**template["spec"], "hostname": f"{name}-{REPLICATED_JOB}-0-0"}}
    try:
        api.create(PODS, namespace, pod, dry_run=True)
    except ApiError as e:
        if e.status in (400, 422):
            raise SpecError("spec.podTemplate", f"the API server refuses the worker pod: {e.message}") from None
        # Forbidden (no right to create pods, or a namespace quota), unreachable: the controller's
        # own create reports it later; a check must not stop a submit the cluster would take.
