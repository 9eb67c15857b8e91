"""Flyte's own connector service with gangrun's connector, as a process, called over gRPC as Flyte's
propeller calls it (tests/e2e/test_realnode_flyte.py).

The service is the flyte SDK's connector server (`c0`, `flyte.connectors.ConnectorService`), which
finds gangrun's connector through the `flyte.connectors` entry point: the same program a Flyte
deployment runs from deploy/flyte/connector.yaml. It runs on this host with this checkout's `src`
first on its path and reaches the API server with the kubeconfig the calls' connection names.

`CreateTask` gets the task template Flyte's own serialiser makes of a real `flyte` task, its
container arguments rendered as the propeller renders them (the inputs, the output prefix, the raw
data and checkpoint prefixes, the run's and action's names), the inputs uploaded to the output prefix
first (the propeller writes them there before it calls a connector), and the execution metadata
Flyte's connector plugin sends. The object store is a folder of this host that the pods mount at the
same path: Flyte's storage takes local paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from flyte._internal.runtime.convert import convert_from_native_to_inputs, convert_outputs_to_native
from flyte._internal.runtime.io import load_outputs, upload_inputs
from flyte._internal.runtime.task_serde import get_proto_task
from flyte.models import SerializationContext
from flyteidl2.connector.connector_pb2 import (
    CreateTaskRequest,
    DeleteTaskRequest,
    GetTaskRequest,
    TaskCategory,
    TaskExecutionMetadata,
)
from flyteidl2.connector.service_pb2_grpc import AsyncConnectorServiceStub
from flyteidl2.core import tasks_pb2
from flyteidl2.core.security_pb2 import Connection

from gangrun.flyte.connector import GangMeta
from tests.harness.binaries import REPO_ROOT
from tests.harness.processes import LIVE, die_with_parent, end, free_port

CATEGORY = TaskCategory(name="gangrun", version=0)
RUN, ACTION = "r1", "a0"


def render(task: Any, *, prefix: Path, run_base: Path, raw: Path, root: Path) -> tasks_pb2.TaskTemplate:
    """The task template the propeller sends for one action of `task` (module names relative to `root`)."""
    tt = get_proto_task(task, SerializationContext(version="v1", project="p", domain="d", root_dir=root))
    values = {"{{.input}}": str(prefix / "inputs.pb"), "{{.outputPrefix}}": str(prefix),
              "{{.rawOutputDataPrefix}}": str(raw), "{{.checkpointOutputPrefix}}": str(prefix / "_flytecheckpoints"),
              "{{.prevCheckpointPrefix}}": "", "{{.runName}}": RUN, "{{.actionName}}": ACTION,
              "{{.runStartTime}}": "2026-01-01T00:00:00Z"}
    args = list(tt.container.args)
    for i, a in enumerate(args):
        for k, v in values.items():
            a = a.replace(k, v)
        args[i] = a
    del tt.container.args[:]
    tt.container.args.extend(args)
    return tt


def execution_metadata(run_base: Path) -> TaskExecutionMetadata:
    """What Flyte's connector plugin sends with a create: the task execution's identifier and the
    environment Flyte's executor gives the action. No service account: the pods get the namespace's."""
    return TaskExecutionMetadata(
        task_execution_id={"task_id": {"project": "p", "domain": "d", "name": "rnflyte.train", "version": "v1"},
                           "node_execution_id": {"node_id": ACTION, "execution_id": {
                               "project": "p", "domain": "d", "name": RUN, "org": "o"}},
                           "retry_attempt": 0},
        environment_variables={"ACTION_NAME": ACTION, "RUN_NAME": RUN, "_U_ORG_NAME": "o",
                               "_U_RUN_BASE": str(run_base)})


class ConnectorService:
    """A running `c0` and a gRPC client of it; `connection` is what each call's Connection carries."""

    def __init__(self, port: int, proc: subprocess.Popen, log: Path, connection: dict[str, str]) -> None:
        self.port, self.proc, self.log, self.connection = port, proc, log, connection
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = AsyncConnectorServiceStub(self.channel)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def _call(self, method: str, request: Any) -> Any:
        if self.proc.poll() is not None:
            raise AssertionError(f"the connector service exited {self.proc.returncode}:\n{self.tail()}")
        try:
            return getattr(self.stub, method)(request, timeout=60)
        except grpc.RpcError as e:
            raise AssertionError(f"{method}: {e.code()} {e.details()}\n{self.tail()}") from None

    def create(self, task: Any, *, prefix: Path, run_base: Path, raw: Path, root: Path, **inputs: Any) -> GangMeta:
        native = asyncio.run(convert_from_native_to_inputs(task.native_interface, **inputs))
        asyncio.run(upload_inputs(native, str(prefix / "inputs.pb")))  # the propeller's part
        response = self._call("CreateTask", CreateTaskRequest(
            template=render(task, prefix=prefix, run_base=run_base, raw=raw, root=root),
            inputs=native.proto_inputs, output_prefix=str(prefix),
            task_execution_metadata=execution_metadata(run_base), connection=Connection(configs=self.connection)))
        return GangMeta.decode(response.resource_meta)

    def get(self, meta: GangMeta) -> Any:
        """The connector's resource: phase (a TaskExecution.Phase), message, custom_info."""
        return self._call("GetTask", GetTaskRequest(task_category=CATEGORY, resource_meta=meta.encode(),
                                                    connection=Connection(configs=self.connection))).resource

    def delete(self, meta: GangMeta) -> None:
        self._call("DeleteTask", DeleteTaskRequest(task_category=CATEGORY, resource_meta=meta.encode(),
                                                   connection=Connection(configs=self.connection)))


def outputs(task: Any, prefix: Path) -> Any:
    """The task's value as Flyte reads it from the output prefix (outputs.pb), or None if there is none."""
    if not (prefix / "outputs.pb").exists():
        return None
    return asyncio.run(convert_outputs_to_native(task.native_interface, asyncio.run(load_outputs(
        str(prefix / "outputs.pb")))))


@contextlib.contextmanager
def connector_service(workdir: Path, connection: dict[str, str], timeout: float = 60.0) -> Iterator[ConnectorService]:
    """`c0` on a free port until the block ends (its log in `workdir`)."""
    port = free_port()
    log = workdir / "connector.log"
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "grpc_proxy")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "flyte._bin.connect", "c0", f"--port={port}",
                                 f"--prometheus_port={free_port()}", "--worker=4"], stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=workdir,
                                start_new_session=True, preexec_fn=die_with_parent)
    LIVE.append(proc)
    service = ConnectorService(port, proc, log, connection)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the connector service exited {proc.returncode}:\n{service.tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the connector service did not listen within {timeout:.0f}s:\n{service.tail()}")
            time.sleep(0.2)
        yield service
    finally:
        service.channel.close()
        end(proc, grace=5.0)
