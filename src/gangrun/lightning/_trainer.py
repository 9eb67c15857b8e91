"""`trainer(**kwargs)` and `fit(trainer, ...)`: a Lightning script in a gang, changed in three lines.

    import gangrun.lightning
    trainer = gangrun.lightning.trainer(max_steps=1000)      # was: L.Trainer(max_steps=1000)
    gangrun.lightning.fit(trainer, model, datamodule=dm)     # was: trainer.fit(model, datamodule=dm)
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from gangrun._worker.context import context
from gangrun.checkpoint import Checkpoint
from gangrun.lightning._callback import GangCallback
from gangrun.lightning._environment import GangEnvironment


def trainer(*, save_every: int | None = None, checkpoint: Checkpoint | None = None, **kwargs: Any) -> pl.Trainer:
    """``lightning.Trainer(**kwargs)`` with a `GangCallback` (`save_every`, `checkpoint`: see it) and, in
    a gang or under torchrun, a `GangEnvironment`, with `num_nodes` and `devices` taken from the gang
    unless given (a mismatch is refused when training starts). Under plain ``python`` the Trainer is
    as Lightning makes it."""
    callbacks = list(kwargs.pop("callbacks", None) or [])
    callbacks.append(GangCallback(save_every=save_every, checkpoint=checkpoint))
    plugins = kwargs.pop("plugins", None)
    plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [] if plugins is None else [plugins]
    if GangEnvironment.detect() and not any(isinstance(p, GangEnvironment) for p in plugins):
        ctx = context()
        plugins.append(GangEnvironment(ctx))
        kwargs.setdefault("num_nodes", ctx.nnodes)
        kwargs.setdefault("devices", ctx.nproc_per_node)
    return pl.Trainer(callbacks=callbacks, plugins=plugins or None, **kwargs)


def gang_callback(trainer: pl.Trainer) -> GangCallback:
    """The trainer's `GangCallback`; one is added when it has none."""
    callbacks: list[pl.Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by its connector
    for cb in callbacks:
        if isinstance(cb, GangCallback):
            return cb
    cb = GangCallback()
    callbacks.append(cb)
    return cb


def fit(trainer: pl.Trainer, model: pl.LightningModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
        datamodule: pl.LightningDataModule | None = None, **kwargs: Any) -> None:  # fmt: skip
    """``trainer.fit(model, ...)`` resumed from gangrun's choice of checkpoint (the same on every rank;
    none on a fresh start). Call it on every rank. Once the gang's stop was agreed on and saved, the
    process exits instead of returning (see `GangCallback`)."""
    ckpt_path = gang_callback(trainer).ckpt_path()
    trainer.fit(model, train_dataloaders=train_dataloaders, val_dataloaders=val_dataloaders, datamodule=datamodule,
                ckpt_path=ckpt_path, **kwargs)  # fmt: skip
