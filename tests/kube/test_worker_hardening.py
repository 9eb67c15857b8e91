"""Worker pods run as non-root, without privilege escalation or capabilities, on a read-only root
filesystem with an emptyDir wherever a worker writes; a user's podTemplate overrides any of it
(issue 29 item 6). The controller's Deployment is held to the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gangrun._backends.kube import render_jobset
from tests.harness.kube_builders import task_spec

ROOT = Path(__file__).resolve().parents[2]


def _pod(**spec: Any) -> dict[str, Any]:
    return render_jobset(task_spec(**spec))["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def _worker(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["containers"] if c["name"] == "worker")


def _mounts(pod: dict[str, Any]) -> dict[str, str]:
    """mountPath -> the kind of volume behind it."""
    volumes = {v["name"]: next(k for k in v if k != "name") for v in pod["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in _worker(pod)["volumeMounts"]}


def test_a_worker_runs_non_root_without_privileges_on_a_read_only_root_filesystem() -> None:
    pod = _pod()
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert _worker(pod)["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                               "capabilities": {"drop": ["ALL"]}}


def test_under_a_read_only_root_tmp_and_the_default_checkpoint_root_are_emptydirs() -> None:
    mounts = _mounts(_pod())
    assert mounts["/tmp"] == "emptyDir"  # the checkpoint SDK's process cache, torchrun, tempfile
    assert mounts["/var/lib/gangrun/checkpoints"] == "emptyDir"  # the default file:// root, as long as the pod
    assert mounts["/var/run/gangrun"] == "emptyDir" and mounts["/etc/gangrun"] == "downwardAPI"


@pytest.mark.parametrize("uri, kept", [
    pytest.param("s3://bucket/ckpt", None, id="object-store-needs-no-local-directory"),
    pytest.param("file:///data/ckpt", "/data/ckpt", id="a-file-root-of-its-own"),
])
def test_the_checkpoint_emptydir_follows_the_checkpoint_uri(uri: str, kept: str | None) -> None:
    mounts = _mounts(_pod(checkpoint={"uri": uri}))
    assert [p for p in mounts if p not in ("/tmp", "/etc/gangrun", "/var/run/gangrun")] == ([kept] if kept else [])


def test_a_volume_the_user_mounts_at_or_above_a_writable_path_is_kept_instead_of_an_emptydir() -> None:
    template = {"spec": {"containers": [{"name": "worker", "volumeMounts": [
        {"name": "shared", "mountPath": "/var/lib/gangrun"}, {"name": "scratch", "mountPath": "/tmp/"}]}],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "ckpt"}},
                    {"name": "scratch", "hostPath": {"path": "/scratch"}}]}}
    pod = _pod(podTemplate=template)
    assert [v["name"] for v in pod["volumes"] if v["name"].startswith("gangrun-")] == ["gangrun-notice",
                                                                                       "gangrun-run"]


def test_the_user_s_security_context_wins_key_by_key() -> None:
    template = {"spec": {"securityContext": {"runAsUser": 1000, "fsGroup": 1000},
                         "containers": [{"name": "worker", "securityContext": {
                             "readOnlyRootFilesystem": False, "capabilities": {"add": ["IPC_LOCK"]}}}]}}
    pod = _pod(podTemplate=template)
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                                      "runAsUser": 1000, "fsGroup": 1000}
    assert _worker(pod)["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": False,
                                               "capabilities": {"add": ["IPC_LOCK"]}}
    assert "/tmp" not in _mounts(pod)  # a writable root needs no emptyDirs


def test_a_template_that_asks_for_root_is_not_refused_by_the_non_root_default() -> None:
    template = {"spec": {"containers": [{"name": "worker", "securityContext": {"runAsUser": 0}}]}}
    pod = _pod(podTemplate=template)
    assert "runAsNonRoot" not in pod["securityContext"]


def test_the_controller_deployment_runs_non_root_read_only_with_a_writable_tmp() -> None:
    (dep,) = [d for d in yaml.safe_load_all((ROOT / "deploy" / "deployment.yaml").read_text())
              if d and d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    (tmp,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in volumes[tmp["name"]]
