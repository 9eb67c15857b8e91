"""Real faults during a real gang: a process of the cluster crashes while a checkpointing task trains, and the task
neither is lost nor runs twice, no budget is charged for it, every rank resumes from the newest committed checkpoint
and the result is the one an uninterrupted run computes.

The cluster is tests.harness.realnode_tasks': the session's control plane (tier C) with a real node beside it and the gangrun
controller in-cluster. Every test runs the shipped example as a 2-worker gang (resumeAfterPreemption, no retries,
no restarts allowed), preempts it with a 1-worker task of higher priority once it trained 10 steps and follows it to
Succeeded, with one fault injected at a point of that run (tests.harness.faults): the gangrun controller SIGKILLed right after
it created the JobSet and again as Kueue evicts the gang; the Kueue and JobSet controllers restarted while it trains;
the API server, or etcd with its data, restarted as Kueue evicts it; the real node's containerd restarted while it
trains; its kubelet restarted as Kueue evicts it, before it stopped the workers, and again while rank 0 is inside a
checkpoint save. Whatever the fault, the run must end as a fault-free one does: one ClusteredTask, one JobSet,
attempt 1 with no retry, restart or disruption counted, the first run's workers saving at their stop, the next
run's every rank loading that step (the newest committed one) and the final checkpoint's weights equal, bit for
bit, to an uninterrupted run's. Each test prints its recovery figures (`pytest -s`); docs/kubernetes.md ("What
gangrun survives") quotes them.

A last test fills the checkpoint volume during a save (a tmpfs over the task's hostPath checkpoint folder): the save
fails without leaving a file, the gang restarts as its failure policy says, and every rank resumes from the last
complete checkpoint.

Root and the real-node packages are needed, as for test_realnode_e2e.py; without them these tests skip.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from tests.e2e.conftest import real_node_images
from tests.e2e.test_controller_e2e import is_running, list_tasks
from tests.e2e.test_realnode_e2e import assert_resumed_from
from tests.harness.client import Watch, has_condition
from tests.harness.controlplane import ControlPlane
from tests.harness.faults import (
    HostLogs,
    frozen_inside_a_save,
    kill_controller,
    newest_checkpoint,
    restart_control_plane,
    restart_node,
    serving,
    uninterrupted,
    wait_new_leader,
)
from tests.harness.full_volume import fill, leftovers, small_tmpfs
from tests.harness.realnode_tasks import (
    TIMEOUT,
    RealCluster,
    cleanup_task,
    committed_steps,
    rank_of,
    real_cluster,
    submit,
    train_task,
    training_process,
    wait_phase,
)
from tests.harness.tasks import ATTEMPT_LABEL, TASK_LABEL, task_path, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

STEPS = 60
# A gang that outlasts an outage of the control plane and the retries after it (Kueue carries out an eviction it
# could not write seconds after the API server is back): it must still be training when the preemption lands.
LONG = 200
STEP_SECONDS = 0.15
FIGURES: dict[str, float] = {}  # every test's, printed again by the last test

Fault = Callable[[], dict[str, float]]  # injects a fault, waits for the recovery; returns its figures


@pytest.fixture(scope="module", name="real_cluster")  # one real node at a time: test_realnode_host.py starts its own
def real_cluster_fixture(control_plane_tier_c: ControlPlane) -> Iterator[RealCluster]:
    cp = control_plane_tier_c
    with real_cluster(cp, real_node_images(cp.binaries)) as rc:
        yield rc


@dataclass
class Run:
    """What one faulted run left to check."""

    name: str
    steps: int
    uid: str                           # the ClusteredTask's, at its creation
    tasks: list[str]                   # the uids of the ClusteredTasks of that name at the end
    jobsets: list[tuple[str, str]]     # (attempt, name) of every JobSet of the task that ever existed
    saved: int                         # the step rank 0 of the first run said it saved at its stop
    newest: int                        # the newest committed step once the first run's workers had exited
    starts: dict[int, re.Match]        # the next run's `starting at step` lines, by rank
    done: dict[int, str]               # the next run's last lines, by rank
    status: dict
    figures: dict[str, float] = field(default_factory=dict)


def run_through(rc: RealCluster, name: str, *, steps: int = STEPS, on_jobset: Fault | None = None,
                in_training: Fault | None = None, in_preemption: Fault | None = None) -> Run:
    """Run `name` (2 real workers, `steps` steps), preempt it with a higher-priority 1-worker task once rank 0 trained
    10 steps and follow it to Succeeded; inject a fault right after its JobSet appears (`on_jobset`), after step 10
    (`in_training`) or as Kueue marks its Workload Evicted (`in_preemption`). The first two are waited for before
    the run goes on; during the last the preemption is followed on a thread from the host alone (the workers'
    processes, log files and checkpoints: the API server may be down)."""
    kube, jobset, urgent = rc.kube, f"{name}-1", f"{name}-urgent"
    jobsets: dict[str, tuple[str, str, int]] = {}  # uid -> (attempt, name, newest resourceVersion), from a watch

    def on_jobset_event(_t: float, _type: str, js: dict) -> None:
        md = js["metadata"]
        jobsets[md["uid"]] = ((md.get("labels") or {}).get(ATTEMPT_LABEL, "?"), md["name"], int(md["resourceVersion"]))

    selector = f"{TASK_LABEL}={name}"
    jobset_watch = Watch(rc.cp, rc.ns, "jobsets", on_jobset_event, group="jobset.x-k8s.io", version="v1alpha2",
                         label_selector=selector)
    logs = HostLogs(rc, jobset)
    evicted = threading.Event()

    def on_workload(_t: float, _type: str, wl: dict) -> None:
        if jobset in [o["name"] for o in wl["metadata"].get("ownerReferences") or []] and has_condition(wl, "Evicted"):
            evicted.set()

    workloads = Watch(rc.cp, rc.ns, "workloads", on_workload, group="kueue.x-k8s.io", version="v1beta2")
    figures: dict[str, float] = {}
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"follow-{name}")
    try:
        submit(rc, train_task(rc, name, steps=steps, step_seconds=STEP_SECONDS))
        uid = kube.request("GET", task_path(rc.ns, name))["metadata"]["uid"]
        if on_jobset:
            kube.wait_for(f"JobSet {jobset}", lambda: jobsets, timeout=TIMEOUT, interval=0.01)
            figures |= on_jobset()
        first = kube.wait_running_pods(rc.ns, selector, 2, timeout=TIMEOUT)
        first_uids = {p["metadata"]["uid"] for p in first}
        rank0 = next(p["metadata"]["uid"] for p in first if rank_of(p) == 0)
        logs.wait(rank0, r"step 10: loss")
        if in_training:
            processes = {u: training_process(u) for u in first_uids}
            figures |= in_training()
            # The same workers train on after it: the same processes, a step logged after the recovery by rank 0.
            last = max(int(s) for s in re.findall(r"step (\d+): loss", logs.texts[rank0]))
            logs.wait(rank0, rf"step {last + 10}: loss")
            assert {u: training_process(u) for u in first_uids} == processes, "the workers' processes changed"
            assert not evicted.is_set() and {p["metadata"]["uid"] for p in kube.running_pods(
                rc.ns, selector)} == first_uids, "the gang was disturbed by the fault"
        submit(rc, train_task(rc, urgent, nodes=1, priority="high", steps=10, step_seconds=STEP_SECONDS))
        assert evicted.wait(TIMEOUT), f"Kueue did not evict {jobset}"
        t_evicted = time.monotonic()

        def resumed() -> tuple[dict[int, int], int, dict[int, re.Match], float]:
            """From the host alone: the first run's workers gone, what they committed, rank 0's last words and
            the next run's first lines."""
            kube.wait_for("the first run's workers gone", lambda: all(
                training_process(u) is None for u in first_uids), timeout=TIMEOUT, interval=0.05)
            committed = committed_steps(rc, name, 1)  # frozen now: rank 0, the only writer, has exited
            saved = int(logs.wait(rank0, r"stop requested \(.*\): saved step (\d+)", timeout=5).group(1))
            return committed, saved, logs.starts(first_uids), time.monotonic() - t_evicted

        following = pool.submit(resumed)
        if in_preemption:  # on this thread: a process started on a thread that ends gets its PR_SET_PDEATHSIG
            figures |= in_preemption()
        committed, saved, starts, figures["gang evicted -> every rank resumed"] = following.result(timeout=TIMEOUT)
        status = wait_phase(rc, name, "Succeeded")
        done = {int(m["rank"]): logs.wait(u, r"done: .*").group(0) for u, text in logs.texts.items()
                if u not in first_uids and (m := re.search(r"rank (?P<rank>\d+)/2", text))}
        tasks = [t["metadata"]["uid"] for t in list_tasks(kube, rc.ns) if t["metadata"]["name"] == name]
        # The watch has delivered every JobSet event up to the newest change of the JobSets there are now (one
        # watch delivers in resourceVersion order), so it saw any other JobSet made for the task before.
        now = {js["metadata"]["uid"]: int(js["metadata"]["resourceVersion"])
               for js in kube.list("JobSet", rc.ns, label_selector=selector)}
        kube.wait_for("the JobSet watch caught up", lambda: all(
            uid in jobsets and jobsets[uid][2] >= rv for uid, rv in now.items()), timeout=30, interval=0.1)
        mine = sorted((attempt, n) for attempt, n, _rv in jobsets.values())
        return Run(name, steps, uid, tasks, mine, saved, committed[max(committed)], starts, done, status, figures)
    finally:
        pool.shutdown(wait=True)
        workloads.stop()
        jobset_watch.stop()
        logs.stop()
        cleanup_task(rc, urgent)
        cleanup_task(rc, name)


def assert_survived(rc: RealCluster, run: Run) -> None:
    """The run ended as a fault-free one does (module docstring); prints and keeps its figures."""
    s = run.status
    assert run.tasks == [run.uid], f"the ClusteredTask was replaced or duplicated: {run.tasks} (made {run.uid})"
    assert run.jobsets == [("1", f"{run.name}-1")], f"one JobSet, never replaced: {run.jobsets}"
    assert (s["attempt"], len(s["attempts"]), s["userRetriesUsed"], s["systemRetriesUsed"], s.get("restartAttempt", 0),
            s.get("disruptionRestarts", 0)) == (1, 1, 0, 0, 0, 0), s
    assert run.saved == run.newest, (run.saved, run.newest)
    assert {(m["attempt"], m["restart"]) for m in run.starts.values()} == {("1", "0")}
    assert_resumed_from(run.starts, {0: run.newest}, "own")
    weights = uninterrupted(run.steps)
    assert newest_checkpoint(rc.data, run.name, 1) == {"step": run.steps, "w": weights}
    from gangrun.examples.train import dataset

    error = max(abs(a - b) for a, b in zip(weights, dataset()[2], strict=True))
    assert run.done == dict.fromkeys((0, 1), f"done: step {run.steps}, weight error {error:.3f}"), run.done
    for k, v in run.figures.items():
        print(f"{run.name}: {k}: {v:.1f} s")
        FIGURES[f"{run.name}: {k}"] = v


# ------------------------------------------------------------------------------- tests


def test_the_gangrun_controller_sigkilled_after_creating_the_jobset_and_during_the_preemption(
        real_cluster: RealCluster) -> None:
    """The in-cluster controller's process is SIGKILLed from the host right after it created the task's JobSet,
    and again the moment Kueue evicts the gang; its kubelet restarts the container each time and the new process
    leads once the dead one's Lease has expired. It adopts the JobSet it made (no second one) and the preemption
    it missed, and charges neither to the task."""
    rc = real_cluster

    def kill(what: str, running: bool) -> Fault:
        def fault() -> dict[str, float]:
            t0 = time.monotonic()
            old = kill_controller(rc)
            wait_new_leader(rc, old)
            out = {f"controller SIGKILLed {what} -> a new one leads": time.monotonic() - t0}
            if running:
                wait_status(rc.kube, rc.ns, "ctl", is_running, "running")
                out[f"controller SIGKILLed {what} -> the task's status says running"] = time.monotonic() - t0
            return out
        return fault

    # The gang trains on while the controller is down (about 15 s: the dead one's Lease must expire first).
    run = run_through(rc, "ctl", steps=LONG, on_jobset=kill("after creating the JobSet", True),
                      in_preemption=kill("as Kueue evicts the gang", False))
    assert_survived(rc, run)


def test_the_kueue_and_jobset_controllers_restarted_while_the_gang_trains(real_cluster: RealCluster) -> None:
    """Kueue and the JobSet controller are SIGKILLed together after the gang trained 10 steps and started again:
    the gang's workers train on undisturbed (no eviction, the same pods), and the restarted Kueue and JobSet
    controllers then preempt and resume it as usual."""
    rc = real_cluster

    def restart() -> dict[str, float]:
        return {"Kueue and JobSet SIGKILLed -> both serving": restart_control_plane(rc.cp, "kueue", "jobset")}

    assert_survived(rc, run_through(rc, "queues", in_training=restart))


def test_the_api_server_restarted_during_a_preemption(real_cluster: RealCluster) -> None:
    """The API server is SIGKILLed the moment Kueue evicts the gang and started again: every controller, the
    kubelet and the workers' stop go on through the outage and the task resumes from the step saved at the stop."""
    rc = real_cluster

    def restart() -> dict[str, float]:
        return {"API server SIGKILLed -> serving": restart_control_plane(rc.cp, "kube-apiserver")}

    assert_survived(rc, run_through(rc, "apiserver", steps=LONG, in_preemption=restart))


def test_etcd_restarted_with_its_data_during_a_preemption(real_cluster: RealCluster) -> None:
    """etcd is SIGKILLed the moment Kueue evicts the gang and started again on the same data: the API server
    serves again once etcd is back, and the task resumes from the step saved at the stop."""
    rc = real_cluster

    def restart() -> dict[str, float]:
        t0 = time.monotonic()
        restart_control_plane(rc.cp, "etcd")
        rc.cp._wait("the API server serving", lambda: serving(rc.cp, "kube-apiserver"), TIMEOUT)
        return {"etcd SIGKILLed -> the API server serving": time.monotonic() - t0}

    assert_survived(rc, run_through(rc, "etcd", steps=LONG, in_preemption=restart))


def test_containerd_restarted_while_the_gang_trains(real_cluster: RealCluster) -> None:
    """The real node's containerd is SIGKILLed after the gang trained 10 steps and started again: the containers
    live on under their shims (the same training processes train on), and the kubelet then stops and starts the
    gang through the restarted containerd at the preemption."""
    rc = real_cluster

    def restart() -> dict[str, float]:
        return {"containerd SIGKILLed -> serving": restart_node(rc.node, "containerd")}

    assert_survived(rc, run_through(rc, "containerd", in_training=restart))


def test_the_kubelet_restarted_as_the_gang_is_stopped_to_save(real_cluster: RealCluster) -> None:
    """The kubelet is SIGKILLed the moment Kueue evicts the gang, before it has stopped the workers (their SIGTERM,
    at which they save), and started again: it finds the deleted pods' containers running, stops them with their
    grace period, the workers save, and the task resumes from that save."""
    rc = real_cluster

    def restart() -> dict[str, float]:
        return {"kubelet SIGKILLed -> serving": restart_node(rc.node, "kubelet")}

    assert_survived(rc, run_through(rc, "kubelet", steps=LONG, in_preemption=restart))


def test_the_kubelet_restarted_inside_a_checkpoint_save(real_cluster: RealCluster) -> None:
    """Rank 0's training process is stopped (SIGSTOP) while it writes a checkpoint (its `ckpt-<seq>.tmp-<id>`
    folder there, not yet renamed), the kubelet is SIGKILLed and started again, and the process goes on: the kubelet
    finds its containers running and leaves them be, the save commits under its own name, and the same workers
    train on to the preemption, from which every rank resumes as in a fault-free run."""
    rc, name = real_cluster, "kubelet-save"

    def restart() -> dict[str, float]:
        rank0 = next(p for p in rc.kube.running_pods(rc.ns, f"{TASK_LABEL}={name}") if rank_of(p) == 0)
        pid = training_process(rank0["metadata"]["uid"])
        assert pid is not None
        folder = next((rc.data / name).glob("*/attempt-1"))
        with frozen_inside_a_save(pid, folder) as writing:
            figures = {"kubelet SIGKILLed inside a save -> serving": restart_node(rc.node, "kubelet")}
        committed = folder / writing.name.split(".tmp-")[0] / "manifest.json"
        rc.kube.wait_for(f"{committed.parent.name} committed", lambda: committed.exists() and not writing.exists(),
                         timeout=30, interval=0.05)
        return figures

    # Rank 1 trains on while rank 0 is stopped: a long run keeps it from finishing before rank 0 catches up.
    assert_survived(rc, run_through(rc, name, steps=LONG, in_training=restart))


def test_the_checkpoint_volume_full_during_a_save_restarts_the_gang_from_the_last_complete_checkpoint(
        real_cluster: RealCluster) -> None:
    """The task's checkpoint folder on the hostPath volume is a 4 MiB tmpfs (mounted before the task starts, so
    the containers see it); once the gang trained 10 steps the test fills it. Rank 0's next save hits ENOSPC: it
    fails naming the folder, leaves no temporary file, the worker exits with the error and the gang restarts in
    place (restartStrategy InPlace; failurePolicy.maxRestarts 1: charged to it, as a worker failure is). The space is given back as the failure
    shows; every rank of the restarted gang resumes from the last complete checkpoint (none of the failed save is
    loaded) and the final weights equal, bit for bit, an uninterrupted run's."""
    rc, name = real_cluster, "full"
    kube, selector, jobset = rc.kube, f"{TASK_LABEL}={name}", f"{name}-1"
    logs = HostLogs(rc, jobset)
    figures: dict[str, float] = {}
    with small_tmpfs(rc.data / name, "4m") as volume:
        try:
            submit(rc, train_task(rc, name, steps=STEPS, step_seconds=STEP_SECONDS, max_restarts=1,
                                  restart_strategy="InPlace"))
            uid = kube.request("GET", task_path(rc.ns, name))["metadata"]["uid"]
            first = kube.wait_running_pods(rc.ns, selector, 2, timeout=TIMEOUT)
            first_uids = {p["metadata"]["uid"] for p in first}
            rank0 = next(p["metadata"]["uid"] for p in first if rank_of(p) == 0)
            logs.wait(rank0, r"step 10: loss")
            t0 = time.monotonic()
            filler = fill(volume)
            folder = f"{rc.data}/{name}/{uid}/attempt-1"
            failed = logs.wait(rank0, r"CommitFailed: .*").group(0)
            figures["volume full -> the save failed"] = time.monotonic() - t0
            kube.wait_for("rank 0's worker gone", lambda: training_process(rank0) is None, timeout=TIMEOUT,
                          interval=0.05)
            committed = committed_steps(rc, name, 1)  # frozen: rank 0, the only writer, has exited
            left = leftovers(volume)
            filler.unlink()  # the space is back
            starts = logs.starts(set(), restart=1)  # restarted in place: the same pods run round 1
            assert {p["metadata"]["uid"] for p in kube.list("Pod", rc.ns, label_selector=selector)} == first_uids
            figures["volume full -> every rank resumed"] = time.monotonic() - t0
            status = wait_phase(rc, name, "Succeeded")
            final = newest_checkpoint(rc.data, name, 1)  # on the tmpfs: read before it goes
        finally:
            logs.stop()
            cleanup_task(rc, name)
    assert folder in failed and "No space left on device" in failed, failed
    assert left == [], f"the failed save left {left}"
    s = status
    assert (s["attempt"], len(s["attempts"]), s["userRetriesUsed"], s["systemRetriesUsed"],
            s.get("restartAttempt", 0)) == (1, 1, 0, 0, 1), s
    assert {(m["attempt"], m["restart"]) for m in starts.values()} == {("1", "1")}, starts
    assert_resumed_from(starts, {0: committed[max(committed)]}, "own")
    assert final == {"step": STEPS, "w": uninterrupted(STEPS)}
    for k, v in figures.items():
        print(f"{name}: {k}: {v:.1f} s")
        FIGURES[f"{name}: {k}"] = v


def test_zz_report_the_fault_figures(real_cluster: RealCluster) -> None:
    """Not a check: this run's figures together (`pytest -s` shows them; docs/kubernetes.md quotes them)."""
    for k, v in FIGURES.items():
        print(f"fault: {k}: {v:.1f} s")
