"""KubeBackend: the CLI's Backend on a cluster (submit, get, list, events, logs, cancel)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_builders import manifest, pod_obj
from kube_fake import FakeApi

from gangrun import cli
from gangrun._backends.kube import KubeBackend
from gangrun._backends.kube.client import LOCAL_QUEUES, PODS, TASKS
from gangrun._core.spec import parse_manifest
from gangrun._errors import SpecError, UsageError


def backend() -> tuple[FakeApi, KubeBackend]:
    api = FakeApi()
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    return api, KubeBackend(api=api, namespace="ml")


def test_submit_creates_the_clustered_task_in_the_namespace() -> None:
    api, b = backend()
    assert b.submit(parse_manifest(manifest())) == "train"
    obj = api.obj(TASKS, "ml", "train")
    assert obj["apiVersion"] == "gangrun.dev/v1alpha1" and obj["spec"]["nodes"] == 2
    view = b.get("train")
    assert view["phase"] == "Queued" and view["attempt"] == 1 and view["namespace"] == "ml"


def test_submitting_a_duplicate_name_is_a_usage_error() -> None:
    _, b = backend()
    b.submit(parse_manifest(manifest()))
    with pytest.raises(UsageError, match="already exists"):
        b.submit(parse_manifest(manifest()))


def test_submit_refuses_a_missing_queue_and_a_missing_image() -> None:
    _, b = backend()
    with pytest.raises(UsageError, match='LocalQueue "team-z" does not exist'):
        b.submit(parse_manifest(manifest(queue="team-z")))
    with pytest.raises(SpecError, match="spec.image"):
        b.submit(parse_manifest(manifest(image="")))


def test_submit_goes_ahead_when_queues_cannot_be_read() -> None:
    api, b = backend()
    api.forbid("localqueues")
    assert b.submit(parse_manifest(manifest(queue="team-z"))) == "train"


def test_unknown_task_is_a_usage_error() -> None:
    _, b = backend()
    with pytest.raises(UsageError, match="no task named nope"):
        b.get("nope")


def test_list_returns_views_sorted_by_name() -> None:
    _, b = backend()
    b.submit(parse_manifest(manifest("b")))
    b.submit(parse_manifest(manifest("a")))
    assert [v["name"] for v in b.list()] == ["a", "b"]


def test_logs_by_rank_and_all_ranks_prefixed() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    for i in range(2):
        pod = pod_obj("train-1", i)
        api.put(PODS, pod)
        api.logs[("ml", pod["metadata"]["name"])] = [f"hello from {i}"]
    assert list(b.logs("train", rank=1)) == ["hello from 1"]
    assert list(b.logs("train")) == ["[rank 0] hello from 0", "[rank 1] hello from 1"]
    with pytest.raises(UsageError, match="no worker pods"):
        list(b.logs("train", attempt=3))


def test_logs_show_only_the_newest_restart_round() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    old, new = pod_obj("train-1", 0, restart=0), pod_obj("train-1", 0, restart=1)
    new["metadata"]["name"] = "train-1-workers-0-0-zzzzz"
    for pod, line in ((old, "old"), (new, "new")):
        api.put(PODS, pod)
        api.logs[("ml", pod["metadata"]["name"])] = [line]
    assert list(b.logs("train", rank=0)) == ["new"]


def test_a_missing_kubeconfig_is_one_line_for_the_user_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "kubeconfig"
    with pytest.raises(UsageError, match="cannot load the Kubernetes configuration"):
        KubeBackend(kubeconfig=str(missing)).get("train")
    assert cli.main(["--backend", "kubernetes", "--kubeconfig", str(missing), "get"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("gangrun: error: cannot load the Kubernetes configuration") and "Traceback" not in err
