"""The data position: a run resumed mid-epoch trains the next batch of that epoch, in the same order.

Lightning's loops save how many batches of the current epoch were trained (the epoch loop's batch
progress) and count on from there on resume; but unless every training data loader has
`state_dict`/`load_state_dict` (a `StatefulDataLoader`), the loader itself starts the epoch over
from its first batch (Lightning warns that "this can cause unreliable results"): the resumed epoch
trains its first batches again and never sees its last ones.

The order of an epoch's batches is fixed when its iterator is made and first drawn from: a
`DistributedSampler` shuffles by its seed and epoch, a `RandomSampler` by a seed it draws from
torch's generator then, and the iterator draws a seed for its worker processes. So the callback
makes the iterator itself, at the start of training and of every epoch, from generator states it
records (`GangCallback`, `gangrun.lightning._rng`), and on resume `restart_epoch` makes it again
from the recorded states of that epoch's start and drops the batches already trained:

1. every sampler is told the epoch (``on_advance_start`` does the same later, but a loader with
   worker processes draws its first indices when its iterator is made),
2. the fit loop's data fetcher makes the iterator again,
3. the batches of this epoch already trained are drawn and dropped; Lightning counts them as done.

The dropped batches are loaded for nothing (the cost of a resume mid-epoch). This reaches into the
fit loop's data fetcher, which is Lightning's own (`lightning>=2.5,<3`); loaders that are all
stateful are left to Lightning.
"""

from __future__ import annotations

import warnings
from typing import Any

import lightning.pytorch as pl

# Lightning's warning about a non-stateful loader resumed mid-epoch: true of Lightning alone, not here.
_UNRELIABLE = "You're resuming from a checkpoint that ended before the epoch ended"


def epoch(trainer: pl.Trainer) -> int:
    """The epoch training is in (the one samplers are told), from ``on_train_start`` on."""
    current: Any = trainer.fit_loop.epoch_progress.current  # a tracker with `processed`, typed as its base
    return int(current.processed)


def trained_in_epoch(trainer: pl.Trainer) -> int:
    """Batches of the current epoch trained before the checkpoint the fit loop was restored from
    (0 when it was not restored, or when that epoch had ended). Valid from ``on_train_start``."""
    loop = trainer.fit_loop
    if not loop.restarting:
        return 0
    epoch_loop = loop.epoch_loop
    done = epoch_loop.batch_progress.current.completed
    if epoch_loop.restarted_on_train_batch_end:
        done += 1  # saved in on_train_batch_end: that batch was trained, though not yet counted complete
    return 0 if done >= trainer.num_training_batches else done


def lightning_restores_position(trainer: pl.Trainer) -> bool:
    """Whether every training loader is stateful: Lightning then restores their position itself."""
    combined = trainer.fit_loop._combined_loader
    return combined is not None and all(_is_stateful(dl) for dl in combined.flattened)


def restart_epoch(trainer: pl.Trainer, *, skip: int) -> bool:
    """Make the current epoch's training iterator again and drop its first `skip` batches (see the
    module docstring). Returns whether it did (not when training has no data fetcher yet, or when
    Lightning restores the loaders' position itself)."""
    loop = trainer.fit_loop
    combined, fetcher = loop._combined_loader, loop._data_fetcher
    if combined is None or fetcher is None or (loop.restarting and lightning_restores_position(trainer)):
        return False
    for dl in combined.flattened:
        _set_sampler_epoch(dl, epoch(trainer))
    iter(fetcher)
    for _ in range(skip):
        next(fetcher)
    fetcher.fetched -= skip  # the epoch loop adds the batches it counts as done to what was fetched
    if skip:
        warnings.filterwarnings("ignore", message=_UNRELIABLE)
    return True


def _is_stateful(loader: object) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def _set_sampler_epoch(loader: object, n: int) -> None:
    """What Lightning does at the start of every epoch: tell the loader's samplers the epoch."""
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if sampler is not None and callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(n)
