"""The `gangrun` Flyte connector against the real control plane (tier C: kube-apiserver, kwok nodes, JobSet,
Kueue) with the real `gangrun controller`, called through Flyte's own connector service in process.

create → a ClusteredTask running Flyte's entrypoint on every rank; get → Flyte's phases (a preemption is
RUNNING, never a failure, and costs no retry); kwok completes the pods → SUCCEEDED; delete → the gang is
cancelled. kwok runs no containers, so Flyte's entrypoint itself does not run here.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.e2e.test_api_e2e import crd_installed, kube_env  # noqa: F401  (fixtures)
from tests.e2e.test_controller_e2e import complete_pods, finish_preemptor, preempt
from tests.harness.addons import LOCAL_QUEUE, NODE_CPU
from tests.harness.tasks import ATTEMPT_LABEL, TASK_LABEL

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import flyte  # CI installs the flyte extra: a missing one fails here
else:
    flyte = pytest.importorskip("flyte", reason="the flyte extra is not installed: pip install -e '.[flyte]'")

from flyteidl2.core.execution_pb2 import TaskExecution

import gangrun
from gangrun.flyte import Gang
from tests.with_flyte import connector_calls

pytestmark = pytest.mark.e2e
TIMEOUT = 120.0

env = flyte.TaskEnvironment(name="e2e", image="example.invalid/trainer:1", plugin_config=Gang(
    nodes=2, resources={"cpu": str(NODE_CPU), "memory": "1Gi"}, priority_class="low", queue=LOCAL_QUEUE,
    options={"termination_grace_period": "1s"}))


@env.task(retries=1)
def train(epochs: int) -> float:
    return float(epochs)


def until(meta, connection: dict[str, str], pred, what: str, ctl) -> object:
    deadline = time.monotonic() + TIMEOUT
    while True:
        ctl.check()
        resource = connector_calls.get(meta, connection)
        if pred(resource):
            return resource
        if time.monotonic() > deadline:
            raise AssertionError(f"{meta.name}: {what} not within {TIMEOUT:.0f}s; last: "
                                 f"{TaskExecution.Phase.Name(resource.phase)} {resource.message}")
        time.sleep(0.3)


def phase(name: str):
    return lambda r: r.phase == TaskExecution.Phase.Value(name)


def test_the_connector_runs_a_flyte_gang_task_on_the_cluster_through_preemption_to_success(kube_env) -> None:  # noqa: F811
    cp, ns, ctl = kube_env
    connection = {"kubeconfig": str(cp.kubeconfig), "namespace": ns}
    # no service account: the control plane has none but its own
    meta = connector_calls.create(train, connection, connector_calls.execution_metadata(service_account=""), epochs=3)
    assert meta.name.startswith("e2e-train-") and meta.namespace == ns

    run = gangrun.attach(meta.name, "kubernetes", kubeconfig=str(cp.kubeconfig), namespace=ns)
    status = run.status()
    doc = cp.kube.request("GET", f"/apis/gangrun.dev/v1alpha1/namespaces/{ns}/clusteredtasks/{meta.name}")["spec"]
    assert doc["command"][:5] == ["python", "-m", "gangrun.flyte._worker", "flyte", "a0"]
    assert (doc["image"], doc["nodes"], doc["retries"]) == ("example.invalid/trainer:1", 2, 1)
    assert (doc["env"]["_U_RUN_BASE"], doc["env"]["FLYTE_INTERNAL_EXECUTION_PROJECT"]) == ("s3://bucket/run", "p")
    assert status["retriesLeft"] == 1

    until(meta, connection, lambda r: r.phase == TaskExecution.RUNNING and "running (" in r.message, "RUNNING", ctl)
    preempt(cp.kube, ns)
    waiting = until(meta, connection, lambda r: "waiting for re-admission" in r.message, "preempted, waiting", ctl)
    assert waiting.phase == TaskExecution.RUNNING  # never a failure: Flyte charges no retry
    finish_preemptor(cp.kube, ns)
    complete_pods(cp.kube, ns, f"{TASK_LABEL}={meta.name},{ATTEMPT_LABEL}=1", 2)
    done = until(meta, connection, phase("SUCCEEDED"), "SUCCEEDED", ctl)
    info = dict(done.custom_info)
    assert (info["attempt"], info["userRetriesUsed"]) == (1, 0)  # readmitted in the same attempt, no retry


def test_deleting_a_flyte_execution_cancels_its_gang(kube_env) -> None:  # noqa: F811
    cp, ns, ctl = kube_env
    connection = {"kubeconfig": str(cp.kubeconfig), "namespace": ns}
    meta = connector_calls.create(train, connection, epochs=1)
    until(meta, connection, phase("RUNNING"), "RUNNING", ctl)
    connector_calls.delete(meta, connection)
    aborted = until(meta, connection, phase("ABORTED"), "ABORTED", ctl)
    assert "cancel" in aborted.message
    connector_calls.delete(meta, connection)  # idempotent
