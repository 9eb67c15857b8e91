"""`GangCallback`: the Trainer's saves committed as gangrun checkpoints, and its stop agreed on.

What each rank contributes to a save (the Trainer's own layout, ``checkpoint-<global step>/``):

    checkpoint-120/
        model.safetensors, config.json, optimizer.pt, scheduler.pt,
        trainer_state.json, training_args.bin, ...       # rank 0's part: what the main process wrote
        rng_state_0.pth                                   # rank 0's part too
        rng_state_1.pth                                   # rank 1's part (each rank writes its own)

A gang of several nodes has one such folder per node, each holding what that node's ranks wrote, so
every rank contributes the files it wrote itself, as one part of a sharded gangrun save, and the
checkpoint commits once every part is durable. To resume, each rank gets rank 0's part and its own
from the same committed checkpoint and hands the Trainer a folder laid out as above.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from gangrun._worker.context import context
from gangrun._worker.frameworks import CallbackSettings, link_tree, resume_folder, task_checkpoint
from gangrun.checkpoint import Checkpoint

_RNG = re.compile(r"rng_state(?:_(\d+))?\.pth")


class GangCallback(CallbackSettings, TrainerCallback):
    """Stop at the step boundary every rank agrees on, after a save; commit every save in gangrun's layout.

    `save_every`: also save every that many optimizer steps (None: only when the Trainer's own
    `save_strategy` says so, and at the stop). `checkpoint`: where (default: this task's).
    `exit_on_stop`: once stopped and saved, end the process (exit status 0) when the Trainer has
    returned from training, so that the rest of the script (a final evaluation, `save_model`) does
    not run as though training had finished; a readmitted gang resumes from the save.
    """

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> TrainerControl:  # fmt: skip
        if self.save_every and state.global_step % self.save_every == 0:
            control.should_save = True
        # Every rank reaches this at every optimizer step: with torch.distributed up, a collective.
        if context().should_stop():
            self.stopped = True
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> TrainerControl:  # fmt: skip
        step = state.global_step
        out = str(args.output_dir)  # the Trainer's own checkpoint folder is under it
        folder = Path(out) / f"checkpoint-{step}"
        rank = args.process_index
        mine = [p for p in sorted(folder.iterdir()) if _written_by(p.name, rank)]
        part = Path(tempfile.mkdtemp(prefix=f".gangrun-part-{rank}-", dir=out))
        try:
            link_tree(mine, part)
            # The stop's save blocks: the process ends soon after. The others commit in the background
            # (a copy of the part is made first), and the next save or the end of training waits for them.
            self.checkpoint.save(part, step=step, shard=True, blocking=self.stopped)
        finally:
            shutil.rmtree(part, ignore_errors=True)
        return control

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> TrainerControl:  # fmt: skip
        self.checkpoint.wait()  # a background save still in flight commits (or raises CommitFailed)
        if self.stopped and self.exit_on_stop:
            raise SystemExit(0)
        return control


def _written_by(name: str, rank: int) -> bool:
    """Whether rank `rank` wrote `name` of a Trainer checkpoint: its own RNG file, and on rank 0
    everything that is not another rank's RNG file."""
    m = _RNG.fullmatch(name)
    if m is not None and m.group(1) is not None:
        return int(m.group(1)) == rank
    return rank == 0


def resume_from_checkpoint(*, checkpoint: Checkpoint | None = None) -> str | None:
    """The value for ``trainer.train(resume_from_checkpoint=...)``: a folder in the Trainer's layout
    restored from gangrun's choice of checkpoint (own attempt first, then earlier attempts, then
    `resumeFrom`), the same on every rank; None on a fresh start. Call it on every rank."""
    folder = resume_folder(task_checkpoint(checkpoint), name="checkpoint-{step}")
    return str(folder) if folder is not None else None


def train(trainer: Trainer, *, save_every: int | None = None, checkpoint: Checkpoint | None = None,
          **kwargs: Any) -> Any:  # fmt: skip
    """``trainer.train(**kwargs)`` with a `GangCallback` added and resumed from gangrun's checkpoint."""
    trainer.add_callback(GangCallback(save_every=save_every, checkpoint=checkpoint))
    return trainer.train(resume_from_checkpoint=resume_from_checkpoint(checkpoint=checkpoint), **kwargs)
