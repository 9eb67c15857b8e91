"""Real pods on a real node: the preemption-and-resume loop with every worker a real process in a container.

The session's control plane (tier C, with its kwok nodes) gets a real node beside it (realnode.py:
containerd, the kubelet, CoreDNS), the images built here (hack/build-images.sh) and the gangrun
controller deployed in-cluster from that image with deploy/'s manifests (incluster.py), watching
one namespace of its own. The tasks run the shipped training example
(``python -m gangrun.examples.train``) with their checkpoints on a hostPath volume given through
``podTemplate``, in a ClusterQueue sized for two half-CPU workers, so that a one-worker task of
higher priority makes Kueue preempt the gang; rank 0's training process is also SIGKILLed from the
host and its pod evicted through the Eviction API; the gloo DDP example runs with the host's torch.
The cluster and the task helpers are in realnode_tasks.py.

These tests need root and Debian's containerd, runc, CNI plugins, buildah and debootstrap (``./dev
test`` installs them); without them they skip, and with ``CI=true`` they fail.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

import pytest

from gangrun._core import worker_env as wenv
from tests.e2e.conftest import real_node_images
from tests.harness import incluster
from tests.harness.controlplane import ControlPlane
from tests.harness.realnode_tasks import (
    TIMEOUT,
    LogFollower,
    RealCluster,
    cleanup_task,
    committed_steps,
    ddp_task,
    evict,
    kill_training_process,
    new_running_pods,
    rank_of,
    real_cluster,
    running_pods,
    starts_by_rank,
    submit,
    train_task,
    wait_phase,
    wait_restarts,
    worker_exits,
)
from tests.harness.tasks import TASK_LABEL, PodRecorder, status

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

TIMINGS: dict[str, float] = {}  # measured along the way, printed by the last test


@pytest.fixture(scope="module", name="real_cluster")  # one real node at a time: test_realnode_host.py starts its own
def real_cluster_fixture(control_plane_tier_c: ControlPlane) -> Iterator[RealCluster]:
    cp = control_plane_tier_c
    with real_cluster(cp, real_node_images(cp.binaries)) as rc:
        yield rc


# ------------------------------------------------------------------------------- tests


def test_jobset_pod_hostnames_resolve_from_inside_a_real_pod(real_cluster: RealCluster) -> None:
    """Each worker resolves rank 0's address (MASTER_ADDR, `<jobset>-<job>-0-0.<subdomain>`) and the other
    worker's hostname through the cluster DNS, from inside its container."""
    rc = real_cluster
    script = ("import os, socket, time\n"
              "names = [os.environ['MASTER_ADDR'], os.environ['MASTER_ADDR'].replace('-0-0.', '-0-1.', 1)]\n"
              "deadline = time.time() + 60\n"
              "for n in names:\n"
              "    while True:\n"
              "        try:\n"
              "            print(n, socket.gethostbyname(n), flush=True); break\n"
              "        except OSError:\n"
              "            if time.time() > deadline: raise\n"
              "            time.sleep(0.5)\n"
              # A worker of a real gang outlives its peers' lookups: rank 0 stays up while the other
              # worker (started a moment later, after asking rank 0's launcher for the start id) looks it up.
              "time.sleep(15 if os.environ['NODE_RANK'] == '0' else 0)\n")
    body = train_task(rc, "dns")
    body["spec"]["command"] = ["python", "-c", script]
    try:
        submit(rc, body)
        s = wait_phase(rc, "dns", "Succeeded")
        assert s["attempt"] == 1
    finally:
        cleanup_task(rc, "dns")


def preempt_and_finish(rc: RealCluster, name: str, *, resume: bool,
                       restart_strategy: str = "") -> tuple[dict[int, int], dict[int, re.Match], dict]:
    """Run `name` (2 real workers), preempt it with a 1-worker task of higher priority once it trained 10
    steps, and follow it to Succeeded. Returns the step each rank saved at the stop, the `rank R/2 ...
    starting at step N (source)` line of each of the next run's workers by rank, and the final status."""
    kube = rc.kube
    urgent = f"{name}-urgent"
    rec = PodRecorder(rc.cp, rc.ns)
    try:
        t0 = time.monotonic()
        submit(rc, train_task(rc, name, steps=60, resume=resume, retries=0 if resume else 1,
                              restart_strategy=restart_strategy))
        first = kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={name}", 2, timeout=TIMEOUT)
        TIMINGS[f"{name}: create -> 2 workers Running"] = time.monotonic() - t0
        first_uids = {p["metadata"]["uid"] for p in first}
        logs = [LogFollower(rc, p["metadata"]["name"]) for p in first]
        for f in logs:
            f.wait(r"step 10: loss")
        t1 = time.monotonic()
        submit(rc, train_task(rc, urgent, nodes=1, priority="high", steps=10))
        # The gang is stopped: each worker's own words, and its container's exit.
        saved = {}  # rank -> the step it saved at the stop (rank 0 writes the checkpoint)
        for f in logs:
            log = f.wait(r"stop requested \((.*)\): saved step (\d+)").string
            m = re.search(r"stop requested \((.*)\): saved step (\d+)", log)
            assert m and m.group(1) != "cause unknown", log
            rank = re.search(r"rank (\d+)/2 attempt 1 restart \d+: starting at step", log)
            assert rank, log
            saved[int(rank.group(1))] = int(m.group(2))
        exits = kube.wait_for("both first workers terminated", lambda: (
            e if len(e := worker_exits(rec, first_uids)) == 2 else None), timeout=TIMEOUT)
        TIMINGS[f"{name}: preemptor created -> both workers saved and exited"] = time.monotonic() - t1
        # Ended by the SIGTERM it handled (143) or on its own (0), never SIGKILLed at the grace period's end (137);
        # InPlace: the launcher says its pod was taken (LOST_EXIT). The launcher's termination message names
        # the checkpoint committed at the stop.
        ended = {wenv.LOST_EXIT} if restart_strategy == "InPlace" else {0, 143}
        assert {e["exitCode"] for e in exits.values()} <= ended, exits
        committed = [int(m.group(1)) for e in exits.values() if (m := re.search(r'"step": ?(\d+)', e.get("message", "")))]
        assert saved[0] in committed, (committed, saved)
        wait_phase(rc, urgent, "Succeeded")
        attempt = 1 if resume else 2
        t2 = time.monotonic()
        starts = starts_by_rank(rc, new_running_pods(rc, name, attempt, first_uids))
        TIMINGS[f"{name}: preemptor done -> workers loaded the checkpoint"] = time.monotonic() - t2
        return saved, starts, wait_phase(rc, name, "Succeeded")
    finally:
        rec.stop()
        cleanup_task(rc, urgent)
        cleanup_task(rc, name)


def assert_resumed_from(starts: dict[int, re.Match], saved: dict[int, int], source: str) -> None:
    """Every rank loads exactly the step saved at the stop, from `source` (B7). The example's ranks load
    without waiting for each other (it has no collectives), so rank 1 may start a moment after rank 0
    has committed a newer save of the new run: it still loads the checkpoint rank 0 chose."""
    lines = {r: m.group(0) for r, m in starts.items()}
    assert set(starts) == {0, 1}, lines
    for rank in (0, 1):
        assert int(starts[rank]["step"]) == saved[0] and starts[rank]["source"] == source, (lines, saved)


def test_a_preempted_gang_of_real_workers_saves_in_its_grace_period_keeps_attempt_1_and_resumes(
        real_cluster: RealCluster) -> None:
    """The shipped example in 2 real pods, checkpoints on a hostPath volume: Kueue preempts it for a
    higher-priority task; every worker reads the stop notice from its downward-API file, saves and
    exits 0 inside the grace period; the task keeps attempt 1 with no retry used; after re-admission
    the workers load the step saved at the stop and finish; the controller runs in-cluster."""
    saved, starts, s = preempt_and_finish(real_cluster, "train", resume=True)
    assert s["attempt"] == 1 and s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 0
    assert len(s["attempts"]) == 1
    assert_resumed_from(starts, saved, "own")


def test_a_preempted_in_place_gang_resumes_in_new_pods_with_no_restart_charged(real_cluster: RealCluster) -> None:
    """restartStrategy InPlace: the suspension's pods end with LOST_EXIT, which the Job ignores, so every pod of
    the readmitted gang is a replacement that waits for its round; the controller tells them to start it
    together, as a new start and not a restart (restartAttempt 0, no in-place restart), from the step saved."""
    saved, starts, s = preempt_and_finish(real_cluster, "train-ip", resume=True, restart_strategy="InPlace")
    assert (s["attempt"], s["userRetriesUsed"], s.get("restartAttempt", 0)) == (1, 0, 0), s
    assert not (s.get("inPlace") or {}).get("restarts"), s
    assert {m["restart"] for m in starts.values()} == {"0"}
    assert_resumed_from(starts, saved, "own")


def test_without_resume_a_preempted_gang_of_real_workers_retries_as_a_new_attempt_from_the_previous_checkpoint(
        real_cluster: RealCluster) -> None:
    """resumeAfterPreemption false: the preemption ends attempt 1 as a user retry; attempt 2's workers
    load attempt 1's checkpoint, the step saved at the stop."""
    saved, starts, s = preempt_and_finish(real_cluster, "fresh", resume=False)
    assert s["attempt"] == 2 and s["userRetriesUsed"] == 1
    assert_resumed_from(starts, saved, "previous")


def fail_and_resume(rc: RealCluster, name: str, end_worker: Callable[[dict, LogFollower], int], *, attempt: int,
                    in_place: bool = False, **policy: int | str) -> tuple[int, dict[int, re.Match], dict, PodRecorder]:
    """Run `name` (2 real workers, 100 steps of 0.1 s: the log is read late on a loaded node, and a worker
    must still be training when it is ended), and once rank 0 trained 10 steps end it with
    `end_worker(rank 0's pod, its log)`, which returns the step of the checkpoint the next run must load.
    Follows the gang to its next run in `attempt` (`in_place`: round 1 in the same pods) and the task to
    Succeeded. Returns that step, the next run's `starting at step` lines by rank, the final status and the
    pods' recorded changes."""
    rec = PodRecorder(rc.cp, rc.ns)
    try:
        t0 = time.monotonic()
        submit(rc, train_task(rc, name, steps=100, step_seconds=0.1, **policy))  # type: ignore[arg-type]
        first = rc.kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={name}", 2, timeout=TIMEOUT)
        rank0 = next(p for p in first if rank_of(p) == 0)
        log = LogFollower(rc, rank0["metadata"]["name"])
        log.wait(r"step 10: loss")
        t1 = time.monotonic()
        expected = end_worker(rank0, log)
        uids = {p["metadata"]["uid"] for p in first}
        starts = (starts_by_rank(rc, first, restart=1) if in_place
                  else starts_by_rank(rc, new_running_pods(rc, name, attempt, uids)))
        TIMINGS[f"{name}: worker ended -> the next run loaded its checkpoint"] = time.monotonic() - t1
        if in_place:  # no pod was made again (they may have finished already)
            assert {p["metadata"]["uid"] for p in rc.kube.list("Pod", rc.ns, label_selector=f"{TASK_LABEL}={name}")} \
                == uids, "the same pods"
        s = wait_phase(rc, name, "Succeeded")
        TIMINGS[f"{name}: created -> Succeeded"] = time.monotonic() - t0
        return expected, starts, s, rec
    finally:
        rec.stop()
        cleanup_task(rc, name)


@pytest.mark.parametrize(("max_restarts", "retries", "strategy"), [(1, 0, "InPlace"), (1, 0, "Recreate"), (0, 1, "")],
                         ids=["restart-in-place", "restart-recreate", "retry"])
def test_a_worker_killed_from_the_host_restarts_or_retries_as_the_policy_says_and_resumes_from_its_newest_checkpoint(
        real_cluster: RealCluster, max_restarts: int, retries: int, strategy: str) -> None:
    """Rank 0's training process (the example, under the launcher) is SIGKILLed from the host, as a
    crash or the OOM killer would end it. With maxRestarts 1 the gang restarts inside attempt 1 (restart
    1, no retry used) and every rank loads its own attempt's newest checkpoint: in place (B10), the same
    two pods run round 1, rank 1 stopped with cause Restart; with Recreate (the default), the killed
    worker's container exits 137 and JobSet recreates both pods. With maxRestarts 0 and a retry left,
    attempt 2 loads attempt 1's newest."""
    rc = real_cluster
    name = f"killed-{max_restarts}{retries}{strategy[:2].lower()}"
    killed: dict[str, str] = {}

    def kill(pod: dict, _log: LogFollower) -> int:
        killed["uid"] = pod["metadata"]["uid"]
        kill_training_process(killed["uid"])
        steps = committed_steps(rc, name, 1)  # frozen now: rank 0, the only writer, is dead
        assert steps, "no checkpoint committed before the kill"
        return steps[max(steps)]

    attempt = 1 if max_restarts else 2
    in_place = max_restarts > 0 and strategy == "InPlace"
    newest, starts, s, rec = fail_and_resume(rc, name, kill, attempt=attempt, max_restarts=max_restarts,
                                             retries=retries, in_place=in_place, restart_strategy=strategy)
    exits = worker_exits(rec, {killed["uid"]})
    if in_place:
        # its container never ended but at the task's end
        assert {e["exitCode"] for e in exits.values()} <= {0} and s["inPlace"]["restarts"] == 1, (exits, s)
    else:
        assert exits.popitem()[1]["exitCode"] == 137
    assert {(m["rank"], m["attempt"], m["restart"]) for m in starts.values()} == {
        ("0", str(attempt), str(max_restarts)), ("1", str(attempt), str(max_restarts))}
    assert_resumed_from(starts, {0: newest}, "own" if max_restarts else "previous")
    assert (s["attempt"], s["userRetriesUsed"], s.get("restartAttempt", 0)) == (attempt, retries, max_restarts), s
    assert not s.get("disruptionRestarts"), s


def test_a_deleted_pod_of_an_in_place_gang_is_made_again_alone_and_every_rank_resumes_from_one_checkpoint(
        real_cluster: RealCluster) -> None:
    """Rank 0's pod is deleted (`kubectl delete pod`) under an InPlace gang with maxRestarts 1: its worker saves
    at the SIGTERM and its launcher leaves with LOST_EXIT, which the Job ignores, so the Job makes that one pod
    again; rank 1 keeps its pod and is restarted in place. Both run restart 1 from the step saved at the
    deletion; the restart is charged to maxRestarts (the failure it is), no retry."""
    rc, name = real_cluster, "deleted-ip"
    rec = PodRecorder(rc.cp, rc.ns)
    try:
        submit(rc, train_task(rc, name, steps=100, step_seconds=0.1, max_restarts=1, restart_strategy="InPlace"))
        first = rc.kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={name}", 2, timeout=TIMEOUT)
        rank0, rank1 = sorted(first, key=rank_of)
        log = LogFollower(rc, rank0["metadata"]["name"])
        log.wait(r"step 10: loss")
        t1 = time.monotonic()
        rc.kube.request("DELETE", f"/api/v1/namespaces/{rc.ns}/pods/{rank0['metadata']['name']}")
        saved = int(log.wait(r"stop requested \(.*\): saved step (\d+)").group(1))
        wait_restarts(rc, name, 1)
        (new0,) = new_running_pods(rc, name, 1, {p["metadata"]["uid"] for p in first}, count=1)
        starts = starts_by_rank(rc, [new0, rank1], restart=1)
        TIMINGS[f"{name}: pod deleted -> both ranks loaded the checkpoint"] = time.monotonic() - t1
        assert rank_of(new0) == 0
        pods = rc.kube.list("Pod", rc.ns, label_selector=f"{TASK_LABEL}={name}")
        assert rank1["metadata"]["uid"] in {p["metadata"]["uid"] for p in pods}, "rank 1 kept its pod"
        s = wait_phase(rc, name, "Succeeded")
    finally:
        rec.stop()
        cleanup_task(rc, name)
    assert [e["exitCode"] for e in worker_exits(rec, {rank0["metadata"]["uid"]}).values()] == [wenv.LOST_EXIT]
    assert {(m["attempt"], m["restart"]) for m in starts.values()} == {("1", "1")}
    assert_resumed_from(starts, {0: saved}, "own")
    assert (s["attempt"], s["userRetriesUsed"], s["restartAttempt"], s["inPlace"]["restarts"]) == (1, 0, 1, 1), s
    assert not s.get("disruptionRestarts"), s


def test_a_worker_evicted_through_the_eviction_api_restarts_the_gang_without_charging_a_budget_and_resumes(
        real_cluster: RealCluster) -> None:
    """Rank 0's pod is evicted (POST pods/<name>/eviction, policy/v1, as kubectl drain does): it gets
    DisruptionTarget, saves at its SIGTERM and exits; JobSet restarts the gang without counting it, so a
    task with maxRestarts 0 and no retries goes on in attempt 1 and the restarted rank 0 loads the step
    saved at the eviction."""
    rc = real_cluster

    def evict_it(pod: dict, log: LogFollower) -> int:
        evict(rc, pod["metadata"]["name"])
        return int(log.wait(r"stop requested \(.*\): saved step (\d+)").group(1))

    saved, starts, s, rec = fail_and_resume(rc, "evicted", evict_it, attempt=1)
    disrupted = [c for _rv, _n, p in rec.changes for c in (p.get("status") or {}).get("conditions") or []
                 if c["type"] == "DisruptionTarget" and c["status"] == "True"]
    assert disrupted and disrupted[0]["reason"] == "EvictionByEvictionAPI", disrupted
    assert {(m["attempt"], m["restart"]) for m in starts.values()} == {("1", "1")}
    assert_resumed_from(starts, {0: saved}, "own")
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"], s["disruptionRestarts"]) == (1, 0, 0, 1), s


def test_the_gloo_ddp_example_trains_in_two_real_pods_with_torch_from_the_host(real_cluster: RealCluster) -> None:
    """examples/ddp/train.py in 2 real pods, with this host's torch (ddp_task)."""
    rc = real_cluster
    body = ddp_task(rc, "ddp")
    try:
        submit(rc, body)
        rank0 = next(p for p in rc.kube.wait_running_pods(rc.ns, f"{TASK_LABEL}=ddp", 2, timeout=TIMEOUT)
                     if rank_of(p) == 0)
        log = LogFollower(rc, rank0["metadata"]["name"])
        s = wait_phase(rc, "ddp", "Succeeded")
        assert s["attempt"] == 1
        log.wait(r"step 20 saved", timeout=10)
        assert "starting fresh: 2 ranks, DDP" in log.text, log.text
    finally:
        cleanup_task(rc, "ddp")


def test_a_running_gang_s_commits_reach_its_status_live_through_the_workers_report_port(
        real_cluster: RealCluster) -> None:
    """With --priority-boost the controller polls rank 0's launcher (its `gangrun-report` port) over the
    pod network: the task's status has each commit while its worker still runs, not at its exit."""
    rc = real_cluster
    incluster.remove(rc.kube, wait=120)
    incluster.deploy(rc.kube, rc.cp.api_url, namespace=rc.ns, args=("--priority-boost", "--report-period=0.5"))
    try:
        submit(rc, train_task(rc, "live", nodes=1, steps=400, step_seconds=0.2))  # a commit every 0.4 s

        def newest() -> int | None:
            st = status(rc.kube, rc.ns, "live")
            return ((st.get("accounting") or {}).get("lastCheckpoint") or {}).get("step")

        first = rc.kube.wait_for("a commit in the running task's status", newest, timeout=TIMEOUT, interval=0.2)
        later = rc.kube.wait_for("a newer commit", lambda: (n := newest()) is not None and n > first and n,
                                 timeout=30, interval=0.2)
        (pod,) = running_pods(rc, "live", 1)
        worker = next(c for c in pod["status"]["containerStatuses"] if c["name"] == "worker")
        assert "running" in worker["state"] and not worker.get("lastState"), worker  # it never exited
        assert status(rc.kube, rc.ns, "live")["phase"] == "Running" and later > first
    finally:
        cleanup_task(rc, "live")
        incluster.remove(rc.kube, wait=120)
        incluster.deploy(rc.kube, rc.cp.api_url, namespace=rc.ns)


def test_zz_report_the_real_node_timings(real_cluster: RealCluster) -> None:
    """Not a check: the figures of this run (`pytest -s` shows them; docs/kubernetes.md quotes them)."""
    for k, v in {**real_cluster.node.timings, **TIMINGS}.items():
        print(f"real node: {k}: {v:.1f} s")
