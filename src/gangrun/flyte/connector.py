"""The `gangrun` Flyte connector: a Flyte deployment runs `GangTask`s as ClusteredTasks on its cluster.

    create → submit the task template's gang (its manifest, Flyte's container image and entrypoint, the
             environment and service account Flyte gives the task's pods) to the Kubernetes backend,
             where gangrun's controller runs it; exactly once per task execution, however often Flyte
             retries the create;
    get    → the gang's status, its phase mapped onto Flyte's (`gangrun.flyte._remote.PHASES`) and its
             reason as the message;
    delete → cancel the gang (idempotent: a gang that ended or is gone is left as it is).

Flyte's connector service loads this module through the `flyte.connectors` entry point, which
registers the connector. The connection's configs (or secrets) may name `namespace`, `kubeconfig` and
`context`; without them the task execution's namespace and the service's own cluster access are used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flyte.connectors import AsyncConnector, ConnectorRegistry, Resource, ResourceMeta
from flyteidl2.core import tasks_pb2
from flyteidl2.core.execution_pb2 import TaskExecution
from google.protobuf import json_format

import gangrun
from gangrun._api.run import TaskRun
from gangrun._errors import UsageError
from gangrun.flyte._remote import execution_env, execution_token, flyte_phase, manifest_doc
from gangrun.flyte._task import CUSTOM_KEY, TASK_TYPE

__all__ = ["GangConnector", "GangMeta", "clustered_task_doc"]

CLUSTER_KEYS = ("kubeconfig", "context")
INFO_KEYS = ("attempt", "userRetriesUsed", "systemRetriesUsed", "evictions")  # of the status, in custom_info


@dataclass
class GangMeta(ResourceMeta):
    """Which gang a Flyte task execution made."""

    name: str
    namespace: str = ""


class GangConnector(AsyncConnector[GangMeta]):
    name = "gangrun connector"
    task_type_name = TASK_TYPE
    task_type_version = 0
    metadata_type = GangMeta

    async def create(self, task_template: tasks_pb2.TaskTemplate, output_prefix: str,
                     inputs: dict[str, Any] | None = None, task_execution_metadata: Any = None,
                     **kwargs: Any) -> GangMeta:
        namespace = kwargs.get("namespace") or getattr(task_execution_metadata, "namespace", "") or None
        doc = clustered_task_doc(task_template, task_execution_metadata, namespace, output_prefix=output_prefix)
        task = gangrun.ClusteredTask.from_dict(doc)
        run = await asyncio.to_thread(gangrun.submit, task, "kubernetes", namespace=namespace, **_cluster(kwargs))
        return GangMeta(name=run.name, namespace=namespace or "")

    async def get(self, resource_meta: GangMeta, **kwargs: Any) -> Resource:
        view = await asyncio.to_thread(lambda: _run(resource_meta, kwargs).status())
        phase = TaskExecution.Phase.Value(flyte_phase(view["phase"]))
        fields: Mapping[str, object] = view  # INFO_KEYS are keys of every view (`StateView`)
        info: dict[str, Any] = {k: fields[k] for k in INFO_KEYS if k in fields}
        return Resource(phase=phase, message=f"{view['phase']}: {view.get('reason') or ''}".rstrip(": "),
                        custom_info={"gangrunTask": resource_meta.name, **info})

    async def delete(self, resource_meta: GangMeta, **kwargs: Any) -> None:
        try:
            await asyncio.to_thread(lambda: _run(resource_meta, kwargs).cancel())
        except UsageError:  # already deleted: nothing left to stop
            pass


def clustered_task_doc(task_template: tasks_pb2.TaskTemplate, task_execution_metadata: Any,
                       namespace: str | None, *, output_prefix: str = "") -> dict[str, Any]:
    """The ClusteredTask of one Flyte task execution: what a pod of it would run, on every rank. Its
    environment is a pod's of Flyte's Kubernetes plugins, the later winning: the container's variables
    (the task environment's `env_vars`), the execution's identifiers, the execution metadata's (the run's
    and Flyte's runtime settings). Its client token comes from the execution's identifier, so a create
    that Flyte retries finds the gang the first one made. Its checkpoints go under the execution's
    `output_prefix` (Flyte's raw-data store, which every pod of the task reaches) unless the task's
    `Gang(options={"checkpoint_uri": ...})` names a place: a pod's own disk would not outlive a preemption."""
    meta = task_execution_metadata
    ids = meta.task_execution_id if meta is not None and meta.HasField("task_execution_id") else None
    env = {e.key: e.value for e in task_template.container.env}
    token = ""
    if ids is not None:
        execution = json_format.MessageToDict(ids.node_execution_id.execution_id)
        env.update(execution_env(execution=execution, task=json_format.MessageToDict(ids.task_id),
                                 attempt=ids.retry_attempt))
        token = execution_token(execution=execution, node=ids.node_execution_id.node_id, attempt=ids.retry_attempt)
    if meta is not None:
        env.update(meta.environment_variables)
    return manifest_doc(json_format.MessageToDict(task_template.custom), CUSTOM_KEY,
                        args=list(task_template.container.args), image=task_template.container.image,
                        namespace=namespace, env=env,
                        service_account=meta.k8s_service_account if meta is not None else "", token=token,
                        checkpoints=output_prefix)


def _cluster(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs[k] for k in CLUSTER_KEYS if kwargs.get(k)}


def _run(meta: GangMeta, kwargs: dict[str, Any]) -> TaskRun:
    return gangrun.attach(meta.name, "kubernetes", namespace=meta.namespace or None, **_cluster(kwargs))


ConnectorRegistry.register(GangConnector(), override=True)
