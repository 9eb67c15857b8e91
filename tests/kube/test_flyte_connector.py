"""The `gangrun` Flyte connector against the HTTP fake API, through Flyte's own connector service: what
create puts on the cluster, get before the controller wrote a status, and delete as a cancel request.
The run through the controller to SUCCEEDED, a preemption and ABORTED is tests/e2e/test_flyte_e2e.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gangrun._backends.kube import crd
from gangrun._backends.kube.client import LOCAL_QUEUES, TASKS
from tests.harness.kube_fake import FakeApi
from tests.harness.kube_http import kubeconfig, serve

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import flyte  # CI installs the flyte extra: a missing one fails here
else:
    flyte = pytest.importorskip("flyte", reason="the flyte extra is not installed: pip install -e '.[flyte]'")

from flyteidl2.core.execution_pb2 import TaskExecution
from google.protobuf import json_format

from tests.with_flyte import connector_calls, gang_tasks


@pytest.fixture
def connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    api = FakeApi()
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    server = serve(api)
    try:
        yield api, {"kubeconfig": str(kubeconfig(tmp_path / "kubeconfig", server)), "namespace": "ml"}
    finally:
        server.shutdown()


def test_create_submits_the_flyte_tasks_gang_get_maps_its_phase_and_delete_requests_a_cancel(connection) -> None:
    api, conn = connection
    meta = connector_calls.create(gang_tasks.flaky, conn, connector_calls.execution_metadata(USER_VAR="1"))
    assert meta.name.startswith("gangtest-flaky-") and meta.namespace == "ml"
    obj = api.obj(TASKS, "ml", meta.name)
    assert obj is not None
    spec = obj["spec"]
    assert spec["command"][:5] == ["python", "-m", "gangrun.flyte._worker", "flyte", "a0"]
    assert (spec["nodes"], spec["retries"], spec["failurePolicy"]["resumeAfterPreemption"]) == (2, 1, True)
    assert spec["image"]  # the task environment's image, from Flyte's container
    # what Flyte's entrypoint needs to start, as on a pod Flyte makes: from the request, not the template
    env = spec["env"]
    assert (env["_U_RUN_BASE"], env["ACTION_NAME"], env["RUN_NAME"], env["_U_ORG_NAME"]) == (
        "s3://bucket/run", "a0", "r1", "o")
    assert (env["FLYTE_INTERNAL_EXECUTION_PROJECT"], env["FLYTE_INTERNAL_EXECUTION_DOMAIN"], env["USER_VAR"]) == (
        "p", "d", "1")
    assert spec["podTemplate"]["spec"]["serviceAccountName"] == "flyte-runner"
    assert spec["checkpoint"]["uri"] == "s3://bucket/run/_gangrun_checkpoints"  # Flyte's store, not a pod's disk

    resource = connector_calls.get(meta, conn)
    assert resource.phase == TaskExecution.QUEUED  # no controller has written a status yet
    info = json_format.MessageToDict(resource.custom_info)
    assert (info["gangrunTask"], info["attempt"]) == (meta.name, 1)

    connector_calls.delete(meta, conn)
    assert crd.CANCEL_ANNOTATION in api.obj(TASKS, "ml", meta.name)["metadata"]["annotations"]
    api.delete(TASKS, "ml", meta.name)
    connector_calls.delete(meta, conn)  # idempotent: a gang that is gone is left as it is


def test_a_create_flyte_sends_again_for_the_same_execution_finds_the_gang_the_first_made(connection) -> None:
    api, conn = connection
    first = connector_calls.create(gang_tasks.flaky, conn, connector_calls.execution_metadata())
    again = connector_calls.create(gang_tasks.flaky, conn, connector_calls.execution_metadata())  # first reply lost
    assert again.name == first.name and len(api.names(TASKS)) == 1
    retry = connector_calls.create(gang_tasks.flaky, conn, connector_calls.execution_metadata(retry_attempt=1))
    other_run = connector_calls.create(gang_tasks.flaky, conn, connector_calls.execution_metadata(run="r2"))
    assert len({first.name, retry.name, other_run.name}) == 3 and len(api.names(TASKS)) == 3


def test_the_connectors_role_grants_every_call_its_create_get_and_delete_make_in_a_project_namespace(
        connection) -> None:
    import yaml

    api, conn = connection
    api.calls.clear()
    meta = connector_calls.create(gang_tasks.flaky, conn, connector_calls.execution_metadata())
    connector_calls.get(meta, conn)
    connector_calls.delete(meta, conn)
    verbs = {"get": "get", "list": "list", "create": "create", "patch": "patch", "dry-run": "create"}
    calls = {(plural, verbs.get(verb, verb)) for verb, plural, _ in api.calls}
    docs = yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy/flyte/connector.yaml").read_text())
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    grants = {(r.split("/")[0], v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("clusteredtasks", "create") in calls and calls - grants == set(), calls
