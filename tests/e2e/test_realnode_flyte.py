"""The `gangrun` Flyte connector on real pods: a Flyte task's gang created through Flyte's own connector
service, preempted by Kueue, resumed from its own checkpoint in the same attempt, its rank 0's value in
Flyte's output location.

The cluster is the real-node tier's (realnode_tasks.real_cluster: the control plane with Kueue and
JobSet, a real kubelet and containerd, the gangrun controller in-cluster) with one more image,
`localhost/gangrun-flyte:dev` (hack/build-images.sh --flyte: gangrun with the flyte extra). Flyte's
connector service runs as a process on this host and is called over gRPC as Flyte's propeller calls
it (flyte_connector.py), with the task template Flyte serialises from a real `flyte` task
(flyte_gang_task.train). No Flyte deployment and no object store: Flyte's inputs, outputs and the
gang's checkpoints (the connector's default, `<output prefix>/_gangrun_checkpoints`) live in a host
folder that every pod mounts at the same path (a hostPath, which only a single node makes shared).

Needs what the real-node tests need (root, containerd, ...) and the flyte extra; without them it
skips, and with ``CI=true`` it fails.
"""

from __future__ import annotations

import importlib
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import _in_ci, real_node_images
from tests.harness.controlplane import ControlPlane
from tests.harness.realnode_tasks import (
    TIMEOUT,
    LogFollower,
    RealCluster,
    cleanup_task,
    new_running_pods,
    real_cluster,
    starts_by_rank,
    submit,
    train_task,
    wait_phase,
    worker_exits,
)
from tests.harness.tasks import TASK_LABEL, PodRecorder

if _in_ci():
    import flyte  # noqa: F401  (CI installs the flyte extra: a missing one fails here)
else:
    pytest.importorskip("flyte", reason="the flyte extra is not installed: pip install -e '.[flyte]'")

from flyteidl2.core.execution_pb2 import TaskExecution

from tests.e2e import flyte_connector
from tests.harness import realnode

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

HERE = Path(__file__).resolve().parent
STEPS, STEP_SECONDS = 40, 0.5
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module", name="real_cluster")
def real_cluster_fixture(control_plane_tier_c: ControlPlane) -> Iterator[RealCluster]:
    cp = control_plane_tier_c
    with real_cluster(cp, real_node_images(cp.binaries, flyte=True)) as rc:
        yield rc


def until(service: flyte_connector.ConnectorService, meta, pred, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        resource = service.get(meta)
        if pred(resource):
            return resource
        assert resource.phase not in (TaskExecution.FAILED, TaskExecution.ABORTED), resource
        if time.monotonic() > deadline:
            raise AssertionError(f"{meta.name}: {what} not within {timeout:.0f}s; last: "
                                 f"{TaskExecution.Phase.Name(resource.phase)} {resource.message}")
        time.sleep(0.3)


def test_a_flyte_task_s_gang_made_by_the_connector_is_preempted_resumes_its_own_checkpoint_and_returns_rank_0_s_value(
        real_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """CreateTask through Flyte's connector service → 2 real pods running Flyte's entrypoint in the image
    with flyte and gangrun; a higher-priority task makes Kueue preempt the gang; every rank saves and
    exits 143 with no outputs written; the gang is readmitted in attempt 1 and both ranks load the step
    saved at the stop; GetTask → SUCCEEDED, no retry used, rank 0's value in the output location."""
    rc = real_cluster
    monkeypatch.setenv("GANGRUN_E2E_FLYTE_DATA", str(rc.data))  # read by the task's module, here and in the pods
    monkeypatch.delitem(sys.modules, "tests.e2e.flyte_gang_task", raising=False)
    task_module = importlib.import_module("tests.e2e.flyte_gang_task")
    assert {k: task_module.PLACEMENT[k] for k in ("nodeSelector", "tolerations")} == realnode.placement()
    assert task_module.IMAGE == realnode.FLYTE_IMAGE and task_module.QUEUE == "real"
    task = task_module.train
    run_base, raw = rc.data / "run", rc.data / "raw"
    prefix = run_base / flyte_connector.ACTION
    for d in (run_base, raw, prefix):
        d.mkdir(exist_ok=True)
        d.chmod(0o1777)  # the image's user (65532) writes outputs and checkpoints here
    connection = {"kubeconfig": str(rc.cp.kubeconfig), "namespace": rc.ns}
    urgent = "flyte-urgent"
    rec = PodRecorder(rc.cp, rc.ns)
    meta = None
    with flyte_connector.connector_service(rc.data, connection) as service:
        try:
            t0 = time.monotonic()
            meta = service.create(task, prefix=prefix, run_base=run_base, raw=raw, root=HERE,
                                  steps=STEPS, step_seconds=STEP_SECONDS)
            assert meta.name.startswith("rnflyte-train-") and meta.namespace == rc.ns
            first = rc.kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={meta.name}", 2, timeout=TIMEOUT)
            TIMINGS["CreateTask -> 2 pods Running"] = time.monotonic() - t0
            spec = rc.kube.request("GET", f"/apis/gangrun.dev/v1alpha1/namespaces/{rc.ns}/clusteredtasks/{meta.name}")["spec"]
            assert spec["image"] == realnode.FLYTE_IMAGE
            assert spec["command"][:5] == ["python", "-m", "gangrun.flyte._worker", "flyte", "a0"]
            assert spec["checkpoint"]["uri"] == f"{prefix}/_gangrun_checkpoints"  # the connector's default
            first_uids = {p["metadata"]["uid"] for p in first}
            logs = [LogFollower(rc, p["metadata"]["name"]) for p in first]
            for f in logs:
                f.wait(r"step 5\n")
            assert until(service, meta, lambda r: r.phase == TaskExecution.RUNNING, "RUNNING")

            t1 = time.monotonic()
            submit(rc, train_task(rc, urgent, nodes=1, priority="high", steps=10))
            saved = {}
            for f in logs:
                m = f.wait(r"stop requested \((.*)\): saved step (\d+)")
                assert m.group(1) == "Preempted", f.text
                rank = re.search(r"rank (\d+)/2 attempt 1 restart 0: starting at step 0", f.text)
                assert rank, f.text
                saved[int(rank.group(1))] = int(m.group(2))
            exits = rc.kube.wait_for("both first workers terminated", lambda: (
                e if len(e := worker_exits(rec, first_uids)) == 2 else None), timeout=TIMEOUT)
            TIMINGS["preemptor created -> both ranks saved and exited"] = time.monotonic() - t1
            assert {e["exitCode"] for e in exits.values()} == {143}, exits  # stopped, never a success
            assert flyte_connector.outputs(task, prefix) is None  # a stopped rank 0 wrote no outputs
            waiting = service.get(meta)
            assert waiting.phase == TaskExecution.RUNNING, waiting  # a preemption is never a failure to Flyte

            wait_phase(rc, urgent, "Succeeded")
            t2 = time.monotonic()
            starts = starts_by_rank(rc, new_running_pods(rc, meta.name, 1, first_uids))
            TIMINGS["preemptor done -> both ranks reloaded their checkpoint"] = time.monotonic() - t2
            lines = {r: m.group(0) for r, m in starts.items()}
            assert set(starts) == {0, 1}, lines
            for r in (0, 1):  # the same attempt, its own checkpoint, the step saved at the stop
                assert (starts[r]["attempt"], starts[r]["source"]) == ("1", "own"), lines
                assert int(starts[r]["step"]) == saved[0], (lines, saved)

            t3 = time.monotonic()
            done = until(service, meta, lambda r: r.phase == TaskExecution.SUCCEEDED, "SUCCEEDED")
            TIMINGS["reloaded -> GetTask SUCCEEDED"] = time.monotonic() - t3
            TIMINGS["CreateTask -> GetTask SUCCEEDED"] = time.monotonic() - t0
            info = dict(done.custom_info)
            assert (info["attempt"], info["userRetriesUsed"], info["systemRetriesUsed"]) == (1, 0, 0), info
            total = STEPS * (STEPS + 1) // 2
            assert flyte_connector.outputs(task, prefix) == \
                f"total {total} on rank 0, attempt 1, resumed at step {saved[0]} (own)"
        finally:
            rec.stop()
            cleanup_task(rc, urgent)
            if meta is not None:
                service.delete(meta)  # idempotent: an ended gang is left as it is
                cleanup_task(rc, meta.name)
    for k, v in TIMINGS.items():
        print(f"real node, Flyte connector: {k}: {v:.1f} s")
