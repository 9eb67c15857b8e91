"""Which checkpoint `Trainer.fit` resumes from: gangrun's one choice per gang start, on every rank.

gangrun picks one resume point per start of the gang (this attempt's newest committed checkpoint,
then earlier attempts', then `resumeFrom`) and every rank loads that one. Rebuilt as a folder
(`gangrun._worker.frameworks.resume_folder`):

    lightning-step-120/
        lightning.ckpt        # rank 0's part: the checkpoint Lightning wrote (model, optimizers,
                              # schedulers, loops, callbacks, datamodule)
        rng-1.pt              # this rank's own part: its generators (rank 0 sees rng-0.pt)

``lightning.ckpt`` is what ``trainer.fit(ckpt_path=...)`` takes on every rank. The folder is made once
per checkpoint object and process: `fit` and the callback see the same one.
"""

from __future__ import annotations

import weakref
from pathlib import Path

from gangrun._errors import CheckpointError
from gangrun._worker.frameworks import resume_folder, task_checkpoint
from gangrun.checkpoint import Checkpoint

CKPT_FILE = "lightning.ckpt"

_folders: weakref.WeakKeyDictionary[Checkpoint, Path | None] = weakref.WeakKeyDictionary()


def resumed_folder(checkpoint: Checkpoint) -> Path | None:
    """The folder this rank resumes from (see the module docstring), None on a fresh start."""
    if checkpoint not in _folders:
        _folders[checkpoint] = resume_folder(checkpoint, name="lightning-step-{step}")
    return _folders[checkpoint]


def ckpt_path(*, checkpoint: Checkpoint | None = None) -> str | None:
    """The value for ``trainer.fit(..., ckpt_path=...)``: Lightning's checkpoint in gangrun's choice of
    checkpoint, the same on every rank; None on a fresh start. Call it on every rank."""
    folder = resumed_folder(task_checkpoint(checkpoint))
    if folder is None:
        return None
    path = folder / CKPT_FILE
    if not path.exists():
        raise CheckpointError(f"the checkpoint gangrun chose holds no {CKPT_FILE} (not a Lightning save): {folder}")
    return str(path)
