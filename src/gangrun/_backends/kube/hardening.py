"""The worker pod's security defaults: non-root, no privilege escalation, no capabilities, a read-only
root filesystem with an emptyDir wherever a worker must write. Pure, on the merged pod template.

    harden(template, writable={"gangrun-tmp": "/tmp", ...}) -> template

Defaults, not rules: every key the user's `spec.podTemplate` sets in the pod's or the worker
container's `securityContext` wins over gangrun's, key by key (`capabilities` as a whole). Where the
root filesystem stays read-only, each `writable` path the worker container does not already mount (at
or above it) gets an emptyDir of its own, of the name it is given: /tmp (the checkpoint SDK's process
cache, torchrun's files, `tempfile`) and a `file://` checkpoint root no volume of the user's holds. A user who sets
`runAsUser: 0` asked for root, so `runAsNonRoot` is then left out rather than refusing the pod.
"""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlparse

from gangrun._core import pod_template

POD_SECURITY: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
WORKER_SECURITY: dict[str, Any] = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                   "capabilities": {"drop": ["ALL"]}}
TMP_VOLUME, CHECKPOINT_VOLUME = "gangrun-tmp", "gangrun-checkpoints"
TMP = "/tmp"


def local_dir(uri: str) -> str | None:
    """The directory a `file://` checkpoint root writes to inside the pod; None for an object store."""
    parsed = urlparse(uri)
    return posixpath.normpath(parsed.path) if parsed.scheme == "file" and parsed.path.startswith("/") else None


def _covered(path: str, mounts: Iterable[dict[str, Any]]) -> bool:
    """Whether a mount sits at `path` or above it."""
    for m in mounts:
        at = posixpath.normpath(str(m.get("mountPath") or "")) if m.get("mountPath") else ""
        if at and (path == at or path.startswith(at.rstrip("/") + "/")):
            return True
    return False


def _asks_for_root(*contexts: dict[str, Any]) -> bool:
    return any(c.get("runAsUser") == 0 for c in contexts)


def harden(template: dict[str, Any], *, writable: Mapping[str, str]) -> dict[str, Any]:
    """`template` with the security defaults under the user's own settings (see the module docstring)."""
    out = copy.deepcopy(template)
    spec = out.setdefault("spec", {})
    worker = next(c for c in spec.get("containers") or [] if c.get("name") == pod_template.WORKER)
    theirs_pod = dict(spec.get("securityContext") or {})
    theirs_worker = dict(worker.get("securityContext") or {})
    pod_defaults = dict(POD_SECURITY)
    if _asks_for_root(theirs_pod, theirs_worker):
        pod_defaults.pop("runAsNonRoot")
    spec["securityContext"] = {**pod_defaults, **theirs_pod}
    worker["securityContext"] = {**WORKER_SECURITY, **theirs_worker}
    if worker["securityContext"].get("readOnlyRootFilesystem") is not True:
        return out
    mounts = worker.setdefault("volumeMounts", [])
    volumes = spec.setdefault("volumes", [])
    for name, path in writable.items():
        path = posixpath.normpath(path)
        if _covered(path, mounts):
            continue
        volumes.append({"name": name, "emptyDir": {}})
        mounts.append({"name": name, "mountPath": path})
    return out
