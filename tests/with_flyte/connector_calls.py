"""Calls to the `gangrun` connector as a Flyte deployment makes them: the task template Flyte's own
serialiser makes of a `GangTask`, sent through Flyte's connector service (its gRPC servicer, in process)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from flyte._internal.runtime.convert import convert_from_native_to_inputs
from flyte._internal.runtime.task_serde import get_proto_task
from flyte.connectors._server import AsyncConnectorService
from flyte.models import SerializationContext
from flyteidl2.connector.connector_pb2 import (
    CreateTaskRequest,
    DeleteTaskRequest,
    GetTaskRequest,
    TaskCategory,
    TaskExecutionMetadata,
)
from flyteidl2.core import tasks_pb2
from flyteidl2.core.security_pb2 import Connection

import gangrun.flyte.connector  # noqa: F401  (registers the connector, as the entry point does)
from gangrun.flyte.connector import GangMeta

HERE = Path(__file__).resolve().parent
CATEGORY = TaskCategory(name="gangrun", version=0)


def template(task: Any, prefix: str = "s3://bucket/run") -> tasks_pb2.TaskTemplate:
    """The task template Flyte ships to a connector for `task` (its container args rendered by the platform,
    the inputs and outputs under `prefix`)."""
    sctx = SerializationContext(version="v1", project="p", domain="d", root_dir=HERE.parent)
    tt = get_proto_task(task, sctx)
    rendered = [a.replace("{{.input}}", f"{prefix}/inputs.pb").replace("{{.outputPrefix}}", prefix)
                for a in tt.container.args]
    del tt.container.args[:]
    tt.container.args.extend(rendered)
    return tt


class ServicerContext:
    """What the servicer reports an error through (grpc.ServicerContext's two calls it uses)."""

    def __init__(self) -> None:
        self.code: Any = None
        self.details = ""

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


def _call(method: str, request: Any) -> Any:
    ctx = ServicerContext()
    response = asyncio.run(getattr(AsyncConnectorService(), method)(request, ctx))
    if response is None:
        raise AssertionError(f"{method} failed: {ctx.code} {ctx.details}")
    return response


def execution_metadata(run_base: str = "s3://bucket/run", service_account: str = "flyte-runner", *,
                       run: str = "r1", retry_attempt: int = 0, **env: str) -> TaskExecutionMetadata:
    """What Flyte's connector plugin sends with a create: the task execution's identifier, the environment
    Flyte's executor gives the action (its name, run, org and run base) plus `env`, the service account."""
    return TaskExecutionMetadata(
        task_execution_id={"task_id": {"project": "p", "domain": "d", "name": "gangtest.train", "version": "v1"},
                           "node_execution_id": {"node_id": "a0", "execution_id": {
                               "project": "p", "domain": "d", "name": run, "org": "o"}},
                           "retry_attempt": retry_attempt},
        environment_variables={"ACTION_NAME": "a0", "RUN_NAME": run, "_U_ORG_NAME": "o", "_U_RUN_BASE": run_base,
                               **env},
        k8s_service_account=service_account)


def create(task: Any, connection: dict[str, str], metadata: TaskExecutionMetadata | None = None,
           **inputs: Any) -> GangMeta:
    proto_inputs = asyncio.run(convert_from_native_to_inputs(task.native_interface, **inputs)).proto_inputs
    response = _call("CreateTask", CreateTaskRequest(template=template(task), inputs=proto_inputs,
                                                     output_prefix="s3://bucket/run",
                                                     task_execution_metadata=metadata,
                                                     connection=Connection(configs=connection)))
    return GangMeta.decode(response.resource_meta)


def get(meta: GangMeta, connection: dict[str, str]) -> Any:
    """The connector's resource: phase (a TaskExecution.Phase), message, custom_info."""
    return _call("GetTask", GetTaskRequest(task_category=CATEGORY, resource_meta=meta.encode(),
                                           connection=Connection(configs=connection))).resource


def delete(meta: GangMeta, connection: dict[str, str]) -> None:
    _call("DeleteTask", DeleteTaskRequest(task_category=CATEGORY, resource_meta=meta.encode(),
                                          connection=Connection(configs=connection)))
