"""Checkpoint-aware preemption on the real Kueue (its `PriorityBoost` gate is on in the harness).

Two `low` gangs fill the ClusterQueue (2 nodes of 4 CPU each, 16 CPU in all): `saved`, admitted
first, and `unsaved`, admitted after it. Once `unsaved` has been up past the boost's first step,
`saved` reports a checkpoint committed just now (as a worker does: its container's termination
message, here the last state of a restarted container, since kwok runs no program). Then a `high`
Job needs the room of one gang.

* With `gangrun controller --priority-boost`, `unsaved` carries a higher boost than `saved` (which
  has nothing at risk): Kueue preempts `saved`, the gang that loses the least.
* Without it, Kueue preempts as it does by default among equal priority: the most recently
  admitted, `unsaved`, throwing its unsaved work away.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from gangrun import _checkpoint_report
from gangrun._core.priority_boost import ANNOTATION, BoostPolicy
from tests.e2e.test_controller_e2e import (
    TIMEOUT,
    controller,
    crd_installed,  # noqa: F401  (a fixture `env` needs)
    create_task,
    env,  # noqa: F401  (the fixture)
    is_running,
    is_waiting_for_readmission,
    jobset_uid,
    workload_of_jobset,
)
from tests.harness.addons import LOCAL_QUEUE, NODE_CPU
from tests.harness.client import Kube
from tests.harness.tasks import ATTEMPT_LABEL, TASK_LABEL, status, wait_status

pytestmark = pytest.mark.e2e

WORKER = "worker"
FIRST_STEP_SECONDS = 15.0  # 2 nodes reach the default first step, 30 node-seconds, after 15 s up


def boost_of(kube: Kube, ns: str, task: str) -> int | None:
    wl = workload_of_jobset(kube, ns, jobset_uid(kube, ns, f"{task}-1"))
    value = ((wl or {}).get("metadata", {}).get("annotations") or {}).get(ANNOTATION)
    return int(value) if value is not None else None


def report_commit(kube: Kube, ns: str, task: str, step: int) -> datetime:
    """What a worker that committed `step` just now leaves for the controller: its termination message
    (as the last state of its container; the gang keeps running)."""
    at = datetime.now(UTC)
    line = {"type": _checkpoint_report.COMMITTED, "task": task, "attempt": 1, "rank": 0, "seq": step, "step": step,
            "uri": f"memory://ckpt/{task}/attempt-1/step-{step}", "time": at.timestamp()}
    message = _checkpoint_report.report([json.dumps(line)])
    pod = kube.running_pods(ns, f"{TASK_LABEL}={task},{ATTEMPT_LABEL}=1")[0]
    statuses = pod["status"].get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == WORKER:
            cs["lastState"] = {"terminated": {"exitCode": 0, "reason": "Completed", "message": message,
                                              "finishedAt": at.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    kube.patch("Pod", pod["metadata"]["name"], ns, {"status": {"containerStatuses": statuses}}, subresource="status")
    return at


def high_job(ns: str) -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "urgent", "namespace": ns, "labels": {
            "kueue.x-k8s.io/queue-name": LOCAL_QUEUE, "kueue.x-k8s.io/priority-class": "high"}},
        "spec": {
            "suspend": True, "parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "example.invalid/job:1",
                                "resources": {"requests": {"cpu": str(NODE_CPU)}}}],
            }},
        },
    }


def scenario(env, *, boost: bool) -> str:  # noqa: F811
    """Run the two gangs and the high Job; return the name of the gang Kueue preempted."""
    cp, ns, _rec, _controllers = env
    kube = cp.kube
    ctl = controller(env, args=("--priority-boost",) if boost else ())
    create_task(kube, ns, "saved", resume=True, retries=0)
    wait_status(kube, ns, "saved", is_running, "saved running", ctl)
    create_task(kube, ns, "unsaved", resume=True, retries=0)
    wait_status(kube, ns, "unsaved", is_running, "unsaved running", ctl)
    time.sleep(FIRST_STEP_SECONDS + 2)  # `unsaved` now has work at risk past the first step
    committed = report_commit(kube, ns, "saved", step=40)
    wait_status(kube, ns, "saved", lambda s: ((s.get("accounting") or {}).get("lastCheckpoint") or {}).get("step")
                == 40, "the commit accounted", ctl)
    if boost:
        bottom = BoostPolicy().level(0)
        kube.wait_for("the boosts written", lambda: boost_of(kube, ns, "saved") == bottom
                      and (boost_of(kube, ns, "unsaved") or 0) > bottom, timeout=TIMEOUT, interval=0.2)
    else:
        assert boost_of(kube, ns, "saved") is None and boost_of(kube, ns, "unsaved") is None
    assert (datetime.now(UTC) - committed).total_seconds() < FIRST_STEP_SECONDS  # `saved` still has nothing at risk
    kube.create(high_job(ns))

    def victim() -> str | None:
        ctl.check()
        hit = [t for t in ("saved", "unsaved") if is_waiting_for_readmission(status(kube, ns, t))]
        return hit[0] if hit else None

    preempted = kube.wait_for("one gang preempted", victim, timeout=TIMEOUT, interval=0.2)
    time.sleep(1.0)  # the other one stays up: Kueue needed the room of one
    assert is_running(status(kube, ns, "unsaved" if preempted == "saved" else "saved"))
    return preempted


def test_the_gang_that_just_checkpointed_is_preempted_first_on_kueue(env) -> None:  # noqa: F811
    assert scenario(env, boost=True) == "saved"


def test_without_boosting_kueue_preempts_the_most_recently_admitted(env) -> None:  # noqa: F811
    assert scenario(env, boost=False) == "unsaved"
