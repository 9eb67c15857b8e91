"""A PyTorch Lightning script that survives preemption: a small regression model with dropout
(random weights, no download) trained on random data. The lines marked `# gangrun` are all it changes.

    python lightning_fit.py                             # one process
    torchrun --nproc_per_node=2 lightning_fit.py        # two, over gloo
    gangrun run lightning_fit.yaml                      # a gang; `gangrun local evict lightning-fit` to preempt it

Stopped (a preemption, Ctrl-C of the gang, SIGTERM) it saves at the next step and exits; started
again it resumes from that save, on the same batch, with the same RNG states.
"""

from __future__ import annotations

import os
import time

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gangrun.lightning  # gangrun

FEATURES = 16


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:  # one line per step: `step N loss X`
        if self.trainer.is_global_zero:
            print(f"step {self.trainer.global_step} loss {outputs['loss'].item()!r}", flush=True)
        time.sleep(float(os.environ.get("STEP_SECONDS", "0")))  # makes the demo slow enough to preempt

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 4))  # warm-up
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def main() -> None:
    L.seed_everything(0, verbose=False)
    x = torch.randn(64, FEATURES, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(x, x.sum(dim=1, keepdim=True).sin())
    trainer = gangrun.lightning.trainer(  # gangrun: was L.Trainer( (without save_every)
        max_steps=int(os.environ.get("MAX_STEPS", "40")), accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, save_every=5,
    )  # fmt: skip
    loader = DataLoader(data, batch_size=4, shuffle=True)
    gangrun.lightning.fit(trainer, Regressor(), loader)  # gangrun: was trainer.fit(Regressor(), loader)


if __name__ == "__main__":
    main()
