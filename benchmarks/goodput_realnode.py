"""The goodput storm of bench_goodput.py on the real node: Kueue chooses the victims, with and without
gangrun's priority boost.

    python -m benchmarks.bench_goodput --tier realnode [--seed 7] [--rounds 3] [--resume on|off|both] [--json]
    # as root; the real node is one per machine: one real-node test or benchmark at a time

The control plane (tier C, Kueue's `PriorityBoost` gate on), the real node and the gangrun controller
in-cluster from the image, as bench_realnode.py starts them. 3 `low` gangs of 1 worker (half a CPU
each, all of the ClusterQueue's 1.5 CPU) run bench_goodput's WORKER in real containers: a fixed
number of steps, a checkpoint every k steps (k seeded per gang) on a hostPath folder, no final save
when stopped. 2 `high` tasks of 1 worker arrive at seeded times; each needs the room of one low gang,
and Kueue preempts one. Each configuration plays the same storm after the one before it has gone,
with a controller deployed for it: `gangrun controller` (Kueue's default order among equal
priorities: the most recently admitted) or `gangrun controller --priority-boost` with the boost's
steps scaled to the storm's seconds, as the local tier scales them.

The figures are the ClusteredTasks' own `status.accounting`, read through the Kubernetes backend's
`get` (the same view as `gangrun get -o json`), and printed as the local tier prints them.

With `--priority-boost` the controller polls each running gang's first worker for its newest commit
(`--report-period`, here one step), so its work at risk falls at each commit, as on the local
backend; without boosting it learns commits only from the workers' termination messages, when they
exit (docs/kubernetes.md; docs/local-backend.md has the figures). A run takes about 9 minutes for the four configurations
(`--resume on`: about 5). Without root, the Kubernetes binaries or the node's packages this prints
why and exits 0.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from benchmarks._goodput import CONFIGS, WORKER, Storm, compare, figures, plan, table, worker_env
from benchmarks._lib import load_average, prerequisites
from gangrun._backends.kube.backend import KubeBackend
from tests.harness import controlplane

STORM = Storm(gangs=3, arrivals=2, steps=120, step_seconds=0.5, intervals=(2, 8, 24), arrival_window=(10.0, 40.0),
              high_seconds=10.0, boost_steps=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0))
TERMINAL = ("Succeeded", "Failed", "Aborted")


def low_task(rc: Any, storm: Storm, name: str, every: int, script: Path, *, resume: bool) -> dict:
    """A low gang: WORKER from the hostPath folder, its checkpoints beside it, retries enough for the storm."""
    from tests.harness.realnode_tasks import train_task

    body = train_task(rc, name, nodes=1, priority="low", resume=resume, retries=50)
    body["spec"].update(command=["python", str(script)], env=worker_env(storm, every))
    return body


def high_task(rc: Any, storm: Storm, name: str) -> dict:
    from tests.harness.realnode_tasks import train_task

    body = train_task(rc, name, nodes=1, priority="high", resume=False)
    body["spec"].update(command=["sleep", f"{storm.high_seconds:g}"], env={})
    return body


def controller_args(storm: Storm, boost: bool) -> tuple[str, ...]:
    # The live reports are polled once a step: as the boost's steps, the poll is scaled to the storm's time.
    return ("--priority-boost", "--boost-steps=" + ",".join(f"{s:g}" for s in storm.boost_steps),
            f"--report-period={storm.step_seconds:g}") if boost else ()


def play(rc: Any, backend: KubeBackend, storm: Storm, intervals: list[int], arrivals: list[float], *, boost: bool,
         resume: bool, script: Path, timeout: float, tag: str = "") -> list[dict[str, Any]]:
    """One configuration on the real node, with a controller of its own. Returns the low gangs' views."""
    import incluster

    from tests.harness.realnode_tasks import submit, wait_phase

    kube = rc.kube
    incluster.remove(kube, wait=120)
    incluster.deploy(kube, rc.cp.api_url, namespace=rc.ns, args=controller_args(storm, boost))
    tag = f"{tag}b{int(boost)}r{int(resume)}"  # names unique across rounds: a deleted task's name is reused late
    low = [f"{tag}-low-{i}" for i in range(len(intervals))]
    highs = [f"{tag}-high-{i}" for i in range(len(arrivals))]
    try:
        for name, every in zip(low, intervals, strict=True):
            submit(rc, low_task(rc, storm, name, every, script, resume=resume))
            wait_phase(rc, name, "Running")  # admitted one after another: "most recently admitted" means something
        t0 = time.monotonic()
        for name, at in zip(highs, arrivals, strict=True):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            submit(rc, high_task(rc, storm, name))
        deadline = t0 + timeout
        while True:
            views = [backend.get(n) for n in low]
            if all(v["phase"] in TERMINAL for v in views):
                return views
            if time.monotonic() > deadline:
                raise SystemExit(f"the storm did not finish within {timeout:.0f} s (boost={boost}, resume={resume}): "
                                 + ", ".join(f"{v['name']} {v['phase']}" for v in views)
                                 + f"\ncontroller:\n{incluster.logs(kube)[-4000:]}")
            time.sleep(1.0)
    finally:
        clear(rc, low + highs)


def clear(rc: Any, names: list[str]) -> None:
    """Delete the tasks and wait until their pods are gone and Kueue holds nothing of them."""
    from tests.harness.realnode_tasks import CLUSTER_QUEUE, TASK_LABEL, cleanup_task

    for name in names:
        cleanup_task(rc, name)
    kube = rc.kube

    def empty() -> bool:
        cq = (kube.get("ClusterQueue", CLUSTER_QUEUE) or {}).get("status") or {}
        return (not kube.list("Pod", rc.ns, label_selector=TASK_LABEL)
                and not cq.get("admittedWorkloads") and not cq.get("pendingWorkloads"))

    kube.wait_for("the storm's tasks gone", empty, timeout=180, interval=1.0)


def run(storm: Storm, seed: int, *, rounds: int = 1, resume: tuple[bool, ...],
        timeout: float = 600.0) -> dict[str, Any] | str:
    """The storm played `rounds` times (seeds seed, seed+1, ...), once per configuration each time, and
    added up as the local tier adds its rounds; or why the real node cannot run here."""
    parts = prerequisites()
    if isinstance(parts, str):
        return parts
    binaries, images = parts
    from tests.harness.realnode_tasks import real_cluster

    configs = [c for c in CONFIGS if c[1] in resume]
    views: dict[tuple[bool, bool], list[dict[str, Any]]] = {c: [] for c in configs}
    seconds: dict[tuple[bool, bool], float] = dict.fromkeys(configs, 0.0)
    intervals_all: list[int] = []
    played, loads = [], [load_average()]
    t0 = time.monotonic()
    with controlplane.running("C", binaries) as cp, real_cluster(cp, images, cpu=f"{storm.gangs * 0.5:g}") as rc:
        setup = time.monotonic() - t0
        script = rc.data / "worker.py"  # the pods see the hostPath folder at the same path
        script.write_text(WORKER)
        script.chmod(0o644)
        backend = KubeBackend(kubeconfig=str(cp.kubeconfig), namespace=rc.ns)
        for r in range(rounds):
            intervals, arrivals = plan(storm, seed + r)
            played.append({"seed": seed + r, "checkpointEvery": intervals,
                           "arrivalTimes": [round(a, 2) for a in arrivals]})
            intervals_all += intervals
            for boost, res in configs:
                started = time.monotonic()
                got = play(rc, backend, storm, intervals, arrivals, boost=boost, resume=res, script=script,
                           timeout=timeout, tag=f"r{r}")
                seconds[(boost, res)] += time.monotonic() - started
                views[(boost, res)] += [{**v, "round": r} for v in got]
                loads.append(load_average())
    results = {c: figures(views[c], intervals_all) for c in configs}
    out = compare(results, {"tier": "realnode", "seed": seed, "gangs": storm.gangs, "arrivals": storm.arrivals,
                            "rounds": played, "setupSeconds": round(setup, 1), "loadAverages": loads})
    for c in out["configs"]:
        c["seconds"] = round(seconds[(c["boost"], c["resumeAfterPreemption"])], 1)
    return out


def main(seed: int, rounds: int, resume: tuple[bool, ...], as_json: bool) -> int:
    out = run(STORM, seed, rounds=rounds, resume=resume)
    if isinstance(out, str):
        print(f"skipped: {out}")
        return 0
    if as_json:
        print(json.dumps(out, indent=1))
        return 0
    for r in out["rounds"]:
        print(f"real node, seed {r['seed']}: {out['gangs']} low gangs of 1 worker (checkpoint every "
              f"{r['checkpointEvery']} steps of {STORM.step_seconds} s, {STORM.steps} steps), {out['arrivals']} high "
              f"arrivals at {r['arrivalTimes']} s, each running {STORM.high_seconds:g} s")
    print(f"control plane, real node and controller up in {out['setupSeconds']} s; per configuration: "
          + ", ".join(f"boost {'on' if c['boost'] else 'off'}/resume {'on' if c['resumeAfterPreemption'] else 'off'} "
                      f"{c['seconds']} s" for c in out["configs"])
          + (f" ({len(out['rounds'])} rounds)" if len(out["rounds"]) > 1 else ""))
    print(table(out))
    for c in out["configs"]:
        print(f"boost {'on' if c['boost'] else 'off'}, resume {'on' if c['resumeAfterPreemption'] else 'off'}: "
              + "; ".join(f"{g['name']} every {g['checkpointEvery']}: lost {g['workLostSeconds']} s at {g['stops']}"
                          for g in c["gangs"]))
    print(f"load averages ({os.cpu_count()} cores; before, then after each configuration of each round): "
          f"{' | '.join(out['loadAverages'])}")
    return 0
