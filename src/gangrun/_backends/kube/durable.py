"""Checkpoints that survive a pod, or a refusal at submit (issue 26 item 3).

A task that resumes (`failurePolicy.resumeAfterPreemption`, `retries`, `failurePolicy.maxRestarts`)
restarts its gang in new pods, which load the newest checkpoint they can see. With checkpoints on a
pod's own disk (the default `file:///var/lib/gangrun/checkpoints`, or any `file://` path, with no
volume mounted there) a new pod sees none and the gang silently starts again from step 0. Such a
task is refused at submit, naming `spec.checkpoint.uri` and what to set. A volume the worker container
mounts at or above the path is the user's decision and is accepted: shared storage (a
PersistentVolumeClaim, NFS), a hostPath on a single node, or an emptyDir that says "step 0 is fine".
"""

from __future__ import annotations

import posixpath
from urllib.parse import urlparse

from gangrun._backends.kube.render import DEFAULT_CHECKPOINT_ROOT
from gangrun._core.pod_merge import worker_container
from gangrun._core.spec import TaskSpec
from gangrun._errors import SpecError

__all__ = ["check_checkpoints_survive", "pod_local_path"]


def pod_local_path(uri: str) -> str | None:
    """The path in the container of a checkpoint URI on the pod's file system (`file://` or a plain
    absolute path); None for any other storage (s3://, gs://, ...)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return posixpath.normpath("/" + parsed.path.lstrip("/"))
    if not parsed.scheme and uri.startswith("/"):
        return posixpath.normpath(uri)
    return None


def _mounted(spec: TaskSpec, path: str) -> bool:
    worker = worker_container(spec.pod_template) or {}
    for mount in worker.get("volumeMounts") or []:
        at = posixpath.normpath(str(mount.get("mountPath") or "/x-none"))
        if path == at or path.startswith(at.rstrip("/") + "/"):
            return True
    return False


def check_checkpoints_survive(spec: TaskSpec) -> None:
    """Raise SpecError("spec.checkpoint.uri") when `spec` resumes in new pods from checkpoints that only
    the old pod's own disk holds."""
    fp = spec.failure_policy
    resumes = [what for what, on in (("failurePolicy.resumeAfterPreemption", fp.resume_after_preemption),
                                     ("retries", spec.retries > 0),
                                     ("failurePolicy.maxRestarts", fp.max_restarts > 0)) if on]
    uri = spec.checkpoint_uri or DEFAULT_CHECKPOINT_ROOT
    path = pod_local_path(uri)
    if not resumes or path is None or _mounted(spec, path):
        return
    given = "is not set, so checkpoints go" if not spec.checkpoint_uri else "puts checkpoints"
    raise SpecError("spec.checkpoint.uri", f"{given} to {path} on each pod's own disk, where the new pods of a "
                    f"restart ({resumes[0]}) find none and train from step 0: set spec.checkpoint.uri to storage "
                    f"every pod reaches (s3://bucket/ckpt, gs://..., or a file:// path of a shared volume), or "
                    f"mount a volume at {path} in the worker container of spec.podTemplate")
