"""Worker output kept past its pods: the ConfigMap's budgets, order and encoding (`kept_output.py`), the
controller's keeper (`logkeep.py`) and `logs` reading it back (`--round`, `-f`)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from gangrun._backends.kube import kept_output
from gangrun._backends.kube.client import CONFIGMAPS, PODS, TASKS
from gangrun._backends.kube.kept_output import INDEX, PER_POD, add, merged, pieces, read, tail
from gangrun._errors import UsageError
from gangrun._ui.server import Pages
from tests.harness.kube_builders import T0, pod_obj, ts
from tests.kube.test_controller import Cluster


def keep(data: dict[str, str], text: str, *, attempt: int = 1, round: int = 0, rank: int = 0, uid: str = "",
         created: str = "2026-01-01T00:00:00Z", limit: int = kept_output.PER_TASK) -> dict[str, str]:
    uid = uid or f"u{len(pieces(data))}-{attempt}-{round}-{rank}-{created}"
    return merged(data, add(data, attempt=attempt, round=round, rank=rank, pod=f"pod-{uid}", uid=uid,
                            created=created, text=text, cut=False, limit=limit))


def test_a_pod_s_tail_is_its_newest_whole_lines_within_the_budget() -> None:
    assert tail(["a", "b", "c"], limit=100) == ("a\nb\nc", False)
    assert tail([f"line {i}" for i in range(1000)], limit=20) == ("line 998\nline 999", True)
    assert tail(["x" * 50], limit=10) == ("x" * 10, True)  # one line past the budget keeps its end
    text, cut = tail(("é" * 100 for _ in range(10_000)), limit=PER_POD)  # a generator: read once, held bounded
    assert cut and len(text.encode()) <= PER_POD and text.split("\n")[0] == "é" * 100


def test_pieces_sort_by_attempt_round_pod_creation_then_rank_whatever_order_they_were_kept_in() -> None:
    data: dict[str, str] = {}
    data = keep(data, "after-r1", round=1, rank=1, created="2026-01-01T00:05:00Z")
    data = keep(data, "after-r0", round=1, rank=0, created="2026-01-01T00:05:00Z")
    data = keep(data, "resumed", round=0, rank=0, created="2026-01-01T00:02:00Z")  # a readmission: same round
    data = keep(data, "first", round=0, rank=0, created="2026-01-01T00:00:00Z")
    data = keep(data, "attempt 2", attempt=2, round=0, rank=0)
    assert [t for _, t in read(data, attempt=1)] == ["first", "resumed", "after-r0", "after-r1"]
    assert [t for _, t in read(data, attempt=1, round=0)] == ["first", "resumed"]
    assert [t for _, t in read(data, attempt=1, rank=1)] == ["after-r1"]
    assert [t for _, t in read(data, attempt=2)] == ["attempt 2"]


def test_a_pod_is_kept_once_by_uid() -> None:
    data = keep({}, "once", uid="pod-uid")
    assert add(data, attempt=1, round=0, rank=0, pod="p", uid="pod-uid", created="", text="again", cut=False) == {}


def test_over_the_task_s_budget_the_oldest_rounds_go_first_never_the_new_piece() -> None:
    data: dict[str, str] = {}
    for r in range(10):  # ten rounds of 1,000 bytes into 4,000
        data = keep(data, str(r) * 1000, round=r, limit=4000)
        assert sum(len(v) for v in data.values()) <= 4000
    kept = [p.round for p in pieces(data)]
    assert kept == sorted(kept) and kept[-1] == 9 and 0 not in kept
    assert set(data) == {INDEX, *(p.key for p in pieces(data))}  # a dropped piece's text goes with it
    patch = add(data, attempt=1, round=10, rank=0, pod="p", uid="u10", created="", text="x" * 1000, cut=False,
                limit=4000)
    assert [k for k, v in patch.items() if v is None] == [pieces(data)[0].key]  # a merge patch: None deletes


def test_the_configmap_is_plain_strings_under_valid_keys_and_owned_by_the_task() -> None:
    data = keep({}, "hello\nworld", attempt=3, round=2, rank=1)
    (piece,) = pieces(data)
    assert all(isinstance(v, str) for v in data.values())
    assert all(c.isalnum() or c in "-._" for k in data for c in k)
    assert json.loads(data[INDEX])[0]["key"] == piece.key and data[piece.key] == "hello\nworld"
    cm = kept_output.configmap("train", "ml", "task-uid", "gangrun.dev/v1", "ClusteredTask", data)
    assert cm["metadata"]["name"] == "train.gangrun-output"
    assert cm["metadata"]["ownerReferences"] == [{"apiVersion": "gangrun.dev/v1", "kind": "ClusteredTask",
                                                  "name": "train", "uid": "task-uid"}]
    assert pieces({INDEX: "not json"}) == [] and pieces({INDEX: json.dumps([{"key": "gone"}])}) == []


# -- the controller keeps, `logs` reads ---------------------------------------------------------------


def ended(pod: dict, *, code: int = 143) -> dict:
    pod["status"]["containerStatuses"] = [{"name": "worker", "state": {"terminated": {"exitCode": code}}}]
    return pod


def running_gang(c: Cluster, *, created: str) -> None:
    for i in range(2):
        pod = pod_obj("train-1", i, started_at=T0)
        pod["metadata"]["creationTimestamp"] = created
        c.api.put(PODS, pod)


def logs(c: Cluster, **kw: object) -> list[str]:
    return list(c.backend.logs("train", **kw))  # type: ignore[arg-type]


def test_a_preempted_gang_s_output_is_kept_and_shown_before_the_resumed_gang_s_in_the_same_round() -> None:
    c = Cluster()
    c.submit(failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    c.admit()
    running_gang(c, created=ts(T0))
    for i in range(2):
        c.api.logs[("ml", f"train-1-workers-0-{i}-abcde")] = [f"before {i}", f"stop notice seen {i}"]
    c.settle()
    for i in range(2):  # a preemption: the kubelet stops each worker, then the pods are deleted
        c.api.put(PODS, ended(c.api.obj(PODS, "ml", f"train-1-workers-0-{i}-abcde")))
    c.settle()
    assert c.ctl.keeper is not None
    c.ctl.keeper.wait()
    for i in range(2):
        c.api.remove(PODS, "ml", f"train-1-workers-0-{i}-abcde")
    c.settle()  # the DELETED events do not read the pods again
    c.ctl.keeper.wait()
    assert sum(1 for v, _, _ in c.api.calls if v == "log") == 2
    running_gang(c, created=ts(T0 + timedelta(minutes=5)))  # readmitted: new pods, the same round 0
    for i in range(2):
        c.api.logs[("ml", f"train-1-workers-0-{i}-abcde")] = [f"after {i}"]
    assert logs(c) == ["[rank 0] before 0", "[rank 0] stop notice seen 0", "[rank 1] before 1",
                       "[rank 1] stop notice seen 1", "[rank 0] after 0", "[rank 1] after 1"]
    assert logs(c, rank=1, round=0) == ["before 1", "stop notice seen 1", "after 1"]
    cm = c.api.obj(CONFIGMAPS, "ml", "train.gangrun-output")
    assert cm is not None
    assert cm["metadata"]["ownerReferences"][0]["uid"] == c.api.obj(TASKS, "ml", "train")["metadata"]["uid"]


def test_after_the_pods_are_gone_the_kept_rounds_are_the_output() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.api.logs[("ml", "train-1-workers-0-0-abcde")] = ["round 0 of rank 0"]
    c.api.put(PODS, ended(pod_obj("train-1", 0), code=1))
    c.settle()
    assert c.ctl.keeper is not None
    c.ctl.keeper.wait()
    c.api.remove(PODS, "ml", "train-1-workers-0-0-abcde")
    c.api.remove(PODS, "ml", "train-1-workers-0-1-abcde")  # deleted before its container was seen to end
    c.settle()
    c.ctl.keeper.wait()
    assert logs(c, attempt=1, round=0) == ["[rank 0] round 0 of rank 0"]  # rank 1's log was gone: nothing kept
    page = Pages(c.backend).logs("train", rank=0, attempt=1)  # the web page's log view reads the same
    assert page["lines"] == ["round 0 of rank 0"]
    assert b"".join(Pages(c.backend).log_text("train", rank=None, attempt=None)) == b"[rank 0] round 0 of rank 0\n"
    with pytest.raises(UsageError, match="no worker pods for round 3 of attempt 1"):
        logs(c, round=3)
    with pytest.raises(UsageError, match="use one or the other"):
        logs(c, round=0, follow=True)


def test_follow_prints_the_kept_output_first_then_streams_only_pods_not_kept() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.api.logs[("ml", "train-1-workers-0-0-abcde")] = ["old 0"]
    c.api.logs[("ml", "train-1-workers-0-1-abcde")] = ["old 1"]
    for i in range(2):
        c.api.put(PODS, ended(pod_obj("train-1", i)))
    c.settle()
    assert c.ctl.keeper is not None
    c.ctl.keeper.wait()
    for i in range(2):
        c.api.remove(PODS, "ml", f"train-1-workers-0-{i}-abcde")
    for i in range(2):  # the next round's pods, started
        c.api.put(PODS, pod_obj("train-1", i, restart=1, started_at=T0))
        c.api.logs[("ml", f"train-1-workers-0-{i}-abcde")] = [f"new {i}"]
    c.backend.cancel("train")
    c.settle()
    assert sorted(logs(c, follow=True)[:2]) == ["[rank 0] old 0", "[rank 1] old 1"]
    assert sorted(logs(c, follow=True)[2:]) == ["[rank 0] new 0", "[rank 1] new 1"]


def test_a_write_that_conflicts_is_retried_from_the_newest_configmap_and_each_pod_is_read_once() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.api.logs[("ml", "train-1-workers-0-0-abcde")] = ["rank 0 out"]
    c.api.logs[("ml", "train-1-workers-0-1-abcde")] = ["rank 1 out"]
    c.api.fail("create", "configmaps", 409)  # another writer got there first (a former leader)
    c.api.fail("patch", "configmaps", 409)
    for i in range(2):
        c.api.put(PODS, ended(pod_obj("train-1", i), code=0))
    c.settle()
    assert c.ctl.keeper is not None
    c.ctl.keeper.wait()
    data = c.api.obj(CONFIGMAPS, "ml", "train.gangrun-output")["data"]
    assert [(p.rank, t) for p, t in read(data, attempt=1)] == [(0, "rank 0 out"), (1, "rank 1 out")]
    assert sum(1 for v, _, _ in c.api.calls if v == "log") == 2


def test_a_pod_being_deleted_is_followed_from_then_to_its_last_line_and_read_once() -> None:
    """Its worker prints its last lines in the grace period; the kubelet removes the log file moments after
    the pod is gone, so a read that waited for the container's end could find nothing."""
    c = Cluster()
    c.submit(failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    c.admit()
    running_gang(c, created=ts(T0))
    c.api.logs[("ml", "train-1-workers-0-0-abcde")] = ["step 10", "stop requested: saved step 10"]
    pod = c.api.obj(PODS, "ml", "train-1-workers-0-0-abcde")
    pod["metadata"]["deletionTimestamp"] = ts(T0 + timedelta(seconds=30))
    c.api.put(PODS, pod)
    c.settle()
    assert c.ctl.keeper is not None
    c.ctl.keeper.wait()
    assert c.api.followed == ["train-1-workers-0-0-abcde"]
    c.api.put(PODS, ended(c.api.obj(PODS, "ml", "train-1-workers-0-0-abcde")))
    c.api.remove(PODS, "ml", "train-1-workers-0-0-abcde")
    c.settle()
    c.ctl.keeper.wait()
    assert sum(1 for v, _, _ in c.api.calls if v == "log") == 1
    assert logs(c, rank=0, round=0) == ["step 10", "stop requested: saved step 10"]


def test_the_kubelet_s_words_for_a_removed_log_are_not_kept_as_the_worker_s_output() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.api.logs[("ml", "train-1-workers-0-0-abcde")] = [
        'failed to try resolving symlinks in path "/var/log/pods/ml_train-1-workers-0-0-abcde_u/worker/0.log": '
        "lstat /var/log/pods/ml_train-1-workers-0-0-abcde_u: no such file or directory"]
    c.api.put(PODS, ended(pod_obj("train-1", 0), code=0))
    c.settle()
    assert c.ctl.keeper is not None
    c.ctl.keeper.wait()
    assert c.api.obj(CONFIGMAPS, "ml", "train.gangrun-output") is None
