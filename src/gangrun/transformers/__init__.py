"""The Hugging Face `Trainer` in a gang: its own checkpoints, committed and found the gangrun way.

    import gangrun.transformers

    trainer = Trainer(model=model, args=args, train_dataset=data)
    gangrun.transformers.train(trainer)            # instead of trainer.train()

or, spelled out, the same two parts:

    trainer = Trainer(..., callbacks=[GangCallback()])
    trainer.train(resume_from_checkpoint=resume_from_checkpoint())

`GangCallback` asks `ctx.should_stop()` at every optimizer step (the same answer on every rank), and
when the gang is being stopped makes the Trainer save and stop at that step boundary. Every save
the Trainer makes (its own `save_steps`, the callback's `save_every=`, the stop) is committed as a
sharded gangrun checkpoint: rank 0 contributes the folder the Trainer wrote (model, optimizer,
scheduler, trainer state) and every rank its own RNG file, so the checkpoint is taken whole or not
at all, with the task's identity, own-attempt-first order, `resumeFrom`, retention and live report.
`resume_from_checkpoint()` loads gangrun's choice on every rank and hands the Trainer a folder in
its own layout; the Trainer then restores the states and skips the batches already trained in the
current epoch.

Importing this module imports transformers; ``import gangrun`` does not.
"""

from __future__ import annotations

from gangrun.transformers._callback import GangCallback, resume_from_checkpoint, train

__all__ = ["GangCallback", "resume_from_checkpoint", "train"]
