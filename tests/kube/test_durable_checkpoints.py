"""Checkpoints that survive a pod on Kubernetes, or a refusal at submit (issue 26 item 3): a task that
restarts its gang in new pods, whose checkpoints would stay on the old pods' own disks, is refused with one
line naming spec.checkpoint.uri and what to set; a volume mounted there, or shared storage, is accepted."""

from __future__ import annotations

from typing import Any

import pytest

from gangrun._backends.kube import KubeBackend
from gangrun._backends.kube.client import LOCAL_QUEUES, NAMESPACES, TASKS
from gangrun._backends.kube.durable import pod_local_path
from gangrun._core.spec import parse_manifest
from gangrun._errors import SpecError
from tests.harness.kube_builders import manifest
from tests.harness.kube_fake import FakeApi


def backend() -> tuple[FakeApi, KubeBackend]:
    api = FakeApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    return api, KubeBackend(api=api, namespace="ml")


def mounted_at(path: str, volume: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "worker", "volumeMounts": [{"name": "ck", "mountPath": path}]}],
                     "volumes": [{"name": "ck", **volume}]}}


RESUMES = [
    pytest.param({"failurePolicy": {"resumeAfterPreemption": True}}, "resumeAfterPreemption", id="resume-after-preemption"),
    pytest.param({"retries": 2}, "retries", id="retries"),
    pytest.param({"failurePolicy": {"maxRestarts": 1}}, "maxRestarts", id="max-restarts"),
]


@pytest.mark.parametrize(("resumes", "why"), RESUMES)
def test_a_resuming_task_with_checkpoints_on_the_pods_own_disk_is_refused_at_submit(resumes: dict, why: str) -> None:
    api, b = backend()
    with pytest.raises(SpecError, match=r"^spec\.checkpoint\.uri: is not set, so checkpoints go to "
                                        r"/var/lib/gangrun/checkpoints on each pod's own disk") as e:
        b.submit(parse_manifest(manifest(**resumes)))
    assert why in str(e.value) and "s3://" in str(e.value) and "mount a volume at /var/lib/gangrun/checkpoints" \
        in str(e.value) and "\n" not in str(e.value)
    assert api.names(TASKS) == []


def test_an_explicit_file_uri_without_a_volume_is_refused_too() -> None:
    _, b = backend()
    with pytest.raises(SpecError, match=r"^spec\.checkpoint\.uri: puts checkpoints to /ckpt on each pod's own disk"):
        b.submit(parse_manifest(manifest(retries=1, checkpoint={"uri": "file:///ckpt/"})))


@pytest.mark.parametrize("extra", [
    pytest.param({"checkpoint": {"uri": "s3://bucket/ck"}}, id="shared-storage"),
    pytest.param({"podTemplate": mounted_at("/var/lib/gangrun/checkpoints", {"persistentVolumeClaim": {
        "claimName": "ck"}})}, id="a-volume-at-the-default-path"),
    pytest.param({"checkpoint": {"uri": "file:///mnt/shared/ck"},
                  "podTemplate": mounted_at("/mnt/shared", {"nfs": {"server": "nfs", "path": "/x"}})},
                 id="a-volume-above-the-path"),
])
def test_a_resuming_task_whose_checkpoints_outlive_its_pods_is_accepted(extra: dict) -> None:
    api, b = backend()
    assert b.submit(parse_manifest(manifest(retries=1, failurePolicy={"resumeAfterPreemption": True}, **extra)))
    assert api.names(TASKS) == ["train"]


def test_a_task_that_never_restarts_may_checkpoint_on_the_pods_disk() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    assert api.names(TASKS) == ["train"]


@pytest.mark.parametrize(("uri", "path"), [("file:///a/b/", "/a/b"), ("/a/./b", "/a/b"), ("s3://b/k", None),
                                           ("gs://b", None)])
def test_pod_local_path(uri: str, path: str | None) -> None:
    assert pod_local_path(uri) == path
