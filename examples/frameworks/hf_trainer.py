"""A Hugging Face Trainer script that survives preemption: a tiny GPT-2 built from a config (random
weights, no download) trained on random tokens. The lines marked `# gangrun` are all it changes.

    python hf_trainer.py                                # one process
    torchrun --nproc_per_node=2 hf_trainer.py           # two, over gloo
    gangrun run hf_trainer.yaml                         # a gang; `gangrun local evict hf-trainer` to preempt it

Stopped (a preemption, Ctrl-C of the gang, SIGTERM) it saves at the next step and exits; started
again it resumes from that save, on the same batch, with the same RNG states.
"""

from __future__ import annotations

import os
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

import gangrun.transformers  # gangrun

VOCAB, LENGTH = 64, 16


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.ids = torch.randint(0, VOCAB, (n, LENGTH), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class PrintLoss(TrainerCallback):
    """One line per step on the main process: `step N loss X`."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            print(f"step {state.global_step} loss {logs['loss']!r}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(float(os.environ.get("STEP_SECONDS", "0")))  # makes the demo slow enough to preempt


def main() -> None:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2)
    args = TrainingArguments(
        output_dir="hf-trainer-out", max_steps=int(os.environ.get("MAX_STEPS", "40")), per_device_train_batch_size=4,
        learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=4, save_steps=5, logging_steps=1, seed=0,
        report_to=[], disable_tqdm=True, use_cpu=True, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=RandomTokens(64), callbacks=[PrintLoss()])
    gangrun.transformers.train(trainer)  # gangrun: was trainer.train()


if __name__ == "__main__":
    main()
