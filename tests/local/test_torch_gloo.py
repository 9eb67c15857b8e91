"""torch on the local backend: a torch.distributed script runs unchanged in a local gang, and the
examples/ddp gang (DDP and FSDP2 over gloo, 2 nodes x 2 processes) resumes from its own sharded
checkpoint after a preemption, its loss curve continuing where it stopped (S5, S10, B3), and a DDP
gang whose ranks draw from random streams of their own trains through two preemptions exactly as
without them, its streams saved as `per_rank`.

torch is the optional `torch` extra: skipped where it is missing, except under CI=true, where a
missing torch fails these tests instead.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from gangrun._manifest_file import load_manifest

from .conftest import checkpointed, phase, wait_for

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import torch  # CI installs the torch extra: a missing torch is a failure there, not a skip
else:
    torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp"

SCRIPT = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")  # env:// from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
n = dist.get_world_size()
assert t.item() == n * (n + 1) / 2, t
print(f"rank {dist.get_rank()}/{n} local {os.environ['LOCAL_RANK']} all_reduce ok: {t.item()}", flush=True)
dist.destroy_process_group()
"""


def test_gloo_all_reduce_across_a_two_node_gang(backend, manifest, tmp_path: Path) -> None:
    script = tmp_path / "gloo.py"
    script.write_text(SCRIPT)
    spec = manifest("gloo", nodes=2, command=[sys.executable, str(script)], cpu="1")
    backend.submit(spec)
    done = wait_for(backend, "gloo", phase("Succeeded"))
    assert done["attempt"] == 1
    lines = list(backend.logs("gloo"))
    assert sum("all_reduce ok: 3.0" in line for line in lines) == 2


def test_a_script_that_runs_under_torchrun_runs_unchanged_in_a_gang(backend, manifest, tmp_path: Path) -> None:
    """tests/torch_sdk/adapted.py, which tests/torch_sdk/test_torch_standalone.py runs under plain
    python and torchrun, in a 2-node gang: the gang's ranks, and the task's checkpoint location."""
    script = tmp_path / "train.py"
    script.write_text((Path(__file__).resolve().parents[1] / "torch_sdk" / "adapted.py").read_text())
    src = str(Path(__file__).resolve().parents[2] / "src")
    spec = manifest("adapted", nodes=2, command=[sys.executable, str(script)], cpu="1",
                    env={"PYTHONPATH": src, "OMP_NUM_THREADS": "1"})
    backend.submit(spec)
    wait_for(backend, "adapted", phase("Succeeded"), timeout=180)
    lines = list(backend.logs("adapted"))
    results = sorted((json.loads(line[line.index("{"):]) for line in lines if "{" in line), key=lambda r: r["rank"])
    assert [(r["rank"], r["world"], r["node_rank"], r["in_gang"], r["step"]) for r in results] == [
        (0, 2, 0, True, 3), (1, 2, 1, True, 3)]
    assert not any("not in a gangrun task" in line for line in lines), "a gang's checkpoints are the task's"


@pytest.mark.slow
@pytest.mark.parametrize("example", ["ddp", "fsdp"])
def test_s5_example_gang_preempted_resumes_from_its_own_sharded_checkpoint(backend, tmp_path: Path, example: str) -> None:
    doc = yaml.safe_load((EXAMPLE / f"{example}.yaml").read_text())
    doc["spec"]["command"][0] = sys.executable  # the interpreter that has torch, whatever `python` is on PATH
    doc["spec"]["workingDir"] = str(EXAMPLE)
    # Where this checkout's gangrun is, for the workers (the installed one may be another checkout).
    doc["spec"]["env"]["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    path = tmp_path / f"{example}.yaml"
    path.write_text(yaml.safe_dump(doc))
    backend.submit(load_manifest(path))
    wait_for(backend, example, checkpointed(10), what="a committed checkpoint at step >= 10")
    backend.evict(example, "Preempted")
    done = wait_for(backend, example, phase("Succeeded"), timeout=240)
    assert done["attempt"] == 1, "a preemption keeps the attempt (resumeAfterPreemption)"
    lines = [line for line in backend.logs(example) if "eval loss" in line]
    resumed = [re.search(r"resumed at step (\d+) \((\w+) checkpoint, (\d+) ranks\), eval loss ([\d.]+)", line)
               for line in lines]  # fmt: skip
    resumed = [m for m in resumed if m]
    assert len(resumed) == 1, "\n".join(lines)
    step, source, ranks, after = resumed[0].groups()
    assert (source, ranks) == ("own", "4"), resumed[0].group(0)
    before = [re.search(rf"step {step} saved, eval loss ([\d.]+)", line) for line in lines]
    before = [m.group(1) for m in before if m]
    assert before and before[0] == after, "the curve continues where it stopped:\n" + "\n".join(lines)
    assert any("step 60 saved" in line for line in lines), "and training finishes"


# Round 0: every rank trains until ctx.should_stop(); the test SIGTERMs rank 0 only, which lingers, so
# rank 1, stopped through the collective alone, exits first. Round 1: every rank finishes at once.
PEER_STOP = """
import os, sys, time, torch.distributed as dist, gangrun
dist.init_process_group("gloo")
ctx = gangrun.context()
if int(os.environ["JOBSET_RESTART_ATTEMPT"]) == 0:
    steps = 0
    while not ctx.should_stop() and steps < 2000:  # the first call imports gangrun.torch: seconds
        time.sleep(0.05)
        steps += 1
        if steps == 3:
            print(f"ready pid={os.getpid()}", flush=True)
    if ctx.stop_requested:
        time.sleep(1.5)
    print(f"left the loop own_signal={ctx.stop_requested}", flush=True)
else:  # the next round only completes: every rank is up before rank 0, which holds the store, leaves
    dist.barrier()
dist.destroy_process_group()
"""


def test_a_rank_stopped_only_through_should_stop_does_not_complete_its_gang(backend, manifest,
                                                                             tmp_path: Path) -> None:
    import signal
    import time

    script = tmp_path / "peer_stop.py"
    script.write_text(PEER_STOP)
    backend.submit(manifest("peer", nodes=2, command=[sys.executable, str(script)], max_restarts=1, grace="10s",
                            env={"OMP_NUM_THREADS": "1"}))
    deadline = time.monotonic() + 90
    while (ready := [line for line in backend.logs("peer", rank=0) if "ready pid=" in line]) == []:
        assert time.monotonic() < deadline, "rank 0 never reached its loop"
        time.sleep(0.2)
    os.kill(int(ready[0].split("pid=")[1]), signal.SIGTERM)  # a stop that reaches rank 0 only
    done = wait_for(backend, "peer", phase("Succeeded"))
    exits = [e.data for e in backend.events("peer") if e.type.value == "WorkerExited"]
    assert exits and exits[0]["rank"] == 1 and exits[0]["code"] == 143, exits
    assert done["restartAttempt"] == 1, "the stopped round did not count as the task's end"


def _epoch_losses(lines: list[str]) -> dict[tuple[int, int], set[float]]:
    """(rank, epoch) -> every mean loss printed for it (an epoch ended again after a resume prints again)."""
    out: dict[tuple[int, int], set[float]] = {}
    for line in lines:
        if '"epoch"' in line:
            r = json.loads(line[line.index("{") :])
            out.setdefault((r["rank"], r["epoch"]), set()).add(r["loss"])
    return out


@pytest.mark.slow
def test_ddp_ranks_with_their_own_rng_streams_preempted_twice_train_as_if_never_stopped(
    backend, manifest, tmp_path: Path
) -> None:
    """tests/local/ddp_per_rank.py: dropout and shuffling draw from per-rank streams, saved as
    `per_rank`. Preempted twice, every rank's loss of every epoch is the uninterrupted run's, to the bit."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    script = str(Path(__file__).with_name("ddp_per_rank.py"))
    env = {"PYTHONPATH": src, "OMP_NUM_THREADS": "1", "STEP_SECONDS": "0.15"}

    def run(name: str) -> None:
        backend.submit(manifest(name, nodes=2, command=[sys.executable, script], cpu="1", resume=True, grace="60s",
                                env=env))  # fmt: skip

    run("straight")
    wait_for(backend, "straight", phase("Succeeded"), timeout=240)
    want = _epoch_losses(list(backend.logs("straight")))
    assert sorted(want) == [(r, e) for r in range(2) for e in range(6)] and all(len(v) == 1 for v in want.values())
    assert want[(0, 5)] != want[(1, 5)], "the ranks draw from streams of their own"

    run("preempted")
    for at in (9, 27):  # a committed checkpoint at or after that step, then a preemption
        wait_for(backend, "preempted", checkpointed(at), what=f"a committed checkpoint at step >= {at}", timeout=240)
        backend.evict("preempted", "Preempted")
    done = wait_for(backend, "preempted", phase("Succeeded"), timeout=240)
    assert done["attempt"] == 1, "a preemption keeps the attempt"
    lines = list(backend.logs("preempted"))
    resumes = [json.loads(line[line.index("{") :]) for line in lines if '"resumed_at"' in line]
    assert sorted((r["rank"], r["per_rank"]) for r in resumes) == [(0, True), (0, True), (1, True), (1, True)], resumes
    assert _epoch_losses(lines) == want, "every rank's epoch losses are the uninterrupted run's"
