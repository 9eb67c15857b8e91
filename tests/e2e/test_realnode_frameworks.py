"""Issue 30's real-node proof for the framework integrations: a framework's example in 2 real pods,
preempted once through Kueue, logs the same loss at every step as an uninterrupted run of the same seed.

Each case runs its example (``examples/frameworks/``) as a 2-worker gang over gloo on the real node,
its checkpoints on a hostPath folder both pods see. Once rank 0 has logged a few steps, a 1-worker
task of higher priority makes Kueue preempt the gang: every worker saves at the step the ranks agree
on and exits; the task keeps attempt 1, and after re-admission every rank loads the step saved at
the stop. Rank 0's `step N loss X` lines of both runs are compared with those of an uninterrupted
torchrun of the same script on this host (tests/frameworks/story.py: the format and the comparison
the local-backend tests use), to 6 significant digits at every step.

The image has no torch (PyPI's is a multi-GB CUDA build) nor the frameworks: as in
test_realnode_e2e.py's gloo DDP test, this host virtualenv's site-packages is mounted read-only
through a hostPath volume and put on PYTHONPATH (the image's Python has the same minor version), and
the example's folder is mounted beside it. This tree's ``src`` is mounted the same way and put first:
the pods run the integration under test (launcher included) even with an image built before it.
Another framework is another `Case` in `CASES`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import real_node_images
from tests.e2e.test_realnode_e2e import rank_of
from tests.frameworks.story import compare, finish, losses, require, start_torchrun
from tests.harness.binaries import REPO_ROOT
from tests.harness.controlplane import ControlPlane
from tests.harness.realnode_tasks import (
    LogFollower,
    RealCluster,
    cleanup_task,
    new_running_pods,
    real_cluster,
    submit,
    train_task,
    wait_phase,
    worker_exits,
)
from tests.harness.tasks import TASK_LABEL, PodRecorder

pytestmark = [pytest.mark.e2e, pytest.mark.realnode, pytest.mark.slow]

EXAMPLES = REPO_ROOT / "examples" / "frameworks"
SLOW = 600.0  # each worker start imports torch and the framework from a hostPath, on a loaded machine
LOADED = r"gangrun: loaded checkpoint from this attempt \(seq \d+, step (\d+)"


@dataclass(frozen=True)
class Case:
    """One framework's example as a real-node gang: the module it needs, the script (it prints `step N
    loss X` on rank 0 and reads MAX_STEPS and STEP_SECONDS), how many steps, and the step after
    whose loss line the preemptor is submitted (the stop lands some steps later)."""

    module: str
    script: Path
    steps: int
    preempt_after: int


CASES = [
    # 8 steps an epoch on 2 ranks: the stop lands wherever Kueue's preemption reaches the workers,
    # mid-epoch or not; 0.5 s a step leaves it the room to arrive before the end.
    pytest.param(Case("transformers", EXAMPLES / "hf_trainer.py", steps=32, preempt_after=3), id="hf-trainer"),
    pytest.param(Case("lightning", EXAMPLES / "lightning_fit.py", steps=32, preempt_after=3), id="lightning-fit"),
]


@pytest.fixture(scope="module", name="real_cluster")  # one real node at a time: test_realnode_host.py starts its own
def real_cluster_fixture(control_plane_tier_c: ControlPlane) -> Iterator[RealCluster]:
    cp = control_plane_tier_c
    with real_cluster(cp, real_node_images(cp.binaries)) as rc:
        yield rc


def framework_task(rc: RealCluster, name: str, case: Case) -> dict:
    """`case`'s script as a 2-worker task of low priority, with this tree's src, this host's
    site-packages and the script's folder mounted read-only; what the framework writes of its own
    (the HF Trainer's `checkpoint-*` folders) goes to the container's /tmp."""
    torch = require("torch")
    site = str(Path(torch.__file__).resolve().parents[1])
    src = str(REPO_ROOT / "src")
    body = train_task(rc, name)
    spec = body["spec"]
    spec.update(command=["python", str(case.script)], workingDir="/tmp", terminationGracePeriod="60s",
                resources={"cpu": "500m", "memory": "2Gi"},
                env={"MAX_STEPS": str(case.steps), "STEP_SECONDS": "0.5", "OMP_NUM_THREADS": "1",
                     "PYTHONPATH": f"{src}:{site}"})  # fmt: skip
    pod = spec["podTemplate"]["spec"]
    for volume, path in (("src", src), ("site-packages", site), ("example", str(case.script.parent))):
        pod["volumes"].append({"name": volume, "hostPath": {"path": path, "type": "Directory"}})
        pod["containers"][0]["volumeMounts"].append({"name": volume, "mountPath": path, "readOnly": True})
    return body


def by_rank(rc: RealCluster, pods: list[dict]) -> dict[int, LogFollower]:
    return {rank_of(p): LogFollower(rc, p["metadata"]["name"]) for p in pods}


@pytest.mark.parametrize("case", CASES)
def test_a_framework_gang_preempted_on_the_real_node_resumes_at_the_saved_step_with_the_uninterrupted_loss(
        real_cluster: RealCluster, case: Case, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The example in 2 real pods, preempted once by Kueue for a higher-priority task: both workers save
    the same step and exit; the task keeps attempt 1 with no retry used; every rank of the readmitted
    gang loads exactly that step; every step's loss agrees with an uninterrupted torchrun's to 6
    significant digits."""
    require(case.module)
    rc = real_cluster
    name = request.node.callspec.id
    urgent = f"{name}-urgent"
    figures: dict[str, float] = {}
    t0 = time.monotonic()
    straight = start_torchrun(case.script, tmp_path / "straight", MAX_STEPS=str(case.steps))
    rec = PodRecorder(rc.cp, rc.ns)
    try:
        submit(rc, framework_task(rc, name, case))
        first = rc.kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={name}", 2, timeout=SLOW)
        logs = by_rank(rc, first)
        logs[0].wait(rf"step {case.preempt_after} loss", timeout=SLOW)
        figures["preemptor submitted"] = time.monotonic() - t0
        submit(rc, train_task(rc, urgent, nodes=1, priority="high", steps=10))
        uids = {p["metadata"]["uid"] for p in first}
        exits = rc.kube.wait_for("both first workers terminated", lambda: (
            e if len(e := worker_exits(rec, uids)) == 2 else None), timeout=SLOW)
        figures["both workers saved and exited"] = time.monotonic() - t0
        assert {e["exitCode"] for e in exits.values()} <= {0, 143}, exits  # never SIGKILLed at the grace period's end
        for rank, log in logs.items():
            assert re.search(r"gangrun: stop requested \(cause (?!unknown)", log.text), (rank, log.text[-3000:])
        # The launcher leaves the newest committed checkpoint in its termination message: the stop's save.
        rank0 = next(p["metadata"]["name"] for p in first if rank_of(p) == 0)
        committed = re.search(r'"step": ?(\d+)', exits[rank0].get("message", ""))
        assert committed, exits[rank0]
        saved = int(committed.group(1))
        before = losses(logs[0].text.splitlines())
        assert max(s for s, _ in before) == saved, "the stop's save is of the last step trained"
        wait_phase(rc, urgent, "Succeeded", timeout=SLOW)
        again = by_rank(rc, new_running_pods(rc, name, 1, uids))
        resumed = {rank: int(log.wait(LOADED, timeout=SLOW).group(1)) for rank, log in again.items()}
        figures["every rank of the readmitted gang loaded the checkpoint"] = time.monotonic() - t0
        assert resumed == {0: saved, 1: saved}, (resumed, saved)
        s = wait_phase(rc, name, "Succeeded", timeout=SLOW)
        assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"]) == (1, 0, 0), s
        again[0].wait(rf"step {case.steps} loss", timeout=30)  # the log stream has caught up with the exit
        figures["Succeeded"] = time.monotonic() - t0
    finally:
        rec.stop()
        cleanup_task(rc, urgent)
        cleanup_task(rc, name)
        baseline = finish(straight)
    after = losses(again[0].text.splitlines())
    assert min(s for s, _ in after) == saved + 1, "the readmitted gang goes on at the step after the save"
    result = compare(losses(baseline), before + after, case.steps)
    print(f"real node, {name}: preempted after step {case.preempt_after}'s loss, saved step {saved} at the stop, "
          f"every rank resumed from step {saved}; {case.steps} losses agree to {result['worst_digits']:.1f} digits")
    for k, v in figures.items():
        print(f"real node, {name}: {k} at {v:.1f} s")
