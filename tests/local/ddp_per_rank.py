"""A DDP script whose ranks each draw from random streams of their own, checkpointed with gangrun.torch.

Each rank seeds torch (dropout masks) and Python's `random` (the order in which it visits its share
of the data, shuffled at every epoch) with its rank, as a script wanting distinct per-rank streams
does. The model and optimizer are the gang's state; the two RNG states, the epoch's order and the
epoch's running loss are each rank's own, saved as `per_rank`. Every rank prints its mean training
loss at the end of each epoch as one JSON line; a run stopped and resumed any number of times
prints the same numbers as one that never stopped (tests/local/test_torch_gloo.py).

    EPOCHS (6)  BATCHES (8 per rank and epoch)  SAVE_EVERY (3 steps)  STEP_SECONDS (0.1)
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import gangrun
from gangrun.torch import load_state, save_state, wait

EPOCHS = int(os.environ.get("EPOCHS", "6"))
BATCHES = int(os.environ.get("BATCHES", "8"))
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "3"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.1"))
BATCH, FEATURES = 16, 8


def main() -> None:
    dist.init_process_group("gloo")
    ctx = gangrun.context()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same data and initial weights on every rank
    x = torch.randn(world * BATCHES * BATCH, FEATURES)
    y = (x[:, :2].sum(dim=1, keepdim=True) - x[:, 2:4].prod(dim=1, keepdim=True)).tanh()
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(100 + rank)  # from here on, each rank its own streams
    random.seed(100 + rank)
    share = list(range(rank, len(x), world))

    def gang_state(step: int) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(model, opt)
        return {"model": model_sd, "optim": optim_sd, "step": step}

    def own_state(order: list[int], loss_sum: float) -> dict[str, Any]:
        return {"torch_rng": torch.get_rng_state(), "py_rng": random.getstate(), "order": order, "loss_sum": loss_sum}

    sd, mine = gang_state(0), own_state([], 0.0)
    loaded = load_state(sd, per_rank=mine)
    if loaded is not None:
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        torch.set_rng_state(mine["torch_rng"])  # this rank's own streams, where the save left them
        random.setstate(mine["py_rng"])
        print(json.dumps({"rank": rank, "resumed_at": sd["step"], "per_rank": loaded.per_rank}), flush=True)
    step, order, loss_sum = sd["step"], mine["order"], mine["loss_sum"]
    while step < EPOCHS * BATCHES:
        if ctx.should_stop():  # the same answer on every rank, at the same step
            save_state(gang_state(step), step=step, per_rank=own_state(order, loss_sum), blocking=True)
            break
        epoch, b = divmod(step, BATCHES)
        if b == 0:
            order, loss_sum = random.sample(share, len(share)), 0.0
        idx = order[b * BATCH : (b + 1) * BATCH]
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])  # dropout draws from this rank's torch stream
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_sum += loss.item()
        step += 1
        if step % BATCHES == 0:
            print(json.dumps({"rank": rank, "epoch": epoch, "loss": loss_sum / BATCHES}), flush=True)
        time.sleep(STEP_SECONDS)
        if step % SAVE_EVERY == 0:
            save_state(gang_state(step), step=step, per_rank=own_state(order, loss_sum))
    wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
