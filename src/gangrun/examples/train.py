"""A small training loop that survives preemption, in plain Python: `python -m gangrun.examples.train`.

It needs nothing but gangrun, so the example manifests run it in any image that has gangrun installed
(deploy/examples/train.yaml). Every rank fits the same linear model by mini-batch SGD on the same
synthetic data (replicated weights, as data parallelism keeps them); rank 0 saves a checkpoint every
SAVE_EVERY steps. On start every rank loads the newest complete checkpoint, this attempt's own first,
so a gang that Kueue preempted and readmitted, or that restarted after a node was drained, resumes
where it saved. When the gang is stopped (the stop notice: a preemption, a cancel, a drain) the loop
saves once more and exits within the grace period.

    STEPS=200 SAVE_EVERY=10 STEP_SECONDS=0.5 python -m gangrun.examples.train   # also runs outside a gang
"""

from __future__ import annotations

import json
import os
import random
import threading
import time

import gangrun
from gangrun.checkpoint import Checkpoint

FEATURES, BATCH, LR = 8, 32, 0.05


def dataset(n: int = 2048) -> tuple[list[list[float]], list[float], list[float]]:
    rng = random.Random(0)
    true_w = [-2 + 4 * i / (FEATURES - 1) for i in range(FEATURES)]
    xs = [[rng.gauss(0, 1) for _ in range(FEATURES)] for _ in range(n)]
    ys = [sum(w * x for w, x in zip(true_w, row, strict=True)) + rng.gauss(0, 0.1) for row in xs]
    return xs, ys, true_w


def sgd_step(w: list[float], xs: list[list[float]], ys: list[float], step: int) -> list[float]:
    """One mini-batch step; the batch depends only on the step, so every rank computes the same."""
    rng = random.Random(step)
    grad = [0.0] * FEATURES
    for _ in range(BATCH):
        i = rng.randrange(len(xs))
        err = sum(a * b for a, b in zip(w, xs[i], strict=True)) - ys[i]
        for j in range(FEATURES):
            grad[j] += 2 * err * xs[i][j] / BATCH
    return [a - LR * g for a, g in zip(w, grad, strict=True)]  # all-reduce `grad` here with real collectives


def loss(w: list[float], xs: list[list[float]], ys: list[float]) -> float:
    errors = (sum(a * b for a, b in zip(w, row, strict=True)) - y for row, y in zip(xs, ys, strict=True))
    return sum(e * e for e in errors) / len(xs)


def save(ckpt: Checkpoint | None, w: list[float], step: int) -> None:
    if ckpt is not None:
        ckpt.save(json.dumps({"step": step, "w": w}).encode(), step=step)


def main() -> int:
    steps = int(os.environ.get("STEPS", "200"))
    save_every = int(os.environ.get("SAVE_EVERY", "10"))
    step_seconds = float(os.environ.get("STEP_SECONDS", "0.5"))  # stands in for real compute
    ctx = gangrun.context()
    ckpt = ctx.checkpoint
    stop = threading.Event()
    if ctx:
        ctx.on_stop(lambda notice: stop.set())  # the loop saves and exits; no work in the hook
    xs, ys, true_w = dataset()
    w, step = [0.0] * FEATURES, 0
    path = ckpt.load() if ckpt is not None else None
    if path is not None:
        state = json.loads(path.read_bytes())
        w, step = state["w"], int(state["step"])
    source = (ckpt.loaded_from if ckpt is not None else None) or "no checkpoint"
    print(f"rank {ctx.rank}/{ctx.world_size} attempt {ctx.attempt} restart {ctx.restart_attempt}: "
          f"starting at step {step} ({source})", flush=True)
    while step < steps:
        if stop.is_set():
            save(ckpt, w, step)
            if ckpt is not None:
                ckpt.wait()
            cause = ctx.stop_notice.cause if ctx.stop_notice else None
            print(f"stop requested ({cause or 'cause unknown'}): saved step {step}", flush=True)
            return 0
        w = sgd_step(w, xs, ys, step)
        step += 1
        time.sleep(step_seconds)
        if step % save_every == 0:
            save(ckpt, w, step)
        if step % 10 == 0:
            print(f"step {step}: loss {loss(w, xs, ys):.4f}", flush=True)
    if ckpt is not None:
        if step % save_every:  # the last step was not saved in the loop
            save(ckpt, w, step)
        ckpt.wait()
    print(f"done: step {step}, weight error {max(abs(a - b) for a, b in zip(w, true_w, strict=True)):.3f}",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
