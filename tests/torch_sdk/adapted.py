"""A script adapted to gangrun, as the docs show it: it runs unchanged under plain `python`, under
torchrun (any --nproc_per_node and --nnodes) and in a gang. Each run trains 3 steps from where the
newest checkpoint left off, saving after each, and prints one JSON line per rank."""

import json
import os

import torch
import torch.distributed as dist

import gangrun
from gangrun.torch import load_state, save_state, wait

ctx = gangrun.context()
if ctx.world_size > 1:
    dist.init_process_group("gloo")
    assert (dist.get_rank(), dist.get_world_size()) == (ctx.rank, ctx.world_size)
state = {"w": torch.zeros(4), "step": torch.tensor(0)}
loaded = load_state(state)
start = int(state["step"])
for step in range(start + 1, start + 4):
    state["w"] += 1
    state["step"].fill_(step)
    save_state(state, step=step)
wait()
print(json.dumps({
    "rank": ctx.rank, "world": ctx.world_size, "local_rank": ctx.local_rank, "node_rank": ctx.node_rank,
    "nnodes": ctx.nnodes, "nproc": ctx.nproc_per_node, "in_gang": ctx.in_gang, "env_local_rank": os.environ.get("LOCAL_RANK"),
    "loaded_step": loaded.step if loaded else None, "step": int(state["step"]), "w": state["w"].tolist(),
}), flush=True)
if ctx.world_size > 1:
    dist.destroy_process_group()
