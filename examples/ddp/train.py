"""A small torch model trained data-parallel over gloo, checkpointed sharded with gangrun.torch.

    gangrun run ddp.yaml          # 2 nodes x 2 processes, DDP
    gangrun run fsdp.yaml         # the same model sharded with FSDP2 (fully_shard), on CPU

Every rank saves its part of the state with `save_state` (in the background, every SAVE_EVERY
steps) and loads it back with `load_state` on start: the newest committed checkpoint of this
attempt, else of an earlier one. When the gang is stopped (preemption, cancel), `ctx.should_stop()`
turns True on every rank at the same step, and the loop makes one last, blocking save.

To show that a resumed run continues its curve, the loss on a fixed held-out batch is printed at
every save, and again right after a load: the two lines for the resume step carry the same value.

    [rank 0] step 25 saved, eval loss 0.412345
    ... preempted ...
    [rank 0] resumed at step 25 (own checkpoint, 4 ranks), eval loss 0.412345
"""

from __future__ import annotations

import os
import sys
import time
from typing import cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import gangrun
from gangrun.torch import load_state, save_state, wait

STEPS = int(os.environ.get("STEPS", "60"))
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "5"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.1"))  # stands in for more compute
FSDP = "--fsdp" in sys.argv[1:]
FEATURES, HIDDEN, BATCH = 16, 64, 32


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic batch: the same seed gives the same data on every run, before or after a resume."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, FEATURES, generator=g)
    y = (x[:, :4].sum(dim=1, keepdim=True) - x[:, 4:8].prod(dim=1, keepdim=True)).tanh()
    return x, y


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)  # the same initial weights on every rank
    model: nn.Module = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                                     nn.Linear(HIDDEN, 1))  # fmt: skip
    if FSDP:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        model = nn.parallel.DistributedDataParallel(model)
    return model, torch.optim.Adam(model.parameters(), lr=3e-3)


def state(model: nn.Module, optim: torch.optim.Optimizer) -> dict[str, object]:
    # get_state_dict gives DDP's plain tensors or FSDP2's DTensor shards alike; DCP saves either.
    model_sd, optim_sd = get_state_dict(model, optim)
    return {"model": model_sd, "optim": optim_sd}


def eval_loss(model: nn.Module) -> float:
    x, y = batch(seed=10_000)  # held out: never trained on
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))


def main() -> None:
    dist.init_process_group("gloo")
    ctx = gangrun.context()
    rank, world = dist.get_rank(), dist.get_world_size()
    model, optim = build()
    say = (lambda line: print(line, flush=True)) if rank == 0 else (lambda line: None)

    sd = state(model, optim)
    loaded = load_state(sd)
    step = 0
    if loaded is not None:
        set_state_dict(model, optim, model_state_dict=cast(dict, sd["model"]), optim_state_dict=cast(dict, sd["optim"]))
        step = loaded.step or 0
        say(f"resumed at step {step} ({loaded.loaded_from} checkpoint, {loaded.world_size} ranks), "
            f"eval loss {eval_loss(model):.6f}")  # fmt: skip
    else:
        say(f"starting fresh: {world} ranks, {'FSDP2' if FSDP else 'DDP'}, eval loss {eval_loss(model):.6f}")

    while step < STEPS:
        if ctx.should_stop():  # the same answer on every rank: all make the final save together
            save_state(state(model, optim), step=step, blocking=True)
            cause = ctx.stop_notice and ctx.stop_notice.cause
            say(f"step {step} saved, eval loss {eval_loss(model):.6f} (stopping: {cause})")
            break
        step += 1
        x, y = batch(seed=step * world + rank)  # each rank its own slice of the step's data
        loss = nn.functional.mse_loss(model(x), y)
        optim.zero_grad()
        loss.backward()  # DDP all-reduces the gradients; FSDP2 reduce-scatters them
        optim.step()
        time.sleep(STEP_SECONDS)
        if step % SAVE_EVERY == 0 or step == STEPS:
            save_state(state(model, optim), step=step, blocking=step == STEPS)
            say(f"step {step} saved, eval loss {eval_loss(model):.6f}")
    wait()  # the background save still needs the process group
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
