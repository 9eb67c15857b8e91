"""Where a task's checkpoints live, and where `spec.checkpoint.resumeFrom` points: pure names.

A task never loads a checkpoint another task wrote unless its manifest asks for it, so a task's
checkpoints are keyed by its identity, not by its name alone (a task deleted and re-created under the
same name is another task):

    <base>/<name>/<id>/attempt-<N>/      attempt N of the task saves here (GANGRUN_CHECKPOINT_PATH)

`<base>` is `spec.checkpoint.uri`, or the backend's default; `<id>` is the task's identity: the id
the local backend mints at submit, the ClusteredTask's `metadata.uid` on Kubernetes. Every task of one
name keeps its checkpoints beside the others' under `<base>/<name>/`, which is where a `resumeFrom`
naming a task looks.

`resumeFrom` is a task name (that task's newest complete checkpoint, the task live or deleted with
its checkpoints kept, found under `<base>/<name>/` of THIS task's base) or a checkpoint URI (one
checkpoint `.../ckpt-<seq>`, an attempt folder, a task's root, or the folder of every task of a
name). The worker gets it resolved to a URI in GANGRUN_RESUME_FROM and loads from it only when the
task has nothing of its own.
"""

from __future__ import annotations

import re

from gangrun._errors import SpecError, UsageError

FIELD = "spec.checkpoint.resumeFrom"
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_URI = re.compile(r"^(/|[a-zA-Z][a-zA-Z0-9+.-]*://)\S*$")
NAME_MAX = 63


def task_root(base: str, name: str, identity: str) -> str:
    """The root of one task's checkpoints. An empty `identity` (a task stored before identities were
    kept) keeps the layout it was started with, `<base>/<name>`."""
    root = f"{base.rstrip('/')}/{name}"
    return f"{root}/{identity}" if identity else root


def attempt_name(attempt: int) -> str:
    """The folder of attempt N's checkpoints under the task's root (the SDK's layout reads it back)."""
    return f"attempt-{attempt}"


def attempt_path(root: str, attempt: int) -> str:
    """GANGRUN_CHECKPOINT_PATH of attempt N: the one place its workers save."""
    return f"{root}/{attempt_name(attempt)}" if attempt >= 1 else ""


def parse_resume_from(value: object) -> str:
    """Validate `spec.checkpoint.resumeFrom`; raises SpecError naming the field."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise SpecError(FIELD, f"must be a string (a task name or a checkpoint URI), got {type(value).__name__}")
    if _NAME.match(value) and len(value) <= NAME_MAX:
        return value
    if _URI.match(value) and value.rstrip("/") not in ("", "/") and not value.endswith("://"):
        return value.rstrip("/")
    raise SpecError(FIELD, "must be a task name like train, or a checkpoint URI: an absolute path or "
                           f"scheme://... such as s3://bucket/ckpts/train, got {value[:80]!r}")


def is_task_name(resume_from: str) -> bool:
    return bool(_NAME.match(resume_from))


def resume_source(resume_from: str, base: str) -> str:
    """The URI the worker loads from (GANGRUN_RESUME_FROM): a task name becomes the folder every task
    of that name keeps its checkpoints in, under this task's base; a URI stays itself."""
    if not resume_from:
        return ""
    return f"{base.rstrip('/')}/{resume_from}" if is_task_name(resume_from) else resume_from


def overlaps(source: str, root: str) -> bool:
    """Whether a task loading from `source` (a resolved `resume_source`) would read from `root`: one is
    the other or lies under it (a source naming `<base>/<name>` covers every task root of that name)."""
    a, b = source.rstrip("/"), root.rstrip("/")
    return bool(a and b) and (a == b or a.startswith(b + "/") or b.startswith(a + "/"))


def refuse_if_depended_on(name: str, dependents: list[str]) -> None:
    """`delete --purge` of `name`'s checkpoints while `dependents` (tasks that have not ended) resume from
    them: raises UsageError naming them; nothing when there are none."""
    if dependents:
        one = len(dependents) == 1
        raise UsageError(f"--purge: {', '.join(dependents)} {'has' if one else 'have'} not ended and "
                         f"{'resumes' if one else 'resume'} from the checkpoints of {name} ({FIELD}); "
                         "delete or let them end first, or add --force to remove the checkpoints anyway")


def describe(resume_from: str) -> str:
    """How the timeline names the source."""
    return f"task {resume_from}'s newest checkpoint" if is_task_name(resume_from) else resume_from
