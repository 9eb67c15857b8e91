"""What a framework integration (gangrun.transformers; a Lightning one would too) needs: the task's
checkpoint, and a folder of a few files to hand to it without copying them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from gangrun._context import context
from gangrun._errors import UsageError
from gangrun.checkpoint import Checkpoint


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
