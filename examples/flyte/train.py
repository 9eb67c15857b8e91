"""A Flyte 2 task that trains as a 2-node gangrun gang, run locally with Flyte's own runner.

    pip install 'gangrun[flyte]'
    python examples/flyte/train.py [--epochs 3] [--preempt]

Every rank fits the same linear model (gangrun.examples.train: replicated weights, the same batches),
rank 0 saves a checkpoint every step and the task returns rank 0's final loss. With --preempt the
script evicts the gang once it has saved a few steps, as a higher-priority task would: the Flyte run
keeps waiting, the gang is readmitted in the same attempt, resumes from its own checkpoint and the
run returns the same loss as without the preemption. The gang's timeline and both ranks' output are
printed as they happen; `gangrun ui` shows the timeline afterwards.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

import flyte

import gangrun
import gangrun.flyte
from gangrun.examples.train import FEATURES, dataset, loss, sgd_step

STEPS_PER_EPOCH = 10

env = flyte.TaskEnvironment(
    name="flyte_example",
    plugin_config=gangrun.flyte.Gang(nodes=2, resume_after_preemption=True,
                                     resources={"cpu": "500m", "memory": "256Mi"},
                                     options={"termination_grace_period": "10s"}),
)


@env.task(retries=2)  # gangrun's user retries: a preemption or a lost node uses none of them
def train(epochs: int) -> float:
    ctx = gangrun.context()
    ckpt = ctx.checkpoint
    stop = threading.Event()
    if ctx:
        ctx.on_stop(lambda notice: stop.set())  # preempted: save and return; the gang runs again later
    xs, ys, _ = dataset()
    w, step = [0.0] * FEATURES, 0
    path = ckpt.load() if ckpt is not None else None
    if path is not None:
        state = json.loads(path.read_bytes())
        w, step = state["w"], int(state["step"])
    print(f"rank {ctx.rank}/{ctx.world_size} attempt {ctx.attempt}: starting at step {step} "
          f"({(ckpt.loaded_from if ckpt else None) or 'no checkpoint'})", flush=True)
    while step < epochs * STEPS_PER_EPOCH:
        if stop.is_set():
            break
        w = sgd_step(w, xs, ys, step)
        step += 1
        time.sleep(0.3)  # stands in for real compute
        if ckpt is not None:
            ckpt.save(json.dumps({"step": step, "w": w}).encode(), step=step, blocking=False)
        if step % STEPS_PER_EPOCH == 0:
            print(f"epoch {step // STEPS_PER_EPOCH}: loss {loss(w, xs, ys):.4f}", flush=True)
    if ckpt is not None:
        ckpt.wait()
    return loss(w, xs, ys)


def preempt_when_saved(step: int) -> None:
    """Evict the gang once it has saved `step`, as Kueue would for a higher-priority task
    (the same as `gangrun local evict NAME --reason Preempted` from another terminal)."""
    while True:
        listed = subprocess.run([sys.executable, "-m", "gangrun", "get", "-o", "json"], capture_output=True, text=True)
        for view in json.loads(listed.stdout or "[]"):
            last = (view.get("accounting") or {}).get("lastCheckpoint") or {}
            if view["phase"] == "Running" and (last.get("step") or 0) >= step:
                print(f"--- preempting {view['name']} after its save of step {last['step']} ---", flush=True)
                subprocess.run([sys.executable, "-m", "gangrun", "local", "evict", view["name"], "--reason",
                                "Preempted"], check=True)
                return
        time.sleep(0.5)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--preempt", action="store_true", help="evict the gang once it saved step 5")
    args = parser.parse_args()
    if args.preempt:
        threading.Thread(target=preempt_when_saved, args=(5,), daemon=True).start()
    result = flyte.with_runcontext(mode="local").run(train, epochs=args.epochs)
    print(f"final loss: {result.outputs()[0]:.4f}")
