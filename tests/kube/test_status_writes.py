"""How many status writes the controller makes, and how many it has in flight at once.

A preempt-and-readmit round is at most three writes per task (evicted, waiting for re-admission,
running again), however finely its objects change; changes that arrive while a task's write is in
flight make one more write, of the newest state; and the writes of many tasks go out together
rather than queueing behind a few workers.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gangrun._backends.kube.client import JOBSETS, PODS, WORKLOADS, connect
from gangrun._backends.kube.controller import DEFAULT_WORKERS, Controller, api_connections
from tests.harness.kube_builders import PREEMPTION_MESSAGE, pod_obj, workload_obj
from tests.harness.kube_fake import FakeApi
from tests.harness.kube_http import kubeconfig, serve
from tests.kube.test_controller import Cluster

PENDING = "couldn't assign flavors to pod set workers: insufficient unused quota for cpu in flavor default"


class CountingApi(FakeApi):
    """A fake API that records every status write (its phase and reason) and can hold them in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str]] = []
        self.hold: threading.Event | None = None  # set: status writes wait until it is set
        self.in_flight = threading.Event()

    def patch(self, res: Any, namespace: str | None, name: str, patch: dict[str, Any], *,
              subresource: str | None = None) -> dict[str, Any]:
        if subresource == "status":
            self.writes.append((patch["status"]["phase"], patch["status"]["reason"]))
            if self.hold is not None:
                self.in_flight.set()
                assert self.hold.wait(10), "the test never released the write"
        return super().patch(res, namespace, name, patch, subresource=subresource)


def running_task() -> tuple[Cluster, CountingApi]:
    """A resumable task whose gang runs, every status write of its start recorded and then forgotten."""
    api = CountingApi()
    c = Cluster(api)
    c.submit(retries=0, failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    admit_workload(c)
    c.settle()
    unsuspend(c)
    c.settle()
    pods(c, "Running", ready=True)
    jobset_ready(c, 2)
    c.settle()
    assert c.status()["reason"] == "running (restart attempt 0)"
    api.writes.clear()
    return c, api


# -- what Kueue, JobSet, the Job controller and the kubelet do, one object at a time --------------------

def admit_workload(c: Cluster) -> None:
    c.api.put(WORKLOADS, workload_obj(c.js()["metadata"]["uid"], name="jobset-train-1").admitted().obj())


def evicted(c: Cluster) -> Any:
    return workload_obj(c.js()["metadata"]["uid"], name="jobset-train-1").admitted() \
        .evicted("Preempted", PREEMPTION_MESSAGE).preempted()


def evict(c: Cluster) -> None:
    c.api.put(WORKLOADS, evicted(c).obj())


def requeue(c: Cluster) -> None:
    c.api.put(WORKLOADS, evicted(c).pending(PENDING).obj())


def readmit(c: Cluster) -> None:
    c.api.put(WORKLOADS, evicted(c).readmitted().obj())


def suspend(c: Cluster) -> None:
    js = c.js()
    js["spec"]["suspend"] = True
    c.api.put(JOBSETS, js)


def unsuspend(c: Cluster) -> None:
    js = c.js()
    js["spec"]["suspend"] = False
    js["status"] = {"restarts": 0, "conditions": [], "replicatedJobsStatus": [
        {"name": "workers", "ready": 0, "active": 0, "succeeded": 0, "failed": 0, "suspended": 0}]}
    c.api.put(JOBSETS, js)


def jobset_ready(c: Cluster, ready: int) -> None:
    js = c.js()
    js["status"]["replicatedJobsStatus"][0].update(ready=ready, active=2)
    c.api.put(JOBSETS, js)


def pods(c: Cluster, phase: str, *, node: str | None = "node-1", ready: bool = False) -> None:
    """The workers in `phase`; running ones carry their container's startedAt, as the kubelet writes it."""
    started = c.clock() if phase == "Running" else None
    for i in range(2):
        c.api.put(PODS, pod_obj("train-1", i, phase=phase, node=node, ready=ready, started_at=started))


def pods_gone(c: Cluster) -> None:
    for i in range(2):
        c.api.remove(PODS, "ml", f"train-1-workers-0-{i}-abcde")


ROUND = [evict, suspend, pods_gone, requeue, readmit, unsuspend,
         lambda c: pods(c, "Pending", node=None), lambda c: pods(c, "Pending"),
         lambda c: pods(c, "Running", ready=True), lambda c: jobset_ready(c, 1), lambda c: jobset_ready(c, 2)]


def test_a_preempt_and_readmit_round_writes_at_most_three_statuses_even_when_every_change_is_synced_apart() -> None:
    c, api = running_task()
    for step in ROUND:
        step(c)
        c.settle()  # every change reconciled on its own: nothing coalesces
        c.clock.advance(1)
    assert c.status()["reason"] == "running (restart attempt 0)" and c.status()["attempt"] == 1
    assert [reason.rsplit(";", 1)[-1].strip() for _, reason in api.writes] == [
        "waiting for re-admission",  # the eviction: the JobSet's suspension later changes nothing
        "running (restart attempt 0)",  # the JobSet unsuspended
        "running (restart attempt 0)"]  # its workers running again: up from their containers' start
    assert c.status()["accounting"]["upSince"] == c.status()["accounting"]["workersRunningAt"]


def test_s5_an_evicted_gang_waits_for_readmission_before_kueue_suspends_its_jobset() -> None:
    c, api = running_task()
    evict(c)  # the old workers still run: Kueue suspends the JobSet next, minutes later at scale
    c.settle()
    s = c.status()
    assert s["reason"].endswith("waiting for re-admission") and s["waitingForReadmission"]
    assert s["eviction"]["reason"] == "Preempted" and "workersRunningAt" not in s["accounting"]
    suspend(c)
    c.settle()
    assert len(api.writes) == 1, api.writes


def test_the_status_says_running_once_kueue_unsuspends_the_jobset_not_once_the_jobset_controller_reports_it() -> None:
    c, api = running_task()
    evict(c)
    js = c.js()
    js["spec"]["suspend"] = True
    js["status"]["conditions"] = [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs",
                                   "message": "jobset is suspended"}]
    c.api.put(JOBSETS, js)
    pods_gone(c)
    c.settle()
    readmit(c)
    c.settle()
    assert c.status()["reason"].endswith("waiting for re-admission")
    js = c.js()
    js["spec"]["suspend"] = False  # Kueue's write; the JobSet controller's Suspended=False comes later
    c.api.put(JOBSETS, js)
    c.settle()
    assert c.status()["reason"] == "running (restart attempt 0)" and not c.status()["waitingForReadmission"]


def test_a_sync_that_changes_nothing_writes_no_status() -> None:
    c, api = running_task()
    for _ in range(5):
        c.ctl.queue.add(("ml", "train"))
        c.settle()
        c.clock.advance(30)
    assert api.writes == []


def test_a_burst_of_changes_is_written_as_one_status() -> None:
    c, api = running_task()
    evict(c)
    for inf in c.ctl.informers:
        inf.relist()
    api.hold = threading.Event()
    worker = threading.Thread(target=c.ctl.process_one, kwargs={"timeout": 5})
    worker.start()
    assert api.in_flight.wait(5)  # the eviction's write is on its way to the API server
    for step in (suspend, pods_gone, requeue, readmit, unsuspend):  # Kueue and JobSet go on meanwhile
        step(c)
        for inf in c.ctl.informers:
            inf.relist()  # each change queues the task's key again
    api.hold.set()
    worker.join(5)
    api.hold = None
    assert len(c.ctl.queue) == 1  # the five changes wait as one sync
    while c.ctl.process_one(timeout=0):
        pass
    assert len(api.writes) == 2, api.writes  # the eviction, then the newest state once
    assert api.writes[-1][1] == "running (restart attempt 0)"


def test_the_status_writes_of_many_tasks_are_in_flight_at_once() -> None:
    n = 100
    assert n <= DEFAULT_WORKERS
    api = CountingApi()
    submitter = Cluster(api)  # its own controller never runs: it only submits
    for i in range(n):
        submitter.submit(name=f"t{i:03d}")
    together = threading.Barrier(n, timeout=20)
    lock = threading.Lock()
    first = [0]
    original = api.patch

    def patch(res: Any, namespace: str | None, name: str, body: dict[str, Any], *,
              subresource: str | None = None) -> dict[str, Any]:
        if subresource == "status":
            with lock:
                first[0] += 1
                wait = first[0] <= n
            if wait:
                together.wait()  # returns only once n status writes are in flight together
        return original(res, namespace, name, body, subresource=subresource)

    api.patch = patch  # type: ignore[method-assign]
    ctl = Controller(api, namespace=None, identity="test")
    stop = threading.Event()
    runner = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    runner.start()
    try:
        for _ in range(300):
            if len(api.names(JOBSETS, "ml")) == n or together.broken:
                break
            stop.wait(0.1)
    finally:
        stop.set()
        runner.join(15)
    assert not together.broken, "fewer status writes than tasks were in flight at once"
    assert len(api.names(JOBSETS, "ml")) == n


def test_the_api_client_keeps_a_connection_for_every_request_in_flight(tmp_path: Any) -> None:
    pytest.importorskip("kubernetes")
    server = serve(FakeApi())
    try:
        api, _ = connect(kubeconfig=str(kubeconfig(tmp_path / "kubeconfig", server)),
                         connections=api_connections(DEFAULT_WORKERS))
        pools = api._client.rest_client.pool_manager.connection_pool_kw
        assert pools["maxsize"] == api_connections(DEFAULT_WORKERS) > DEFAULT_WORKERS
    finally:
        server.shutdown()
