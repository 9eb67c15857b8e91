"""The Flyte task of the real-node connector test (test_realnode_flyte.py), in the pods as on the host.

The host serialises it into the task template Flyte would ship to the connector; every rank's pod
(image `localhost/gangrun-flyte:dev`: gangrun with the flyte extra) imports it again through Flyte's
entrypoint, from this folder mounted read-only at the same path and put on PYTHONPATH. It imports
nothing but flyte and gangrun, which the image has.

`train` is a 2-rank gang that sums 1..steps, one term a step, saving after every step and listening
for the stop notice: at a stop it waits for its save and returns early (that value is dropped, the
rank exits 143); readmitted, it loads its own newest save and goes on. Rank 0's value is the task's.

The host folder the test shares with the pods (checkpoints, Flyte's inputs and outputs) is
$GANGRUN_E2E_FLYTE_DATA, set before this module is imported; the gang's pods get it in their
environment, so both sides build the same template.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import flyte

import gangrun
from gangrun.flyte import Gang

HERE = str(Path(__file__).resolve().parent)
DATA = os.environ.get("GANGRUN_E2E_FLYTE_DATA", "/nonexistent")
IMAGE = "localhost/gangrun-flyte:dev"
QUEUE = "real"  # realnode_tasks.QUEUE
# realnode.placement(): the real node's label and taint (the test checks that these agree).
PLACEMENT = {"nodeSelector": {"gangrun.dev/node": "real"},
             "tolerations": [{"key": "gangrun.dev/real-node", "operator": "Equal", "value": "true",
                              "effect": "NoSchedule"}]}
POD_TEMPLATE = {"spec": {
    "containers": [{"name": "worker", "volumeMounts": [{"name": "data", "mountPath": DATA},
                                                       {"name": "code", "mountPath": HERE, "readOnly": True}]}],
    "volumes": [{"name": "data", "hostPath": {"path": DATA, "type": "Directory"}},
                {"name": "code", "hostPath": {"path": HERE, "type": "Directory"}}],
    **PLACEMENT}}

env = flyte.TaskEnvironment(name="rnflyte", image=IMAGE, plugin_config=Gang(
    nodes=2, resources={"cpu": "500m", "memory": "256Mi"}, queue=QUEUE, priority_class="low",
    resume_after_preemption=True,
    options={"termination_grace_period": "20s", "pod_template": POD_TEMPLATE,
             "env": {"PYTHONPATH": HERE, "GANGRUN_E2E_FLYTE_DATA": DATA}}))


@env.task
def train(steps: int, step_seconds: float) -> str:
    ctx = gangrun.context()
    ckpt = ctx.checkpoint
    assert ckpt is not None
    stop = threading.Event()
    ctx.on_stop(lambda notice: stop.set())
    step, total = 0, 0
    path = ckpt.load()
    if path is not None:
        state = json.loads(path.read_bytes())
        step, total = state["step"], state["total"]
    source = ckpt.loaded_from or "no checkpoint"
    print(f"rank {ctx.rank}/{ctx.world_size} attempt {ctx.attempt} restart {ctx.restart_attempt}: "
          f"starting at step {step} ({source})", flush=True)
    started = step
    while step < steps:
        if stop.is_set():
            ckpt.wait()
            notice = ctx.stop_notice
            print(f"stop requested ({notice.cause if notice else None}): saved step {step}", flush=True)
            return f"stopped at step {step}"  # dropped: the rank exits 143 and writes no outputs
        step += 1
        total += step
        time.sleep(step_seconds)
        ckpt.save(json.dumps({"step": step, "total": total}).encode(), step=step)
        print(f"step {step}", flush=True)
    ckpt.wait()
    return f"total {total} on rank {ctx.rank}, attempt {ctx.attempt}, resumed at step {started} ({source})"
