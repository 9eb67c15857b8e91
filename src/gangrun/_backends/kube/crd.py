"""The `ClusteredTask` custom resource: its names, gangrun's own labels, and the CRD generated from here.

This module is the one source of truth for `deploy/crd.yaml` (`python -m gangrun._backends.kube.crd`
prints it; a test keeps the committed file equal). The OpenAPI schema mirrors the validation of
`gangrun._core.spec.parse_manifest` so that `kubectl apply` refuses at admission what `gangrun submit`
refuses locally, with a message that names the field.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from gangrun._core import badput, pod_template
from gangrun._core import spec as core_spec

GROUP = "gangrun.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = core_spec.KIND
PLURAL = "clusteredtasks"
SINGULAR = "clusteredtask"
SHORT_NAMES = ["ctask", "ct"]
CRD_NAME = f"{PLURAL}.{GROUP}"

# Labels gangrun puts on every JobSet it creates and, through the pod template, on every worker pod.
TASK_LABEL = f"{GROUP}/task"
ATTEMPT_LABEL = f"{GROUP}/attempt"
# The task's metadata.uid: a task deleted and re-created under the same name never takes the first
# one's JobSets or pods (still being deleted) for its own.
TASK_UID_LABEL = f"{GROUP}/task-uid"
# A task's client token, set by the submitter before its first create: a retried create finds the task an
# earlier try stored instead of making a second one (gangrun._backends.kube.create).
CLIENT_TOKEN_LABEL = f"{GROUP}/client-token"
# `gangrun cancel` asks the controller to abort by annotating the task; the controller owns status.
CANCEL_ANNOTATION = f"{GROUP}/cancel-requested"
# The stop notice (cause, message, deadline as JSON) the controller writes on worker pods before they
# are stopped; the pods read it through a downward-API file (GANGRUN_STOP_FILE).
STOP_NOTICE_ANNOTATION = f"{GROUP}/stop-notice"
FIELD_MANAGER = "gangrun-controller"
# A label value's bound; spec.priorityClass becomes the JobSet's Kueue priority-class label.
LABEL_VALUE_MAX = 63

_DNS_1035 = core_spec.DNS_1035.pattern
_QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_DURATION = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$|^[0-9]+(\.[0-9]+)?$"


def _int(minimum: int, description: str, maximum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


def _str(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _quantity(description: str) -> dict[str, Any]:
    # The shape controller-gen emits for resource.Quantity.
    return {"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": _QUANTITY,
            "x-kubernetes-int-or-string": True, "description": description}


def spec_schema() -> dict[str, Any]:
    """The OpenAPI v3 schema of `.spec`: the manifest gangrun.dev/v1alpha1 defines."""
    reserved = sorted(core_spec.RESERVED_ENV)
    return {
        "type": "object",
        "required": ["nodes", "command", "image"],
        "properties": {
            "nodes": _int(1, "gang size: pods, one per node", core_spec.NODES_MAX),
            "nprocPerNode": _int(1, "processes per node (torchrun when > 1)", core_spec.NPROC_MAX),
            "minNodes": _int(1, "elastic gangs: the fewest nodes it may run on (default: nodes)", core_spec.NODES_MAX),
            "resizeCooldown": _str("elastic gangs: grow back at most once per this long (default 5m)",
                                   pattern=_DURATION),
            "command": {"type": "array", "minItems": 1, "maxItems": core_spec.COMMAND_MAX, "items": {"type": "string"},
                        "description": "the worker's argv, no shell"},
            "workingDir": _str("working directory inside the container (absolute) or '.'"),
            # maxProperties bounds the CEL rule's estimated cost: without it a real API server refuses
            # the CRD ("estimated rule cost exceeds budget").
            "env": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": core_spec.ENV_MAX,
                    "description": f"extra environment variables (at most {core_spec.ENV_MAX})",
                    "x-kubernetes-validations": [{
                        "rule": "self.all(k, !(k in " + repr(reserved).replace("'", '"') + "))",
                        "message": "names set by gangrun for every worker cannot be overridden: "
                                   + ", ".join(reserved)}]},
            "image": _str("container image with gangrun installed (kubernetes only)", minLength=1),
            "resources": {"type": "object", "description": "per node", "properties": {
                "cpu": _quantity("CPU cores, a Kubernetes quantity like 500m or 2"),
                "memory": _quantity("memory, a Kubernetes quantity like 1Gi"),
                "gpu": _int(0, "whole GPUs (nvidia.com/gpu)", core_spec.GPU_MAX)}},
            "retries": _int(0, "user retry budget: attempts = retries + 1", core_spec.RETRIES_MAX),
            "maxSystemRetries": _int(0, "system retries allowed in a row (default 3)", core_spec.RETRIES_MAX),
            "maxRuntime": _str("per attempt, from the first Running; waits for re-admission count",
                               pattern=_DURATION),
            "terminationGracePeriod": _str("how long workers have to checkpoint after SIGTERM", pattern=_DURATION),
            "failurePolicy": {"type": "object", "properties": {
                "maxRestarts": _int(0, "whole-gang restarts inside one attempt", core_spec.RETRIES_MAX),
                "resumeAfterPreemption": {"type": "boolean",
                                          "description": "a preempted started gang keeps its attempt"},
                "restartOnDisruption": {"type": "boolean", "description": (
                    "a worker lost to a node disruption (pod condition DisruptionTarget) restarts the gang in the "
                    "same attempt, charged to no budget (default true)")},
                "restartStrategy": {"type": "string", "enum": list(core_spec.RESTART_STRATEGIES), "description": (
                    "how a restart for a failed worker restarts the gang: Recreate (default: every pod anew) "
                    "or InPlace (every worker again in its pod)")}}},
            "podTemplate": pod_template_schema(),
            "shmSize": _quantity("size of a memory-backed /dev/shm for the workers, like 8Gi"),
            "gpuResource": _str("the extended resource resources.gpu requests (default nvidia.com/gpu)",
                                pattern=core_spec.GPU_RESOURCE.pattern, maxLength=253),
            "queue": _str("Kueue LocalQueue", pattern=_DNS_1035, maxLength=63),
            "priorityClass": _str("Kueue WorkloadPriorityClass", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                                  maxLength=LABEL_VALUE_MAX),
            "checkpoint": {"type": "object", "properties": {
                "uri": _str("checkpoint base; attempt N saves under <uri>/<task>/<metadata.uid>/attempt-<N>"),
                "resumeFrom": _str("a task name (its newest complete checkpoint, the task live or deleted) or a "
                                   "checkpoint URI, loaded when this task has no checkpoint of its own")}},
        },
    }


# Pod template fields gangrun sets itself or refuses, with their types so CEL can see them (CEL cannot read fields
# kept only by x-kubernetes-preserve-unknown-fields).
_OWNED_POD_TYPES = {"restartPolicy": "string", "terminationGracePeriodSeconds": "integer", "hostname": "string",
                    "subdomain": "string", "hostnameOverride": "string", "nodeName": "string", "resources": "object",
                    "ephemeralContainers": "objects", "overhead": "object", "priority": "integer",
                    "schedulingGates": "objects", "activeDeadlineSeconds": "integer", "resourceClaims": "objects"}
_OWNED_WORKER_TYPES = {"image": "string", "command": "strings", "args": "strings", "workingDir": "string",
                       "resources": "object", "terminationMessagePath": "string", "terminationMessagePolicy": "string",
                       "restartPolicy": "string", "restartPolicyRules": "objects"}
CONTAINERS_MAX = pod_template.CONTAINERS_MAX


def _any(type_: str) -> dict[str, Any]:
    """A structural schema for a field CEL must see: a scalar, an object kept as given, or a list of either."""
    if type_ == "object":
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if type_ == "strings":
        return {"type": "array", "items": {"type": "string"}}
    if type_ == "objects":
        return {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {"type": type_}


def pod_template_schema() -> dict[str, Any]:
    """`spec.podTemplate`: a PodTemplateSpec kept as given (the API server validates it when it creates
    the pods), with CEL rules that refuse, at admission, the fields gangrun sets itself."""
    base = "spec.podTemplate.spec"
    pod_rules = [{"rule": f"!has(self.{key})", "message": f"{base}.{key}: set by gangrun ({why})"}
                 for key, why in pod_template.OWNED_POD_FIELDS.items()]
    pod_rules += [{"rule": f"!has(self.{key})", "message": f"{base}.{key}: is not accepted: {why}"}
                  for key, why in pod_template.REFUSED_POD_FIELDS.items()]
    worker = pod_template.WORKER
    container_rules = [{"rule": f"self.name != '{worker}' || !has(self.{key})",
                        "message": f"{base}.containers[{worker}].{key}: set by gangrun ({why})"}
                       for key, why in pod_template.OWNED_WORKER_FIELDS.items()]
    container = {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "required": ["name"],
                 "properties": {"name": {"type": "string", "maxLength": 63},
                                **{k: _any(t) for k, t in _OWNED_WORKER_TYPES.items()}},
                 "x-kubernetes-validations": container_rules}
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "type": "object",
        "description": "kubernetes: a PodTemplateSpec merged into every worker pod; the worker container is "
                       "named worker. gangrun owns its command, image, resources and environment contract.",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": string_map, "annotations": string_map}},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {**{k: _any(t) for k, t in _OWNED_POD_TYPES.items()},
                                    "containers": {"type": "array", "maxItems": CONTAINERS_MAX, "items": container}},
                     "x-kubernetes-validations": pod_rules},
        },
    }


def status_schema() -> dict[str, Any]:
    """`.status`: the persisted `TaskState` (see `gangrun._core.state.TaskState.for_storage`) plus conditions."""
    record = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    seconds = {"type": "array", "items": {"type": "number"}}
    accounting_properties = {
        "restoringSeconds": {"type": "number", "description": "gang up before the first step after a load"},
        "stepSeconds": {"type": "number", "description": "productive time less the task's first start before its "
                                                         "first step: the time spent stepping"},
        "badputSeconds": {"type": "object", "description": "the task's unproductive time by cause",
                          "properties": {c.key: {"type": "number", "description": c.meaning} for c in badput.CAUSES}},
        "finalSaveSeconds": seconds, "periodicSaveSeconds": seconds,
    }
    return {
        "type": "object",
        "properties": {
            "phase": _str("Queued, WaitingForResources, Initializing, Running, Succeeded, Failed or Aborted"),
            "phaseVersion": {"type": "integer"},
            "reason": _str("why the task is in its phase"),
            "message": _str("the final error on Failed"),
            "code": _str("the final error code on Failed"),
            "attempt": {"type": "integer", "description": "the current attempt, from 1"},
            "gangSeen": {"type": "boolean"},
            "started": {"type": "boolean"},
            "restartAttempt": {"type": "integer"},
            "userRetriesUsed": {"type": "integer"},
            "systemRetriesUsed": {"type": "integer"},
            "consecutiveSystemFailures": {"type": "integer"},
            "eviction": {**record, "description": "the eviction in progress, recorded when first seen"},
            "waitingForReadmission": {"type": "boolean",
                                      "description": "a preempted gang keeps its attempt until Kueue readmits it"},
            "unexplainedSuspendSince": {"type": "string"},
            "attempts": {"type": "array", "items": record},
            "evictions": {"type": "array", "items": record},
            "disruptionRestarts": {"type": "integer"},
            "disruptionsInARow": {"type": "integer"},
            "disruptions": {"type": "array", "items": record,
                            "description": "whole-gang restarts for workers lost to node disruptions"},
            "accounting": {**record, "properties": accounting_properties,
                           "description": "time queued, gang up, restoring, work lost per stop, last checkpoint, "
                                          "save durations; badput by cause as of the newest event"},
            "jobSet": _str("the JobSet of the current attempt (an elastic gang's latest, once resized)"),
            "runningNodes": {"type": "integer", "description": "the nodes the gang runs on now (0 when it is not up)"},
            "elastic": {**record, "description": "an elastic gang's current JobSet in the attempt: its generation, "
                                                 "size, last resize, the restarts of the JobSets it replaced and, "
                                                 "once it shrank onto the nodes left, how many could take it"},
            "inPlace": {**record, "description": "the attempt's in-place restarts: how many, the round the newest "
                                                 "order named, whether every launcher has it, and why; the "
                                                 "JobSet round recreated instead; the pods lost under the gang "
                                                 "that were made again alone (index, name)"},
            "resumeFromResult": {**record, "description": "what spec.checkpoint.resumeFrom gave the newest load: "
                                                          "found, uri, step and when (found false: nothing there)"},
            "observedGeneration": {"type": "integer"},
            "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                           "items": {"type": "object", "required": ["type", "status"], "properties": {
                               "type": {"type": "string"}, "status": {"type": "string"},
                               "reason": {"type": "string"}, "message": {"type": "string"},
                               "lastTransitionTime": {"type": "string", "format": "date-time"},
                               "observedGeneration": {"type": "integer"}}}},
        },
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition, as a dict."""
    schema = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 63,
                                                                    "pattern": _DNS_1035}}},
            "spec": spec_schema(),
            "status": status_schema(),
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": SINGULAR,
                      "shortNames": SHORT_NAMES, "categories": ["gangrun"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Attempt", "type": "integer", "jsonPath": ".status.attempt"},
                    {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 0},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    }


def crd_yaml() -> str:
    header = "# Generated by `python -m gangrun._backends.kube.crd`; do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)


if __name__ == "__main__":  # pragma: no cover - a generator entry point
    sys.stdout.write(crd_yaml())
