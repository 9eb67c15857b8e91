"""A real (small) training loop for gangrun: linear regression with mini-batch SGD in numpy.

Every rank holds the same replicated weights (data parallel: with torch.distributed you would
all-reduce the gradients where the comment says so). Rank 0 saves a checkpoint every SAVE_EVERY
steps; on (re)start every rank loads the newest complete checkpoint — this attempt's own first, then
earlier attempts' — so a preempted gang resumes where it was. When the gang is being stopped
(preemption, cancel) the loop saves once more and exits within the grace period.

    STEPS=40 SAVE_EVERY=2 STEP_SECONDS=0.15 python train.py     # also runs outside a gang
"""

from __future__ import annotations

import io
import os
import threading
import time

import numpy as np

import gangrun

STEPS = int(os.environ.get("STEPS", "40"))
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "2"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.15"))  # stands in for real compute
LR, BATCH, FEATURES = 0.05, 64, 8


def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    true_w = np.linspace(-2, 2, FEATURES)
    x = rng.normal(size=(4096, FEATURES))
    return x, x @ true_w + 0.1 * rng.normal(size=len(x)), true_w


def save(ckpt: gangrun.Checkpoint | None, w: np.ndarray, step: int) -> None:
    if ckpt is None:
        return
    buf = io.BytesIO()
    np.savez(buf, w=w, step=step)
    ckpt.save(buf.getvalue(), step=step)


def main() -> None:
    ctx = gangrun.context()
    ckpt = ctx.checkpoint
    stop = threading.Event()
    if ctx:
        ctx.on_stop(lambda notice: stop.set())  # the loop saves and exits; no work in the handler
    x, y, true_w = dataset()
    w, step = np.zeros(FEATURES), 0
    path = ckpt.load() if ckpt else None
    if path is not None:
        state = np.load(io.BytesIO(path.read_bytes()))
        w, step = state["w"], int(state["step"])
    print(f"rank {ctx.rank}/{ctx.world_size} attempt {ctx.attempt} restart {ctx.restart_attempt}: "
          f"starting at step {step} ({ckpt.loaded_from if ckpt else None})", flush=True)
    while step < STEPS:
        if stop.is_set():
            save(ckpt, w, step)
            print(f"stop requested ({ctx.stop_notice.cause if ctx.stop_notice else '?'}): saved step {step}",
                  flush=True)
            return
        rng = np.random.default_rng(step)  # the same batch on every rank: replicated weights
        idx = rng.integers(0, len(x), BATCH)
        grad = 2 * x[idx].T @ (x[idx] @ w - y[idx]) / BATCH  # all-reduce `grad` here with real collectives
        w = w - LR * grad
        step += 1
        time.sleep(STEP_SECONDS)
        if step % SAVE_EVERY == 0:
            save(ckpt, w, step)
        if step % 5 == 0:
            loss = float(np.mean((x @ w - y) ** 2))
            print(f"step {step}: loss {loss:.4f}", flush=True)
    if ckpt is not None:
        ckpt.wait()
    print(f"done: step {step}, weight error {float(np.abs(w - true_w).max()):.3f}", flush=True)


if __name__ == "__main__":
    main()
