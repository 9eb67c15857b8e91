"""The connector's pure part: a Flyte task template's gang as a manifest, and a gang's phase as Flyte's.

`GangTask.custom_config` ships the gang's manifest with the worker's command but not Flyte's entrypoint
arguments, which only the rendered container has; `manifest_doc` joins them, with the environment and
service account Flyte gives a task's pod: Flyte's entrypoint needs that environment to start at all
(`--run-base-dir` comes from `_U_RUN_BASE`, the project from `FLYTE_INTERNAL_EXECUTION_PROJECT`), and a
connector's task gets it only through the create request. `execution_env` names what a pod of the
task execution would have. The manifest travels as
JSON text: Flyte's `custom` is a protobuf Struct, whose numbers are all floats, and `nodes: 2.0` is not
a whole number to the manifest's parser. `flyte_phase` maps
gangrun's phases one to one onto Flyte's `TaskExecution` phases (the names are the same concepts).
A preempted gang waiting for readmission stays `Running` in gangrun (its reason says it waits), so
Flyte sees `RUNNING`, never a failure: a preemption costs the Flyte task no retry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gangrun._backends.kube.crd import CLIENT_TOKEN_LABEL
from gangrun._core.spec import RESERVED_ENV
from gangrun._errors import SpecError

__all__ = ["PHASES", "execution_env", "execution_token", "flyte_phase", "manifest_doc"]

CHECKPOINTS_UNDER = "_gangrun_checkpoints"  # beside Flyte's own `_flytecheckpoints` under the output prefix
PHASES = {
    "Queued": "QUEUED",
    "WaitingForResources": "WAITING_FOR_RESOURCES",
    "Initializing": "INITIALIZING",
    "Running": "RUNNING",
    "Succeeded": "SUCCEEDED",
    "Failed": "FAILED",
    "Aborted": "ABORTED",
}


def flyte_phase(phase: str) -> str:
    """The name of Flyte's `TaskExecution.Phase` for a gangrun phase; an unknown one is `UNDEFINED`."""
    return PHASES.get(phase, "UNDEFINED")


def execution_env(*, execution: Mapping[str, str], task: Mapping[str, str], attempt: int) -> dict[str, str]:
    """The variables Flyte's Kubernetes plugins set on every pod from the task execution's identifier
    (flytek8s' GetExecutionEnvVars): `execution` and `task` are its project, domain, name (and the
    task's version); a missing or empty value sets nothing."""
    names = {"FLYTE_INTERNAL_EXECUTION_ID": execution.get("name"),
             "FLYTE_INTERNAL_EXECUTION_PROJECT": execution.get("project"),
             "FLYTE_INTERNAL_EXECUTION_DOMAIN": execution.get("domain"),
             "FLYTE_INTERNAL_TASK_PROJECT": task.get("project"), "FLYTE_INTERNAL_TASK_DOMAIN": task.get("domain"),
             "FLYTE_INTERNAL_TASK_NAME": task.get("name"), "FLYTE_INTERNAL_TASK_VERSION": task.get("version")}
    out = {k: v for k, v in names.items() if v}
    if out:
        out["FLYTE_ATTEMPT_NUMBER"] = str(attempt)
    return out


def execution_token(*, execution: Mapping[str, str], node: str, attempt: int) -> str:
    """The client token of one task execution (its run's identifier, its node and Flyte's retry attempt):
    a create that Flyte sends again for the same execution carries the same token, so it finds the gang
    the first one made instead of starting a second (gangrun._backends.kube.create). A Flyte retry is a
    new attempt and gets a gang of its own."""
    ids = [execution.get(k, "") for k in ("org", "project", "domain", "name")] + [node, str(attempt)]
    return "flyte-" + hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:40]


def manifest_doc(custom: dict[str, Any], key: str, *, args: Sequence[str], image: str,
                 namespace: str | None, env: Mapping[str, str] | None = None,
                 service_account: str = "", token: str = "", checkpoints: str = "") -> dict[str, Any]:
    """The ClusteredTask document of a task template: its custom manifest, the container's arguments
    appended to the command, the container's image unless the manifest names one, and the namespace.
    `env` (what Flyte gives the task's pod) joins the manifest's own `spec.env`, which wins, leaving out
    the names gangrun sets for every worker; `service_account` is the pods' unless the manifest's pod
    template names one; `token` is the task's client token (`execution_token`); `checkpoints`: the
    execution's output prefix, under which the gang checkpoints (`CHECKPOINTS_UNDER`) unless the manifest
    names a `spec.checkpoint.uri`."""
    text = custom.get(key)
    try:
        doc = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict):
        raise SpecError("custom", f"a gangrun task template carries its manifest as JSON text under {key!r}; "
                                  f"this one has {sorted(custom)}")
    spec = doc["spec"]
    spec["command"] = [*spec.get("command", []), *args]
    if image and not spec.get("image"):
        spec["image"] = image
    flyte_env = {k: v for k, v in (env or {}).items() if k not in RESERVED_ENV}
    if flyte_env:
        spec["env"] = {**flyte_env, **spec.get("env", {})}
    pod = (spec.get("podTemplate") or {}).get("spec") or {}
    if service_account and not (pod.get("serviceAccountName") or pod.get("serviceAccount")):
        spec.setdefault("podTemplate", {}).setdefault("spec", {})["serviceAccountName"] = service_account
    if checkpoints and not (spec.get("checkpoint") or {}).get("uri"):
        spec.setdefault("checkpoint", {})["uri"] = f"{checkpoints.rstrip('/')}/{CHECKPOINTS_UNDER}"
    if namespace:
        doc.setdefault("metadata", {})["namespace"] = namespace
    if token:
        doc.setdefault("metadata", {}).setdefault("labels", {})[CLIENT_TOKEN_LABEL] = token
    return doc
