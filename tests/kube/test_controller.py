"""The controller shell on an in-memory API: API errors, restarts and races never lose or duplicate
an attempt (issue #5 item 3)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest

from gangrun._backends.kube import KubeBackend, crd
from gangrun._backends.kube.client import EVENTS, JOBSETS, LOCAL_QUEUES, PODS, TASKS, WORKLOADS
from gangrun._backends.kube.controller import RBAC_HINT, REJECTED_EVENT, Controller
from gangrun._backends.kube.informer import Informer
from gangrun._backends.kube.workqueue import WorkQueue
from gangrun._core.spec import parse_manifest
from gangrun._errors import ApiError
from tests.harness.kube_builders import (
    PREEMPTION_MESSAGE,
    T0,
    commit_report,
    disrupted,
    jobset_obj,
    manifest,
    pod_obj,
    restarting_for_disruption,
    task_spec,
    terminated,
    workload_obj,
)
from tests.harness.kube_fake import FakeApi


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


SHARED_CHECKPOINTS = "s3://bucket/ck"


class Cluster:
    """A fake API, a controller on it, and the moves Kueue, JobSet and the kubelet would make."""

    def __init__(self, api: FakeApi | None = None) -> None:
        self.api = api or FakeApi()
        self.clock = Clock()
        self.ctl = Controller(self.api, namespace=None, clock=self.clock, identity="test")
        self.api.put(LOCAL_QUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                                    "metadata": {"name": "default", "namespace": "ml"}})
        self.backend = KubeBackend(api=self.api, namespace="ml")

    def submit(self, **spec: object) -> None:
        """Submit through the backend, with checkpoints in shared storage unless `spec` says where (a task
        that resumes from a pod's own disk is refused at submit)."""
        spec.setdefault("checkpoint", {"uri": SHARED_CHECKPOINTS})
        self.backend.submit(parse_manifest(manifest(**spec)))

    def settle(self, rounds: int = 10) -> None:
        """Relist every informer (as after watch events) and reconcile until the queue is empty."""
        for _ in range(rounds):
            for inf in self.ctl.informers:
                try:
                    inf.relist()
                except ApiError as e:
                    inf.forbidden = e.status == 403
            while self.ctl.process_one(timeout=0):
                pass

    def jobsets(self) -> list[str]:
        return self.api.names(JOBSETS, "ml")

    def creates(self, name: str) -> int:
        return sum(1 for verb, plural, n in self.api.calls if (verb, plural, n) == ("create", "jobsets", name))

    def status(self) -> dict:
        return self.api.obj(TASKS, "ml", "train")["status"]

    # -- the other controllers ------------------------------------------------------------------------

    def js(self, attempt: int = 1) -> dict:
        return self.api.obj(JOBSETS, "ml", f"train-{attempt}")

    def admit(self, attempt: int = 1) -> None:
        js = self.js(attempt)
        uid = js["metadata"]["uid"]
        self.api.put(WORKLOADS, workload_obj(uid, name=f"jobset-train-{attempt}").admitted().obj())
        js["spec"]["suspend"] = False
        js["status"] = {"restarts": 0, "conditions": [], "replicatedJobsStatus": [
            {"name": "workers", "ready": 1, "active": 1, "succeeded": 0, "failed": 0, "suspended": 0}]}
        self.api.put(JOBSETS, js)
        for i in range(2):
            self.api.put(PODS, pod_obj(f"train-{attempt}", i, attempt=attempt))

    def preempt(self, attempt: int = 1, *, deactivate: bool = False) -> None:
        uid = self.js(attempt)["metadata"]["uid"]
        wl = workload_obj(uid, name=f"jobset-train-{attempt}").admitted().evicted("Preempted", PREEMPTION_MESSAGE)
        wl = wl.preempted()
        if deactivate:
            wl = wl.inactive()
        self.api.put(WORKLOADS, wl.obj())
        js = self.js(attempt)
        js["spec"]["suspend"] = True
        self.api.put(JOBSETS, js)
        for i in range(2):
            self.api.remove(PODS, "ml", f"train-{attempt}-workers-0-{i}-abcde")

    def readmit(self, attempt: int = 1) -> None:
        uid = self.js(attempt)["metadata"]["uid"]
        wl = workload_obj(uid, name=f"jobset-train-{attempt}").admitted().evicted("Preempted", PREEMPTION_MESSAGE)
        self.api.put(WORKLOADS, wl.preempted().readmitted().obj())
        self.admit(attempt)

    def complete(self, attempt: int = 1) -> None:
        js = self.js(attempt)
        js["status"]["conditions"] = [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                                       "message": "jobset completed successfully"}]
        self.api.put(JOBSETS, js)


@contextmanager
def running(inf: Informer) -> Iterator[None]:
    """The informer's list-and-watch loop on a thread, for the body of the `with`."""
    stop = threading.Event()
    thread = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def eventually(predicate: Callable[[], bool], *, tries: int = 200) -> None:
    """Poll `predicate` every 10ms until it holds or `tries` run out; the caller asserts."""
    for _ in range(tries):
        if predicate():
            return
        time.sleep(0.01)


def test_submit_then_controller_creates_one_suspended_jobset_and_writes_status() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    assert c.jobsets() == ["train-1"] and c.js()["spec"]["suspend"] is True
    assert c.js()["metadata"]["ownerReferences"][0]["kind"] == "ClusteredTask"
    assert c.status()["phase"] == "WaitingForResources" and c.status()["attempt"] == 1
    assert c.creates("train-1") == 1


def test_s11_preempted_gang_resumes_on_the_same_attempt_and_succeeds() -> None:
    c = Cluster()
    c.submit(retries=0, failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    c.admit()
    c.settle()
    assert c.backend.get("train")["phase"] == "Running"
    c.preempt()
    c.settle()
    view = c.backend.get("train")
    assert view["phase"] == "Running" and view["reason"].endswith("waiting for re-admission")
    c.clock.advance(60)
    c.readmit()
    c.settle()
    assert c.backend.get("train")["reason"] == "running (restart attempt 0)"
    c.complete()
    c.settle()
    view = c.backend.get("train")
    assert view["phase"] == "Succeeded" and view["attempt"] == 1
    assert c.creates("train-1") == 1 and c.jobsets() == ["train-1"]
    assert view["evictionsByCause"] == {"Preempted": 1} and view["waitingForReadmissionSeconds"] == 60.0
    assert c.ctl.metrics.preemptions.value("Preempted") == 1
    assert c.ctl.metrics.readmission_wait.count == 1
    types = [e.type.value for e in c.backend.events("train")]
    assert types[:2] == ["Submitted", "GangCreated"] and "Readmitted" in types and types[-1] == "Succeeded"


@pytest.mark.parametrize(("preemptor", "named"), [
    pytest.param("gangrun", "task urgent", id="a-gangrun-task-by-its-name"),
    pytest.param("foreign", "JobSet other", id="another-job-by-its-kind-and-name"),
])
def test_the_preempted_event_names_the_preemptor_as_the_local_backend_does(preemptor: str, named: str) -> None:
    c = Cluster()
    c.submit(retries=0, failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    c.admit()
    c.settle()
    if preemptor == "gangrun":  # the job UID in PREEMPTION_MESSAGE is js-2
        js = jobset_obj(uid="js-2").obj()
        js["metadata"].update(name="urgent-1", labels={**js["metadata"]["labels"], crd.TASK_LABEL: "urgent"})
        c.api.put(JOBSETS, js)
    else:
        wl = workload_obj("js-2", name="jobset-other-12345").admitted().obj()
        wl["metadata"]["ownerReferences"][0].update(name="other")
        c.api.put(WORKLOADS, wl)
    c.preempt()
    c.settle()
    [event] = [e for e in c.backend.events("train") if e.type.value == "Preempted"]
    assert event.message.startswith(f"preempted by {named}; ")
    assert event.data["preemptor"] == named.split(" ", 1)[1]


def test_s11_deactivation_while_waiting_is_a_system_retry_with_a_fresh_gang() -> None:
    c = Cluster()
    c.submit(retries=0, failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    c.admit()
    c.settle()
    c.preempt(deactivate=True)
    c.settle()
    s = c.status()
    assert s["attempt"] == 2 and s["systemRetriesUsed"] == 1 and s["userRetriesUsed"] == 0
    assert c.jobsets() == ["train-2"]
    assert c.ctl.metrics.attempts.value("SystemRetry") == 1


def test_conflict_on_status_write_is_retried_without_duplicating_the_attempt() -> None:
    c = Cluster()
    c.submit()
    c.api.fail("patch-status", "clusteredtasks", 409, times=2)
    c.settle()
    assert c.status()["attempt"] == 1 and c.jobsets() == ["train-1"]
    assert c.ctl.metrics.errors.value() == 2


def test_server_errors_creating_the_jobset_are_retried_after_the_attempt_is_persisted() -> None:
    c = Cluster()
    c.submit()
    c.api.fail("create", "jobsets", 500, times=3)
    c.api.fail("create", "jobsets", 503)
    c.settle()
    assert c.status()["attempt"] == 1 and c.jobsets() == ["train-1"]


def test_restart_between_persisting_attempt_2_and_acting_neither_loses_nor_duplicates_it() -> None:
    c = Cluster()
    c.submit(retries=3)
    c.settle()
    c.admit()
    c.settle()
    c.preempt()
    c.api.fail("delete", "jobsets", 500)  # the new attempt is written, then the controller "dies"
    for inf in c.ctl.informers:
        inf.relist()
    c.ctl.process_one(timeout=0)
    assert c.status()["attempt"] == 2 and c.jobsets() == ["train-1"]
    fresh = Cluster(api=c.api)  # a new process: empty caches, empty queue
    fresh.clock.now = c.clock.now
    fresh.settle()
    assert fresh.status()["attempt"] == 2 and fresh.status()["userRetriesUsed"] == 1
    assert fresh.jobsets() == ["train-2"]


def test_forbidden_workloads_are_unreadable_a_started_eviction_is_a_system_retry_and_the_hint_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    c = Cluster()
    c.api.forbid("workloads")
    c.submit(retries=2)
    c.settle()
    c.api.allow("workloads")
    c.admit()
    c.api.forbid("workloads")
    with caplog.at_level(logging.WARNING):
        c.settle()
        c.preempt()
        c.settle()
    s = c.status()
    assert s["attempt"] == 2 and s["systemRetriesUsed"] == 1 and s["userRetriesUsed"] == 0
    assert sum(RBAC_HINT in r.getMessage() for r in caplog.records) == 1


def test_suspended_jobset_reads_the_workload_from_the_api_server_not_the_cache() -> None:
    c = Cluster()
    c.submit(retries=1)
    c.settle()
    c.admit()
    c.settle()
    for inf in c.ctl.informers:
        inf.relist()
    c.preempt()
    # Only the JobSet event arrived: the Workload cache still says admitted, not evicted (race 2).
    js = c.api.obj(JOBSETS, "ml", "train-1")
    c.ctl.jobsets.upsert(js)
    c.ctl.queue.add(("ml", "train"))
    c.ctl.process_one(timeout=0)
    s = c.status()
    assert s["attempt"] == 2 and s["userRetriesUsed"] == 1  # classified as Preempted, not a wait or unknown


def test_server_error_reading_workloads_of_a_suspended_gang_retries_instead_of_misclassifying() -> None:
    c = Cluster()
    c.submit(retries=1)
    c.settle()
    c.admit()
    c.settle()
    c.preempt()
    c.api.fail("list", "workloads", 500, times=1)
    for inf in (c.ctl.tasks, c.ctl.jobsets, c.ctl.pods):
        inf.relist()
    c.ctl.process_one(timeout=0)
    assert c.status()["attempt"] == 1  # not a system retry
    c.settle()
    assert c.status()["attempt"] == 2 and c.status()["userRetriesUsed"] == 1


def test_a_jobset_missing_from_a_stale_cache_is_read_before_it_is_called_deleted() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.settle()
    c.ctl.jobsets.remove(c.js())  # the cache lost it (e.g. mid-relist); the API server still has it
    c.ctl.queue.add(("ml", "train"))
    c.ctl.process_one(timeout=0)
    assert c.status()["attempt"] == 1 and c.status()["systemRetriesUsed"] == 0


def test_a_jobset_deleted_behind_our_back_is_a_system_retry() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.settle()
    c.api.remove(JOBSETS, "ml", "train-1")
    c.settle()
    assert c.status()["attempt"] == 2 and c.status()["systemRetriesUsed"] == 1
    assert c.jobsets() == ["train-2"]


def test_cancel_aborts_and_deletes_the_gang() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    assert c.backend.cancel("train") is True
    c.settle()
    assert c.backend.get("train")["phase"] == "Aborted" and c.jobsets() == []
    assert c.backend.cancel("train") is False


def test_workload_events_reach_the_task_through_the_jobset_uid() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    uid = c.js()["metadata"]["uid"]
    while c.ctl.process_one(timeout=0):
        pass
    c.ctl._workload_changed(workload_obj(uid).obj())
    assert c.ctl.queue.get(timeout=0) == ("ml", "train")


class ScanFreeInformer(Informer):
    """An informer whose whole-cache scan fails the test: reads must go through an index."""

    def items(self, predicate: Callable[[dict], bool] = lambda o: True) -> list[dict]:
        raise AssertionError(f"a sync scanned the whole {self.res.plural} cache")


def test_a_sync_finds_its_jobsets_pods_and_workloads_by_index_without_scanning_a_cache() -> None:
    c = Cluster()
    for inf in (c.ctl.jobsets, c.ctl.pods, c.ctl.workloads):
        inf.__class__ = ScanFreeInformer  # the controller's own informers, indexes and all
    c.submit(retries=0, failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    c.admit()
    c.settle()
    assert c.backend.get("train")["phase"] == "Running"
    c.preempt()
    c.settle()
    assert c.backend.get("train")["reason"].endswith("waiting for re-admission")
    c.readmit()
    c.settle()
    assert c.backend.get("train")["reason"] == "running (restart attempt 0)"
    c.complete()
    c.settle()
    assert c.backend.get("train")["phase"] == "Succeeded" and c.creates("train-1") == 1


def test_the_controller_uses_the_work_queue_it_is_given_even_an_empty_one() -> None:
    queue = WorkQueue()
    assert Controller(FakeApi(), namespace=None, queue=queue).queue is queue


def test_informer_relists_after_410_gone_and_misses_nothing() -> None:
    api = FakeApi()
    seen: list[str] = []
    inf = Informer(api, TASKS, namespace=None, on_change=lambda o: seen.append(o["metadata"]["name"]))
    api.put(TASKS, {"metadata": {"name": "a", "namespace": "ml"}})
    with running(inf):
        assert inf.synced.wait(5)
        api.compact()  # the informer's resourceVersion is now too old
        api.put(TASKS, {"metadata": {"name": "b", "namespace": "ml"}})
        eventually(lambda: inf.get(("ml", "b")) is not None and inf.relists >= 2)
    assert inf.get(("ml", "b")) is not None and inf.relists >= 2
    assert "b" in seen


def test_informer_reports_objects_deleted_while_it_was_not_watching() -> None:
    api = FakeApi()
    gone: list[str] = []
    inf = Informer(api, TASKS, namespace=None, on_change=lambda o: gone.append(o["metadata"]["name"]))
    api.put(TASKS, {"metadata": {"name": "a", "namespace": "ml"}})
    inf.relist()
    api.remove(TASKS, "ml", "a")
    gone.clear()
    inf.relist()
    assert gone == ["a"] and inf.get(("ml", "a")) is None


def test_cache_never_rolls_back_to_an_older_version_of_an_object() -> None:
    inf = Informer(FakeApi(), TASKS, namespace=None)
    assert inf.upsert({"metadata": {"name": "a", "namespace": "ml", "resourceVersion": "10"}})
    assert not inf.upsert({"metadata": {"name": "a", "namespace": "ml", "resourceVersion": "9"}})
    assert inf.get(("ml", "a"))["metadata"]["resourceVersion"] == "10"


def test_spec_used_by_builders_is_valid() -> None:
    assert task_spec().nodes == 2 and jobset_obj().obj()["metadata"]["name"] == "train-1"


def test_a_missing_kueue_crd_does_not_keep_the_informers_from_syncing() -> None:
    api = FakeApi()
    api.fail("list", "workloads", 404, times=1000)
    inf = Informer(api, WORKLOADS, namespace=None, max_backoff=0.01)
    with running(inf):
        assert inf.synced.wait(5) and not inf.forbidden and inf.items() == []


def test_an_informer_whose_watch_was_forbidden_for_a_while_stops_reporting_forbidden() -> None:
    api = FakeApi()
    api.fail("watch", "workloads", 403, times=2)  # e.g. RBAC granted list, and watch only a moment later
    inf = Informer(api, WORKLOADS, namespace=None, max_backoff=0.01)
    with running(inf):
        eventually(lambda: sum(1 for call in api.calls if call[0] == "watch") >= 4, tries=500)
        assert not inf.forbidden and inf.relists == 1


# -- issue 9: stop notices, node disruptions, checkpoints of pods that are gone -------------------------


def test_cancel_annotates_every_worker_pod_before_the_jobset_delete() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.settle()
    c.api.calls.clear()
    c.backend.cancel("train")
    c.settle()
    writes = [(verb, plural) for verb, plural, _ in c.api.calls if plural in ("pods", "jobsets")
              and verb in ("patch", "delete")]
    assert writes == [("patch", "pods"), ("patch", "pods"), ("delete", "jobsets")]
    for i in range(2):
        pod = c.api.obj(PODS, "ml", f"train-1-workers-0-{i}-abcde")
        assert '"cause": "Aborted"' in pod["metadata"]["annotations"][crd.STOP_NOTICE_ANNOTATION]
    assert c.status()["phase"] == "Aborted"


def test_a_pod_that_is_gone_before_a_sync_saw_it_still_counts_its_checkpoint_and_its_disruption() -> None:
    c = Cluster()
    c.submit(failurePolicy={"maxRestarts": 0})
    c.settle()
    c.admit()
    c.settle()
    c.clock.advance(30)
    pod = terminated(disrupted(pod_obj("train-1", 1), failed=True), code=143,
                     message=commit_report(step=8, t=c.clock.now))
    pod["status"]["conditions"] += disrupted(pod_obj("train-1", 1))["status"]["conditions"][-1:]
    c.api.put(PODS, pod)
    for inf in c.ctl.informers:  # the watch delivered the update...
        inf.relist()
    c.api.remove(PODS, "ml", "train-1-workers-0-1-abcde")  # ...and the delete, before any sync ran
    c.settle()  # syncs while JobSet has not restarted yet: the disruption is not in the status yet
    assert c.ctl._tombstones and not c.status().get("disruptions")
    js = restarting_for_disruption(c.js())
    c.api.put(JOBSETS, js)
    c.settle()
    s = c.status()
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"]) == (1, 0, 0)
    assert s["disruptions"][0]["worker"] == "pod train-1-workers-0-1-abcde"  # from the pod, not the fallback
    assert s["accounting"]["lastCheckpoint"]["step"] == 8
    assert not c.ctl._tombstones  # what the gone pod said is in the status now


def test_a_retried_attempts_workers_report_their_newest_checkpoint_after_the_next_attempt_began() -> None:
    """resumeAfterPreemption off: the preemption ends attempt 1 at once; its workers' termination
    messages come as they exit, after attempt 2 exists. Their commit is what attempt 2 loads and
    what the stop lost its work from, not the gang's start."""
    c = Cluster()
    c.submit(retries=1)
    c.settle()
    c.admit()
    c.settle()  # up at T0
    c.clock.advance(30)
    c.preempt()  # the old pods are gone from the cache at once; their last word comes below
    c.settle()
    assert c.status()["attempt"] == 2
    c.clock.advance(2)
    pod = terminated(pod_obj("train-1", 0), code=143,
                     message=commit_report(step=6, t=c.clock.now - timedelta(seconds=5),
                                           taken=c.clock.now - timedelta(seconds=6)))
    c.api.put(PODS, pod)
    for inf in c.ctl.informers:
        inf.relist()
    c.api.remove(PODS, "ml", "train-1-workers-0-0-abcde")  # gone before a sync saw it
    c.settle()
    acct = c.status()["accounting"]
    assert acct["lastCheckpoint"]["step"] == 6 and acct["lastCheckpoint"]["attempt"] == 1
    (lost,) = acct["workLost"]
    assert lost["attempt"] == 1  # its state was taken 26 s after the start and the stop came at 30 s:
    assert (datetime.fromisoformat(lost["at"]) - datetime.fromisoformat(lost["since"])).total_seconds() == 4.0
    assert not c.ctl._tombstones


def test_an_event_the_api_server_rejects_is_an_error_and_fails_a_strict_sync(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeApi()
    api.fail("create", EVENTS.plural, 422, times=100)
    c = Cluster(api)
    c.submit()
    with caplog.at_level(logging.ERROR):
        c.settle(rounds=1)
    assert any(REJECTED_EVENT in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    assert c.jobsets() == ["train-1"]  # a lenient controller still drives the task
    strict = Controller(api, namespace=None, clock=c.clock, identity="t", strict_events=True)
    for inf in strict.informers:
        inf.relist()
    with pytest.raises(ApiError):
        strict.sync(("ml", "train"))  # a status change records events: the rejection surfaces


def test_the_controller_exports_each_task_s_goodput_from_its_accounting() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.settle()
    c.clock.advance(60)
    c.ctl.refresh_gauges()
    page = c.ctl.metrics.render()
    (line,) = [x for x in page.splitlines() if x.startswith('gangrun_task_goodput_ratio{task="train"}')]
    assert 0 < float(line.split()[-1]) <= 1  # the gang has been up for most of the minute


def test_a_task_never_loads_a_checkpoint_it_did_not_write_kube_controller() -> None:
    """A task re-created under the name of one whose JobSet and pods are still being deleted takes neither for
    its own (their success, their checkpoints): its JobSet is created, labelled with its uid, once they are gone."""
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    old_uid = c.api.obj(TASKS, "ml", "train")["metadata"]["uid"]
    assert c.js()["metadata"]["labels"]["gangrun.dev/task-uid"] == old_uid
    for i in range(2):  # the kubelet runs the pod template: the pods carry the task's uid too
        pod = c.api.obj(PODS, "ml", f"train-1-workers-0-{i}-abcde")
        pod["metadata"]["labels"]["gangrun.dev/task-uid"] = old_uid
        c.api.put(PODS, pod)
    c.complete()
    c.settle()
    assert c.status()["phase"] == "Succeeded"
    c.api.remove(TASKS, "ml", "train")  # the garbage collector has not removed train-1 and its pods yet
    c.submit()
    c.settle()
    new_uid = c.api.obj(TASKS, "ml", "train")["metadata"]["uid"]
    assert new_uid != old_uid
    assert c.status()["phase"] != "Succeeded" and c.status()["attempt"] == 1
    assert c.js()["metadata"]["uid"] and c.js()["metadata"]["labels"]["gangrun.dev/task-uid"] == old_uid
    c.api.remove(JOBSETS, "ml", "train-1")
    for i in range(2):
        c.api.remove(PODS, "ml", f"train-1-workers-0-{i}-abcde")
    c.settle()
    assert c.js()["metadata"]["labels"]["gangrun.dev/task-uid"] == new_uid
    assert c.status()["phase"] == "WaitingForResources" and c.status()["attempt"] == 1
