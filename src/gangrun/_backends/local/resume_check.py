"""A `spec.checkpoint.resumeFrom` that can be known at submit to find nothing is refused then.

A task name is accepted when a task of that name is on this control plane (it may not have saved yet:
the worker's load then says it found nothing, see `gangrun._ckpt.events.resume_result`), or when
checkpoints of deleted tasks of that name are kept under this task's base. A URI is accepted when it
exists. Only folders of this machine are looked at: a remote store (`s3://...`) is not dialled at
submit, and the worker's load reports what it found there.
"""

from __future__ import annotations

from collections.abc import Container
from pathlib import Path

from gangrun._backends.local.config import Paths
from gangrun._core.checkpoint_root import FIELD, is_task_name, resume_source
from gangrun._core.spec import TaskSpec
from gangrun._errors import SpecError


def check_resume_from(spec: TaskSpec, tasks: Container[str], paths: Paths) -> None:
    """Raises SpecError naming spec.checkpoint.resumeFrom when what it names is known not to exist."""
    if not spec.resume_from or (is_task_name(spec.resume_from) and spec.resume_from in tasks):
        return
    source = resume_source(spec.resume_from, paths.checkpoint_base(spec.checkpoint_uri))
    folder = _local_folder(source)
    if folder is None or folder.exists():
        return
    if is_task_name(spec.resume_from):
        raise SpecError(FIELD, f'no task named "{spec.resume_from}" here, and no checkpoints of a deleted task '
                               f"of that name under {source}")
    raise SpecError(FIELD, f"{spec.resume_from} does not exist")


def _local_folder(uri: str) -> Path | None:
    """The folder of this machine `uri` names; None for a remote store."""
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    return Path(uri) if uri.startswith("/") else None
