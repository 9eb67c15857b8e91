"""KubeBackend: generated names, delete (and reusing the name), why a gang waits, following logs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

import gangrun
from gangrun._backends.kube import KubeBackend, events
from gangrun._backends.kube import backend as kube_backend
from gangrun._backends.kube.backend import VISIBLE_QUEUES
from gangrun._backends.kube.client import EVENTS, JOBSETS, LOCAL_QUEUES, NAMESPACES, PODS, TASKS, WORKLOADS, Resource
from gangrun._backends.kube.stored import load_state
from gangrun._core import kueue
from gangrun._core.phases import Phase
from gangrun._core.spec import parse_manifest
from gangrun._core.state import Outcome
from gangrun._core.timeline import Event, EventType
from gangrun._errors import UsageError
from tests.harness.kube_builders import jobset_obj, manifest, pod_obj, workload_obj
from tests.harness.kube_fake import FakeApi

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PENDING = "couldn't assign flavors to pod set workers: insufficient unused quota for cpu in flavor default, 4 more needed"


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_backend, "FOLLOW_POLL", 0.01)


def backend() -> tuple[FakeApi, KubeBackend]:
    api = FakeApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    return api, KubeBackend(api=api, namespace="ml")


def set_status(api: FakeApi, name: str, change) -> None:
    task = api.obj(TASKS, "ml", name)
    state = change(load_state(task, now=NOW))
    api.patch(TASKS, "ml", name, {"status": state.for_storage()}, subresource="status")


def succeeded(state):
    ended = state.with_running(at=NOW, restart_attempt=0).with_attempt_ended(Outcome.SUCCEEDED, at=NOW, code="",
                                                                               reason="all workers succeeded")
    return ended.with_info(ended.info.advance(Phase.SUCCEEDED, "all workers succeeded"))


def running(state):
    started = state.with_running(at=NOW, restart_attempt=0)
    return started.with_info(started.info.advance(Phase.RUNNING, "running (restart attempt 0)"))


def aborted(state):
    ended = state.with_attempt_ended(Outcome.ABORTED, at=NOW, code="", reason="cancelled")
    return ended.with_info(ended.info.advance(Phase.ABORTED, "cancelled"))


# -- metadata.generateName --------------------------------------------------------------------------------


def test_generate_name_submits_a_prefix_and_returns_the_name_the_api_server_made() -> None:
    api, b = backend()
    doc = manifest()
    doc["metadata"] = {"generateName": "train-"}
    name = b.submit(parse_manifest(doc))
    assert name.startswith("train-") and len(name) == len("train-") + 5
    created = api.obj(TASKS, "ml", name)
    assert created["metadata"]["generateName"] == "train-" and created["spec"]["nodes"] == 2
    second = b.submit(parse_manifest(doc))
    assert second != name and b.get(second)["phase"] == "Queued"


# -- delete ---------------------------------------------------------------------------------------------


def test_delete_removes_an_ended_task_its_jobsets_and_events_and_frees_the_name() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    task = api.obj(TASKS, "ml", "train")
    api.put(JOBSETS, jobset_obj().obj())
    api.create(EVENTS, "ml", events.to_k8s(task, Event(time=NOW, type=EventType.SUBMITTED, message="submitted",
                                                       attempt=1), type_="Normal"))
    set_status(api, "train", succeeded)
    assert b.delete("train") is True
    assert api.names(TASKS) == [] and api.names(JOBSETS) == [] and api.names(EVENTS) == []
    with pytest.raises(UsageError, match="no task named train"):
        b.get("train")
    assert b.submit(parse_manifest(manifest())) == "train"
    assert b.events("train") == []  # nothing of the old task's timeline


def test_delete_refuses_a_task_that_has_not_ended_and_names_force() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    set_status(api, "train", running)
    with pytest.raises(UsageError, match=r"^task train is Running, not ended: cancel it first, or delete it with --force"):
        b.delete("train")
    assert api.names(TASKS) == ["train"]


def test_delete_force_asks_the_controller_to_cancel_then_deletes() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest(terminationGracePeriod="1s")))
    set_status(api, "train", running)

    def controller() -> None:  # what the controller does with the cancel annotation
        while "cancel-requested" not in str(api.obj(TASKS, "ml", "train")["metadata"].get("annotations")):
            threading.Event().wait(0.01)
        set_status(api, "train", aborted)

    t = threading.Thread(target=controller)
    t.start()
    assert b.delete("train", force=True) is True
    t.join(5)
    assert api.names(TASKS) == []


def test_delete_purge_removes_the_tasks_checkpoints_from_a_store_the_client_reaches() -> None:
    import fsspec

    api, b = backend()
    b.submit(parse_manifest(manifest(checkpoint={"uri": "memory://ck"})))
    uid = api.obj(TASKS, "ml", "train")["metadata"]["uid"]
    fs = fsspec.filesystem("memory")
    fs.pipe({f"/ck/train/{uid}/attempt-1/ckpt-000001/manifest.json": b"{}", "/ck/train/other-uid/attempt-1/x": b"x"})
    set_status(api, "train", succeeded)
    assert b.delete("train", purge=True) is True
    assert not fs.exists(f"/ck/train/{uid}") and fs.exists("/ck/train/other-uid/attempt-1/x")


def test_delete_purge_of_checkpoints_on_the_clusters_volumes_is_refused_before_anything_is_deleted() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    set_status(api, "train", succeeded)
    with pytest.raises(UsageError, match=r"^--purge: the checkpoints of task train are at file:///var/lib/gangrun/"):
        b.delete("train", purge=True)
    assert api.names(TASKS) == ["train"]


def test_delete_of_an_unknown_task_is_a_usage_error() -> None:
    _, b = backend()
    with pytest.raises(UsageError, match="no task named nope"):
        b.delete("nope")


# -- why a gang waits -------------------------------------------------------------------------------------


def waiting_task(api: FakeApi) -> KubeBackend:
    b = KubeBackend(api=api, namespace="ml")
    b.submit(parse_manifest(manifest()))
    api.patch(TASKS, "ml", "train", {"status": {"jobSet": "train-1"}}, subresource="status")
    api.put(JOBSETS, jobset_obj(uid="js-1").suspended().obj())
    api.put(WORKLOADS, workload_obj("js-1", name="jobset-train-1-ab12c")
            .cond(kueue.QUOTA_RESERVED, "False", kueue.PENDING, PENDING).obj())
    return b


def pending_summary(*names: str) -> dict:
    return {"metadata": {"name": "default", "namespace": "ml"},
            "items": [{"metadata": {"name": n}, "positionInLocalQueue": i, "positionInClusterQueue": i}
                      for i, n in enumerate(names)]}


PENDING_QUEUES = Resource(VISIBLE_QUEUES.group, VISIBLE_QUEUES.version, f"localqueues/{kueue.PENDING_WORKLOADS}",
                          "LocalQueue")


def test_a_waiting_task_shows_kueues_pending_message_and_its_place_in_the_queue() -> None:
    api = FakeApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    api.put(PENDING_QUEUES, pending_summary("jobset-other-1-xxxxx", "jobset-train-1-ab12c"))
    view = waiting_task(api).get("train")
    assert (view["pending"], view["queuePosition"]) == (PENDING, 2)


def test_without_the_visibility_api_the_position_is_unknown_and_not_asked_again() -> None:
    api = FakeApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    b = waiting_task(api)  # no pendingworkloads served: 404, as with VisibilityOnDemand off
    assert (b.get("train")["pending"], b.get("train")["queuePosition"]) == (PENDING, None)
    asked = [c for c in api.calls if c[1] == f"localqueues/{kueue.PENDING_WORKLOADS}"]
    assert len(asked) == 1


def test_a_running_task_reads_no_workload() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    set_status(api, "train", running)
    api.calls.clear()
    view = b.get("train")
    assert "pending" not in view and not [c for c in api.calls if c[1] in ("workloads", "jobsets")]


def test_the_view_carries_the_retry_budget() -> None:
    _, b = backend()
    b.submit(parse_manifest(manifest(retries=2, checkpoint={"uri": "s3://bucket/ck"})))
    view = b.get("train")
    assert (view["retries"], view["retriesLeft"], view["maxSystemRetries"]) == (2, 2, 3)


# -- logs --follow across rounds of pods ---------------------------------------------------------------


class _RoundsApi(FakeApi):
    """Pod rounds appear one after another: a gang preempted and readmitted runs in new pods."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[list[tuple[dict, list[str]]]] = []
        self.on_end = lambda: None

    def log_lines(self, namespace: str, pod: str, *, container: str | None = None,
                  follow: bool = False) -> Iterator[str]:
        yield from super().log_lines(namespace, pod, container=container, follow=follow)
        # the pod's stream ends: its round is over; the next round's pods replace it
        self.remove(PODS, namespace, pod)
        if self.rounds:
            for p, lines in self.rounds.pop(0):
                self.put(PODS, p)
                self.logs[(namespace, p["metadata"]["name"])] = lines
        else:
            self.on_end()


def test_logs_follow_streams_each_round_of_pods_once_until_the_task_ends() -> None:
    api = _RoundsApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    b = KubeBackend(api=api, namespace="ml")
    b.submit(parse_manifest(manifest()))
    set_status(api, "train", running)
    first = pod_obj("train-1", 0)
    api.put(PODS, first)
    api.logs[("ml", first["metadata"]["name"])] = ["step 1", "step 2 (preempted)"]
    second = pod_obj("train-1", 0)
    second["metadata"]["name"] = "train-1-workers-0-0-again"
    api.rounds.append([(second, ["resumed at step 2", "done"])])
    api.on_end = lambda: set_status(api, "train", succeeded)
    assert list(b.logs("train", rank=0, follow=True)) == ["step 1", "step 2 (preempted)", "resumed at step 2", "done"]


def test_delete_purge_is_refused_while_a_task_resumes_from_those_checkpoints_unless_forced() -> None:
    import fsspec

    api, b = backend()
    b.submit(parse_manifest(manifest(checkpoint={"uri": "memory://ck"})))
    b.submit(parse_manifest(manifest("end", checkpoint={"uri": "memory://ck", "resumeFrom": "train"})))
    b.submit(parse_manifest(manifest("done", checkpoint={"uri": "memory://ck", "resumeFrom": "train"})))
    set_status(api, "done", succeeded)  # an ended task loads nothing any more: not a dependent
    uid = api.obj(TASKS, "ml", "train")["metadata"]["uid"]
    fsspec.filesystem("memory").pipe({f"/ck/train/{uid}/attempt-1/ckpt-000001/manifest.json": b"{}"})
    set_status(api, "train", succeeded)
    refused = r"^--purge: end has not ended and resumes from the checkpoints of train \(spec\.checkpoint\.resumeFrom\)"
    with pytest.raises(UsageError, match=refused):
        b.delete("train", purge=True)
    assert "train" in api.names(TASKS)
    assert b.delete("train", purge=True, force=True) is True
    assert not fsspec.filesystem("memory").exists(f"/ck/train/{uid}")


def test_purging_what_a_deleted_task_kept_says_where_to_look_on_kubernetes() -> None:
    import gangrun

    _, b = backend()
    with pytest.raises(UsageError, match=r'^unknown task "train": the kubernetes backend keeps no record of a '
                                         r"deleted task's checkpoints; they stay under <spec\.checkpoint\.uri>/train/"):
        gangrun.purge_checkpoints("train", b)


class _LateStartApi(FakeApi):
    """Rank 1's pod starts while rank 0's stream is open, and rank 0 prints its last line only after
    rank 1 printed its first (or after a timeout, when nobody streams rank 1 meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.rank1_spoke = threading.Event()
        self.on_end = lambda: None

    def log_lines(self, namespace: str, pod: str, *, container: str | None = None,
                  follow: bool = False) -> Iterator[str]:
        if "-workers-0-1-" in pod:
            yield "rank 1 started late"
            self.rank1_spoke.set()
            return
        yield "rank 0 step 1"
        late = self.obj(PODS, namespace, pod.replace("-workers-0-0-", "-workers-0-1-"))
        late["status"]["phase"] = "Running"
        self.put(PODS, late)
        self.rank1_spoke.wait(timeout=2)
        yield "rank 0 done"
        self.on_end()


def test_logs_follow_streams_a_pod_that_starts_while_another_streams() -> None:
    api = _LateStartApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    b = KubeBackend(api=api, namespace="ml")
    b.submit(parse_manifest(manifest()))
    set_status(api, "train", running)
    api.put(PODS, pod_obj("train-1", 0))
    api.put(PODS, pod_obj("train-1", 1, phase="Pending"))
    api.on_end = lambda: set_status(api, "train", succeeded)
    assert list(b.logs("train", follow=True)) == [
        "[rank 0] rank 0 step 1", "[rank 1] rank 1 started late", "[rank 0] rank 0 done"]


def retried(state):
    """Attempt 1 preempted (resumeAfterPreemption off: a user retry), attempt 2 running."""
    ended = state.with_running(at=NOW, restart_attempt=0).with_attempt_ended(
        Outcome.USER_RETRY, at=NOW, code="GangEvicted", reason="gang evicted by kueue (Preempted, InClusterQueue)")
    return running(ended.with_next_attempt(at=NOW))


class _ThenApi(FakeApi):
    """When a pod's stream ends, what the test says happens next (the pod goes, the status moves)."""

    def __init__(self) -> None:
        super().__init__()
        self.then: dict[str, Callable[[], None]] = {}

    def log_lines(self, namespace: str, pod: str, *, container: str | None = None,
                  follow: bool = False) -> Iterator[str]:
        yield from super().log_lines(namespace, pod, container=container, follow=follow)
        self.remove(PODS, namespace, pod)
        self.then.pop(pod, lambda: None)()


def test_logs_follow_without_an_attempt_goes_on_into_the_next_attempt_after_a_preemption() -> None:
    api = _ThenApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    b = KubeBackend(api=api, namespace="ml")
    b.submit(parse_manifest(manifest()))
    set_status(api, "train", running)
    first, second = pod_obj("train-1", 0), pod_obj("train-2", 0, attempt=2)
    api.put(PODS, first)
    api.logs[("ml", first["metadata"]["name"])] = ["step 1", "step 2 (preempted)"]
    api.logs[("ml", second["metadata"]["name"])] = ["attempt 2 from step 2", "done"]

    def next_attempt() -> None:
        set_status(api, "train", retried)
        api.put(PODS, second)

    api.then = {first["metadata"]["name"]: next_attempt,
                second["metadata"]["name"]: lambda: set_status(api, "train", succeeded)}
    run = gangrun.TaskRun("train", b)
    assert list(run.log_lines(rank=0, follow=True)) == [
        "step 1", "step 2 (preempted)", "attempt 2 from step 2", "done"]
