"""`GangCallback`: Lightning's saves committed as gangrun checkpoints, and its stop agreed on.

What each rank contributes to a save (one sharded gangrun checkpoint per save):

    rank 0:  lightning.ckpt   # trainer.save_checkpoint(): model, optimizers, schedulers, loops
             rng-0.pt         #   (the data position), callbacks, datamodule; rank 0 writes it
    rank r:  rng-<r>.pt       # each rank's own generators (gangrun.lightning._rng)

The checkpoint commits once every rank's part is durable, with the task's identity, own-attempt-first
order, `resumeFrom`, retention and live report. On resume (`on_train_start`, after Lightning restored
its own state from ``ckpt_path``) the callback restores this rank's generators and positions the
training data after the batches of the epoch already trained (gangrun.lightning._position).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from gangrun._ckpt import notice
from gangrun._worker.context import context
from gangrun._worker.frameworks import CallbackSettings
from gangrun.checkpoint import Checkpoint
from gangrun.lightning import _rng
from gangrun.lightning._position import epoch, lightning_restores_position, restart_epoch, trained_in_epoch
from gangrun.lightning._resume import CKPT_FILE, ckpt_path, resumed_folder


class GangCallback(CallbackSettings, Callback):
    """Stop at the step every rank agrees on, after a save; commit every save in gangrun's layout.

    `save_every`: also save every that many optimizer steps (None: only at the stop).
    `checkpoint`: where (default: this task's). `exit_on_stop`: once stopped and saved, end the
    process (exit status 0, which gangrun reports as stopped, not done) at the end of training, so
    that the rest of the script (a test run, a final export) does not run as though training had
    finished; a readmitted gang resumes from the save.
    """

    def __init__(self, *, save_every: int | None = None, checkpoint: Checkpoint | None = None,
                 exit_on_stop: bool = True) -> None:  # fmt: skip
        #: Batches of the resumed epoch dropped at the start, to train on from where the save was.
        self.skipped = 0
        self._asked_at: int | None = None  # the optimizer step should_stop() was last asked at
        self._saved_at: int | None = None  # the optimizer step last saved
        self._epoch_rng: _rng.States = {}  # the generators when the current epoch's iterator was made
        self._iterator_epoch: int | None = None  # the epoch whose iterator this callback made
        super().__init__(save_every=save_every, checkpoint=checkpoint, exit_on_stop=exit_on_stop)

    def ckpt_path(self) -> str | None:
        """The value for ``trainer.fit(ckpt_path=...)`` (see `gangrun.lightning.ckpt_path`)."""
        return ckpt_path(checkpoint=self.checkpoint)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning installed its own SIGTERM handler just before training starts (notice.reclaim).
        notice.reclaim()
        saved = self._saved_rng(trainer)
        skip = 0 if lightning_restores_position(trainer) else trained_in_epoch(trainer)
        if saved is not None:
            # Mid-epoch, the epoch's iterator is made again from the states it was first made from.
            _rng.restore(saved["epoch"] if skip else saved["now"])
        self._epoch_rng = _rng.collect()
        if restart_epoch(trainer, skip=skip):
            self._iterator_epoch = epoch(trainer)
        self.skipped = skip
        if saved is not None and skip:
            # As they were when the save was made, whatever drawing the trained batches again used.
            # (At an epoch's start the new iterator drew from them as the uninterrupted run's did.)
            _rng.restore(saved["now"])
        self._asked_at = self._saved_at = trainer.global_step

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if epoch(trainer) != self._iterator_epoch:  # Lightning makes this epoch's iterator next
            self._epoch_rng = _rng.collect()

    def _saved_rng(self, trainer: pl.Trainer) -> _rng.Saved | None:
        """This rank's saved generators, when Lightning resumed from gangrun's choice of checkpoint."""
        if trainer.ckpt_path is None:
            return None
        folder = resumed_folder(self.checkpoint)
        if folder is None or Path(trainer.ckpt_path) != folder / CKPT_FILE:
            return None
        mine = folder / _rng.file_name(self.checkpoint.rank)
        return _rng.load(mine) if mine.exists() else None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:  # fmt: skip
        step = trainer.global_step
        if step == self._asked_at:
            return  # no optimizer step since the last batch (gradient accumulation): not a step boundary
        self._asked_at = step
        # Every rank reaches this at every optimizer step: with torch.distributed up, a collective.
        if context().should_stop():
            self.stopped = True
        if self.stopped or (self.save_every and step % self.save_every == 0):
            self._save(trainer, step, blocking=self.stopped)
        if self.stopped:
            trainer.should_stop = True
            # Lightning keeps training past should_stop until min_epochs / min_steps are met: not for a stop.
            trainer.fit_loop.min_epochs = 0
            trainer.fit_loop.epoch_loop.min_steps = None

    def _save(self, trainer: pl.Trainer, step: int, *, blocking: bool) -> None:
        ckpt = self.checkpoint
        if step == self._saved_at:  # the stop came right after a save of this very step
            if blocking:
                ckpt.wait()
            return
        self._saved_at = step
        part = Path(tempfile.mkdtemp(prefix=f"gangrun-lightning-{ckpt.rank}-"))
        try:
            # Every rank calls it (it ends with a barrier); the strategy writes on rank 0 only.
            trainer.save_checkpoint(part / CKPT_FILE, weights_only=False)
            _rng.save(part, ckpt.rank, epoch=self._epoch_rng)
            # The stop's save blocks: the process ends soon after. The others commit in the background
            # (a copy of the part is made first); the next save or the end of training waits for them.
            ckpt.save(part, step=step, shard=True, blocking=blocking)
        finally:
            shutil.rmtree(part, ignore_errors=True)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.checkpoint.wait()  # a background save still in flight commits (or raises CommitFailed)
        if self.stopped and self.exit_on_stop:
            raise SystemExit(0)
