"""PyTorch Lightning's `Trainer` in a gang: its own checkpoints, committed and found the gangrun way.

    import gangrun.lightning

    trainer = gangrun.lightning.trainer(max_steps=1000)    # instead of L.Trainer(max_steps=1000)
    gangrun.lightning.fit(trainer, model, datamodule=dm)   # instead of trainer.fit(model, datamodule=dm)

or, spelled out, the same parts:

    callback = GangCallback()
    trainer = L.Trainer(..., callbacks=[callback], plugins=[GangEnvironment()], num_nodes=..., devices=...)
    trainer.fit(model, datamodule=dm, ckpt_path=callback.ckpt_path())

`GangEnvironment` tells Lightning the ranks, node and main address of the gang (or of torchrun).
`GangCallback` asks `ctx.should_stop()` at every optimizer step (the same answer on every rank), and
when the gang is being stopped saves and stops at that step. Every save it makes (the stop's, and
every `save_every` steps) is Lightning's own checkpoint plus each rank's RNG states, committed as one
sharded gangrun checkpoint, with the task's identity, own-attempt-first order, `resumeFrom`,
retention and live report. `ckpt_path()` gives every rank the same checkpoint, gangrun's choice;
on resume the callback restores this rank's RNG states and positions the training data after the
batches of the epoch already trained, so no batch is skipped or repeated.

Importing this module imports lightning; ``import gangrun`` does not.
"""

from __future__ import annotations

from gangrun.lightning._callback import GangCallback
from gangrun.lightning._environment import GangEnvironment
from gangrun.lightning._resume import ckpt_path
from gangrun.lightning._trainer import fit, trainer

__all__ = ["GangCallback", "GangEnvironment", "ckpt_path", "fit", "trainer"]
