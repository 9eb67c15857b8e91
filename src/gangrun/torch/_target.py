"""Where a torch checkpoint goes: the task's checkpoint root and this attempt, as `ctx.checkpoint` has them.

By default the target is `gangrun.context().checkpoint`: ``GANGRUN_CHECKPOINT_PATH`` in a gang, a
local folder outside one (gangrun._worker.context); a script may pass a `Checkpoint` of its own. Object-store
credentials come from the usual environment, or from `storage_options` passed along.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gangrun._ckpt.layout import attempt_name, entry_name, join
from gangrun._ckpt.storage import Storage, open_storage
from gangrun._errors import UsageError
from gangrun.checkpoint import Checkpoint


@dataclass(frozen=True)
class Target:
    root: str  # the task's root URI, holding attempt-<N> folders
    attempt: int
    task: str | None
    keep_last: int | None
    storage: Storage
    root_path: str  # `root` as the storage spells it
    storage_options: dict[str, Any] | None
    resume_from: str | None = None  # spec.checkpoint.resumeFrom as a URI (GANGRUN_RESUME_FROM)

    def resumed(self) -> Target | None:
        """The target `resume_from` names (its URI as the root), or None without one."""
        if not self.resume_from:
            return None
        storage, path = open_storage(self.resume_from, self.storage_options)
        return Target(root=self.resume_from, attempt=self.attempt, task=self.task, keep_last=self.keep_last,
                      storage=storage, root_path=path.rstrip("/"), storage_options=self.storage_options)

    @property
    def attempt_path(self) -> str:
        return join(self.root_path, attempt_name(self.attempt))

    @property
    def attempt_uri(self) -> str:
        return join(self.root, attempt_name(self.attempt))

    def uri_of(self, attempt: int, seq: int) -> str:
        return join(self.root, attempt_name(attempt), entry_name(seq))

    def uri_for_path(self, path: str) -> str:
        """A storage path under the root, spelled as a URI (with the scheme of the root)."""
        return self.root + path[len(self.root_path) :] if path.startswith(self.root_path) else path

    @property
    def local(self) -> bool:
        return self.storage.local


def resolve(checkpoint: Checkpoint | None, storage_options: dict[str, Any] | None) -> Target:
    """The target of a save or load; raises UsageError outside a gang without a `checkpoint`."""
    if checkpoint is None:
        from gangrun._worker.context import context

        checkpoint = context().checkpoint
        if checkpoint is None:  # only for a context built without a place for checkpoints
            raise UsageError(
                "no checkpoint location: run inside a gangrun task (GANGRUN_CHECKPOINT_PATH) "
                "or pass checkpoint=Checkpoint(...)"
            )
    checkpoint._say_where()
    storage, root_path = open_storage(checkpoint.root, storage_options)
    return Target(
        root=checkpoint.root,
        attempt=checkpoint.attempt,
        task=checkpoint.task,
        keep_last=checkpoint.keep_last,
        storage=storage,
        root_path=root_path,
        storage_options=storage_options,
        resume_from=checkpoint.resume_from,
    )
