"""The JobSet of one attempt: a pure function of the spec and the attempt number.

`render_jobset(spec, attempt=N)` is what `gangrun render FILE --attempt N` prints and what the
controller creates. Rules that shape it (reference kueue-jobset.md §3.3–§3.4, §7, control-plane.md §4.3):

* the name is deterministic per (task, attempt) and at most 41 characters, so that the longest pod
  hostname `<jobset>-workers-0-<index>` stays a DNS label; a hash keeps truncated names unique;
* `spec.suspend: true` at creation, so a gang never starts before Kueue admits it even when Kueue's
  webhook is not installed;
* every field JobSet's defaulting webhook would set is written out, so the object is the same with or
  without the webhook and the JobSet controller never dereferences a nil;
* a failurePolicy is always present (one failed Job must not fail the whole JobSet during an
  eviction window, jobset#1117), and `podReplacementPolicy: Failed` keeps a readmitted gang from
  overlapping the old one while it still checkpoints.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

from gangrun._backends.kube import crd
from gangrun._core import jobset, kueue
from gangrun._core.spec import TaskSpec
from gangrun._errors import SpecError

NAME_MAX = 41  # 63 - len("-workers-0-99999-abcde"), as Flyte bounds it
REPLICATED_JOB = "workers"
CONTAINER = "worker"
MASTER_PORT = 29500
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_CHECKPOINT_ROOT = "file:///var/lib/gangrun/checkpoints"  # mount shared storage here, or set checkpoint.uri
LAUNCHER = ("python", "-m", "gangrun.launch", "--")


def jobset_name(task: str, attempt: int) -> str:
    """`<task>-<attempt>`, or a truncated task name plus a hash when that exceeds 41 characters."""
    name = f"{task}-{attempt}"
    if len(name) <= NAME_MAX:
        return name
    digest = hashlib.sha256(f"{task}\n{attempt}".encode()).hexdigest()[:6]
    suffix = f"-{digest}-{attempt}"
    return task[: NAME_MAX - len(suffix)].rstrip("-") + suffix


def rank0_host(name: str) -> str:
    """The rank-0 pod's DNS name inside the namespace: `<jobset>-workers-0-0.<jobset>`."""
    return f"{name}-{REPLICATED_JOB}-0-0.{name}"


def checkpoint_path(spec: TaskSpec, attempt: int) -> str:
    if attempt < 1:
        return ""
    root = spec.checkpoint_uri or DEFAULT_CHECKPOINT_ROOT
    return f"{root.rstrip('/')}/{spec.name}/attempt-{attempt}"


def check_renderable(spec: TaskSpec) -> None:
    """Raise SpecError, naming the field, for what a valid manifest may hold but no JobSet can carry."""
    if not spec.image:
        raise SpecError("spec.image", "is required on the kubernetes backend: an image with gangrun installed")
    if len(spec.priority_class) > crd.LABEL_VALUE_MAX:
        raise SpecError("spec.priorityClass", f"must be at most {crd.LABEL_VALUE_MAX} characters on the kubernetes "
                        "backend: it is a label of the JobSet")


def render_jobset(spec: TaskSpec, *, attempt: int = 1, owner_uid: str | None = None) -> dict[str, Any]:
    """The JobSet that attempt `attempt` of `spec` creates. Pure: no cluster, no clock."""
    if attempt < 1:
        raise SpecError("attempt", f"must be >= 1, got {attempt}")
    check_renderable(spec)
    name = jobset_name(spec.name, attempt)
    own = {crd.TASK_LABEL: spec.name, crd.ATTEMPT_LABEL: str(attempt)}
    labels = {kueue.QUEUE_NAME_LABEL: spec.queue, **own}
    if spec.priority_class:
        labels[kueue.PRIORITY_CLASS_LABEL] = spec.priority_class
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if spec.namespace:
        metadata["namespace"] = spec.namespace
    if owner_uid:
        metadata["ownerReferences"] = [{"apiVersion": crd.API_VERSION, "kind": crd.KIND, "name": spec.name,
                                        "uid": owner_uid, "controller": True, "blockOwnerDeletion": True}]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # the Job's backoffLimit 0 + JobSet's failurePolicy own restarts
        "subdomain": name,
        "terminationGracePeriodSeconds": int(spec.termination_grace.total_seconds()),
        "containers": [_container(spec, name, attempt)],
    }
    return {
        "apiVersion": jobset.API_VERSION,
        "kind": jobset.KIND,
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": jobset.SUCCESS_POLICY_ALL, "targetReplicatedJobs": [REPLICATED_JOB]},
            "startupPolicy": {"startupPolicyOrder": jobset.STARTUP_ANY_ORDER},
            "failurePolicy": {"maxRestarts": spec.failure_policy.max_restarts,
                              "restartStrategy": jobset.RESTART_STRATEGY_RECREATE},
            "replicatedJobs": [{
                "name": REPLICATED_JOB,
                "groupName": jobset.DEFAULT_GROUP_NAME,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": dict(own)},
                    "spec": {
                        "parallelism": spec.nodes,
                        "completions": spec.nodes,
                        "completionMode": "Indexed",
                        "backoffLimit": 0,
                        "podReplacementPolicy": "Failed",
                        "template": {"metadata": {"labels": dict(own)}, "spec": pod_spec},
                    },
                },
            }],
        },
    }


def _container(spec: TaskSpec, name: str, attempt: int) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "command": [*LAUNCHER, *spec.command],
        "env": worker_env(spec, name, attempt),
        "resources": _resources(spec),
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT, "protocol": "TCP"}],
    }
    if spec.working_dir.startswith("/"):  # "." means the image's own working directory
        container["workingDir"] = spec.working_dir
    return container


def worker_env(spec: TaskSpec, name: str, attempt: int) -> list[dict[str, Any]]:
    """INTERFACE.md "Inside a worker"; RANK/LOCAL_RANK are set per process by the launcher."""
    def value(k: str, v: object) -> dict[str, Any]:
        return {"name": k, "value": str(v)}

    def field(k: str, path: str) -> dict[str, Any]:
        return {"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    env = [value(k, v) for k, v in sorted(spec.env.items())]
    env += [
        value("GANGRUN_TASK", spec.name),
        value("GANGRUN_ATTEMPT", attempt),
        field("JOBSET_RESTART_ATTEMPT", jobset.RESTART_ATTEMPT_FIELD_PATH),
        # The Job controller appends JOB_COMPLETION_INDEX after our variables, so `$(...)` cannot
        # reference it; the same index is on the pod's annotation.
        field("NODE_RANK", jobset.JOB_COMPLETION_INDEX_FIELD_PATH),
        value("NNODES", spec.nodes),
        value("NPROC_PER_NODE", spec.nproc_per_node),
        value("WORLD_SIZE", spec.world_size),
        value("MASTER_ADDR", rank0_host(name)),
        value("MASTER_PORT", MASTER_PORT),
        value("GANGRUN_CHECKPOINT_PATH", checkpoint_path(spec, attempt)),
        value("GANGRUN_PREV_CHECKPOINT_PATH", checkpoint_path(spec, attempt - 1)),
        value("GANGRUN_GRACE_PERIOD", int(spec.termination_grace.total_seconds())),
        value("GANGRUN_JOBSET", name),
        field("POD_NAMESPACE", "metadata.namespace"),
    ]
    return env


def _resources(spec: TaskSpec) -> dict[str, Any]:
    r = spec.resources
    requests = {"cpu": _quantity(r.cpu), "memory": _quantity(r.memory)}
    limits = {"memory": _quantity(r.memory)}
    if r.gpu:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(r.gpu)
    return {"requests": requests, "limits": limits}


def _quantity(v: Decimal) -> str:
    """A Kubernetes quantity: whole numbers plain, fractions of a core in millis."""
    if v == v.to_integral_value():
        return str(int(v))
    return f"{int((v * 1000).to_integral_value())}m"
