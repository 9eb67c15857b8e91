"""What the framework integrations (gangrun.transformers, gangrun.lightning) share: their callbacks'
settings, the task's checkpoint, a folder of a few files to hand over without copying them, and the
folder a rank resumes from (rank 0's part of gangrun's choice of checkpoint, with this rank's own)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gangrun._errors import UsageError
from gangrun._worker.context import context
from gangrun.checkpoint import Checkpoint


class CallbackSettings:
    """The settings both frameworks' `GangCallback` take (each class's docstring says what they mean
    there), and the stop notice turned on as the callback is made."""

    def __init__(self, *, save_every: int | None = None, checkpoint: Checkpoint | None = None,
                 exit_on_stop: bool = True) -> None:  # fmt: skip
        if save_every is not None and save_every < 1:
            raise ValueError(f"save_every must be >= 1 or None, got {save_every}")
        self.save_every = save_every
        self.exit_on_stop = exit_on_stop
        self._checkpoint = checkpoint
        #: True once the gang's stop was agreed on and the last save committed.
        self.stopped = False
        context()  # in a gang, turns SIGTERM into the stop notice from now on

    @property
    def checkpoint(self) -> Checkpoint:
        return task_checkpoint(self._checkpoint)


def task_checkpoint(checkpoint: Checkpoint | None) -> Checkpoint:
    """`checkpoint`, else this task's (``gangrun.context().checkpoint``: a local folder outside a gang)."""
    ckpt = checkpoint if checkpoint is not None else context().checkpoint
    if ckpt is None:
        raise UsageError("no checkpoint location: set GANGRUN_CHECKPOINT_PATH or pass checkpoint=")
    return ckpt


def link_tree(entries: Iterable[Path], dest: Path) -> Path:
    """`dest` holding each of `entries` (files or folders) under its own name, hard-linked where the
    filesystem allows (a save copies what it keeps; the links only spare a copy here), else copied.
    Returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in entries:
        target = dest / src.name
        if src.is_dir():
            shutil.copytree(src, target, copy_function=_link_or_copy, dirs_exist_ok=True)
        else:
            _link_or_copy(str(src), str(target))
    return dest


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def symlink_tree(entries: Iterable[Path], dest: Path) -> Path:
    """`dest` holding a symbolic link to each of `entries` under its own name (a restored checkpoint
    is read, never written, by the framework that resumes from it). Returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in entries:
        (dest / src.name).symlink_to(src.resolve())
    return dest


def resume_folder(checkpoint: Checkpoint, *, name: str) -> Path | None:
    """The folder this rank resumes from: gangrun's choice of checkpoint (own attempt first, then
    earlier attempts, then `resumeFrom`; the same on every rank of a gang start), None on a fresh
    start. Call it on every rank.

    A sharded checkpoint (each rank contributed what it wrote) comes back as one folder holding rank
    0's files and this rank's own, linked under a fresh folder named `name` (formatted with
    ``step=``); a whole folder saved by rank 0 alone comes back as it is.
    """
    own = checkpoint.load()
    if checkpoint.loaded_seq is None:
        return None
    if checkpoint.loaded_world_size is None:
        return own
    parts = [checkpoint.shard_path(0)] + ([own] if own is not None and checkpoint.rank != 0 else [])
    entries = [p for part in parts for p in sorted(part.iterdir())]
    folder = Path(tempfile.mkdtemp(prefix="gangrun-resume-")) / name.format(step=checkpoint.loaded_step)
    return symlink_tree(entries, folder)
