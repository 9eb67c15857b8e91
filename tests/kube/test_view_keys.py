"""The Kubernetes backend's `get -o json` has the keys `gangrun._core.view_types.KubeView` declares, no
other, down to its nested documents: a key renamed in the builder or in the types fails here (and the
readers, typed by the same definitions, fail mypy)."""

from __future__ import annotations

from gangrun._backends.kube import KubeBackend
from gangrun._backends.kube.client import LOCAL_QUEUES, NAMESPACES, TASKS
from gangrun._core.accounting import Accounting
from gangrun._core.accounting_records import CheckpointMark, WorkLost
from gangrun._core.eviction import EvictionKind
from gangrun._core.phases import Phase, PhaseInfo
from gangrun._core.state import AttemptRecord, EvictionRecord, Outcome, TaskState
from gangrun._core.view_types import KubeView, ListedView, TaskView
from tests.harness.kube_builders import T0, at, task_obj
from tests.harness.kube_fake import FakeApi
from tests.harness.view_shape import check_shape


def backend(*objs: dict) -> KubeBackend:
    api = FakeApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    for obj in objs:
        api.put(TASKS, obj)
    return KubeBackend(api=api, namespace="ml")


def lived() -> dict:
    """A status with every part a view shows: a retried attempt, an open eviction (the gang waits for
    re-admission), accounting with a checkpoint, work lost and a final save, and resumeFrom's result."""
    eviction = EvictionRecord(attempt=2, kind=EvictionKind.PREEMPTED, reason="Preempted", detail="InClusterQueue",
                              message="room for urgent", at=at(30))
    state = TaskState(
        info=PhaseInfo(phase=Phase.RUNNING, version=5, reason="gang evicted by kueue; waiting for re-admission"),
        attempt=2, started=True, gang_seen=True, user_retries_used=1, waiting=True, eviction=eviction,
        attempts=(AttemptRecord(number=1, started_at=at(0), running_at=at(2), ended_at=at(10),
                                outcome=Outcome.USER_RETRY, code="WorkerFailed", reason="worker exited 1"),
                  AttemptRecord(number=2, started_at=at(10), running_at=at(12))),
        evictions=(eviction,))
    acct = Accounting(submitted_at=T0, gang_up_seconds=20.0, final_saves=(0.5,),
                      last_checkpoint=CheckpointMark(attempt=2, step=4, at=at(25), uri="s3://b/t", taken_at=at(24)),
                      work_lost=(WorkLost(attempt=2, cause="Preempted", at=at(30), since=at(24)),))
    status = {**state.for_storage(), "accounting": acct.for_storage(), "jobSet": "train-2", "runningNodes": 0,
              "resumeFromResult": {"found": True, "uri": "s3://b/old", "step": 3, "at": at(13).isoformat()}}
    return task_obj(status=status, maxRuntime="1h", minNodes=1)


def test_a_task_with_every_part_of_a_view_has_the_declared_keys() -> None:
    view = backend(lived()).get("train")
    check_shape(view, KubeView)
    assert {"eviction", "retriesLeft", "pending", "queuePosition"} <= set(view)
    assert view["accounting"]["lastCheckpoint"] is not None and view["accounting"]["grace"] is not None
    assert view["accounting"]["workLost"] and view["attempts"][0]["outcome"] == "UserRetry"


def test_a_new_task_and_a_task_whose_spec_no_longer_reads_have_the_declared_keys() -> None:
    broken = task_obj("broken", status={"phase": "Failed", "phaseVersion": 1, "reason": "invalid spec",
                                        "attempt": 1, "code": "InvalidSpec", "message": "spec.nodes: must be >= 1"},
                      nodes=0)
    b = backend(task_obj("fresh"), broken)
    views = b.list()
    assert [v["name"] for v in views] == ["broken", "fresh"]
    for view in views:
        check_shape(view, ListedView)
        check_shape(view, TaskView)
    assert b.get("broken")["nodes"] is None and "retriesLeft" not in b.get("broken")


def test_the_shape_check_names_a_renamed_key() -> None:
    view = dict(backend(lived()).get("train"))
    view["attempts"] = [{**view["attempts"][0], "started": view["attempts"][0]["startedAt"]}]
    del view["attempts"][0]["startedAt"]
    try:
        check_shape(view, KubeView)
    except AssertionError as e:
        assert "startedAt" in str(e) and "started" in str(e)
    else:
        raise AssertionError("a renamed key went unnoticed")
