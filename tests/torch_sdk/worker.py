"""A rank of a test gang (see torchgang.py): ``python worker.py MODE``; prints one JSON line per result.

The state: ``w``, a DTensor sharded by rows over the gang (``ROWS`` rows per rank, ``COLS`` columns),
``b``, a tensor every rank holds whole (replicated, as under DDP), and ``meta``, a plain value. A save
at step s fills ``w`` with s and ``b`` with -s, so a load checks itself: every element must agree.

Modes:
  save   save at step STEP (blocking unless ASYNC=1), print the save
  load   build the state for this world size, load, check every element, print what was loaded
  stop   train until ctx.should_stop(); SIGTERM reaches one rank only; then a final blocking save
  churn  save steps START+1, START+2, ... (blocking) until killed; prints each committed step
  own_save  save `own(rank)` as per_rank (blocking unless ASYNC=1), and 100 + rank as a plain value
  own_load  load into placeholders, print what came back and whether it is `own(rank)`
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import gangrun
from gangrun.torch import load_state, save_state, wait

ROWS, COLS, OPTS = 4, 8, None  # read from the environment by main(): a forked rank (zygote.py) imports this early


def state(world: int, fill: float) -> dict[str, Any]:
    mesh = init_device_mesh("cpu", (world,))
    w = distribute_tensor(torch.full((ROWS * world, COLS), fill), mesh, [Shard(0)])
    # ROWS is per rank of the *saving* gang; a loader of another size asks for the saved global shape.
    return {"w": w, "b": torch.full((COLS,), -fill), "meta": {"note": "x"}}


def own(rank: int) -> dict[str, Any]:
    """What rank `rank` saves as its per_rank values: a float, a tensor, a str, a list, and the two
    RNG states, each drawn from a stream seeded by the rank and advanced a little."""
    torch.manual_seed(1000 + rank)
    torch.rand(rank + 1)
    py = random.Random(rank)
    py.random()
    return {"v": 100.0 + rank, "t": torch.full((4,), float(rank)), "name": f"rank-{rank}",
            "order": py.sample(range(10), 5), "torch_rng": torch.get_rng_state(), "py_rng": py.getstate()}  # fmt: skip


def placeholders() -> dict[str, Any]:
    torch.manual_seed(7)
    return {"v": 0.0, "t": torch.zeros(4), "name": "", "order": [], "torch_rng": torch.get_rng_state(),
            "py_rng": None}  # fmt: skip


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(v, b[k]) if isinstance(v, torch.Tensor) else v == b[k] for k, v in a.items()
    )


def global_rows() -> int:
    return int(os.environ.get("GLOBAL_ROWS", "0"))


def main(mode: str) -> None:
    global ROWS, COLS, OPTS
    ROWS, COLS = int(os.environ.get("ROWS", "4")), int(os.environ.get("COLS", "8"))
    OPTS = json.loads(os.environ.get("STORAGE_OPTIONS", "null"))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ctx = gangrun.context()
    if mode == "save":
        step = int(os.environ["STEP"])
        info = save_state(state(world, float(step)), step=step, blocking=os.environ.get("ASYNC") != "1",
                          storage_options=OPTS)  # fmt: skip
        wait()
        print(json.dumps({"rank": rank, "seq": info.seq if info else None}), flush=True)
    elif mode == "load":
        rows = global_rows() or ROWS * world
        mesh = init_device_mesh("cpu", (world,))
        sd = {"w": distribute_tensor(torch.full((rows, COLS), -7.0), mesh, [Shard(0)]),
              "b": torch.zeros(COLS), "meta": {"note": None}}  # fmt: skip
        loaded = load_state(sd, storage_options=OPTS)
        local = sd["w"].to_local()
        step = loaded.step if loaded else None
        ok = loaded is not None and bool((local == step).all()) and bool((sd["b"] == -step).all())
        print(json.dumps({"rank": rank, "step": step, "ok": ok, "world_size": loaded and loaded.world_size,
                          "resharded": loaded and loaded.resharded, "from": loaded and loaded.loaded_from,
                          "local_rows": local.shape[0], "meta": sd["meta"]}), flush=True)  # fmt: skip
    elif mode == "stop":
        step = 0
        while True:
            step += 1
            time.sleep(0.05)
            if step == 3:
                print(json.dumps({"rank": rank, "ready": True, "pid": os.getpid()}), flush=True)
            if ctx.should_stop():
                break
        save_state(state(world, float(step)), step=step, blocking=True)
        print(json.dumps({"rank": rank, "stopped_at": step, "local_flag": ctx.stop_requested}), flush=True)
    elif mode == "own_save":
        sd = {"b": torch.full((COLS,), 1.0), "v": 100.0 + rank}  # "v": the gang's, one rank's copy kept
        save_state(sd, step=3, per_rank=own(rank), blocking=os.environ.get("ASYNC") != "1")
        wait()
        print(json.dumps({"rank": rank, "saved": True}), flush=True)
    elif mode == "own_load":
        sd, mine = {"b": torch.zeros(COLS), "v": 0.0}, placeholders()
        loaded = load_state(sd, per_rank=mine)
        assert loaded is not None
        print(json.dumps({"rank": rank, "v": mine["v"], "t": mine["t"].tolist(), "name": mine["name"],
                          "own": same(mine, own(rank)), "untouched": same(mine, placeholders()),
                          "per_rank": loaded.per_rank, "plain_v": sd["v"], "b": sd["b"].tolist()}), flush=True)  # fmt: skip
    elif mode == "churn":
        step = int(os.environ.get("START", "0"))
        while True:
            step += 1
            save_state(state(world, float(step)), step=step, blocking=True, storage_options=OPTS)
            print(json.dumps({"rank": rank, "committed": step}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
