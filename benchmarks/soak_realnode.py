"""The soak of the real-node fault campaign: many tasks over many minutes, faults at random among them, and every
task accounted for at the end.

    python -m benchmarks.soak_realnode [--seed 1] [--tasks 30] [--minutes 20] [--faults 12] [--json]
    # as root; the real node is one per machine: one real-node test or benchmark at a time

The control plane (tier C), the real node and the gangrun controller in-cluster, as the real-node tests start them
(tests/harness/realnode_tasks.py: a ClusterQueue of 1 CPU). `--tasks` ClusteredTasks of the shipped example arrive
at seeded random times over `--minutes`: 2-worker `low` gangs of 250 steps of half a CPU each, which fill the quota
(the others queue), and one in four a 1-worker `high` task of 30 steps, for which Kueue preempts a running gang. All
have resumeAfterPreemption, no retries and no restarts allowed. `--faults` faults come at seeded random times, their
kinds a seeded shuffle of the campaign's list (tests/e2e/test_realnode_faults.py), repeated as needed: the gangrun
controller SIGKILLed, the Kueue and JobSet controllers, the API server, etcd (its data kept), the kubelet or
containerd SIGKILLed and started again, each with the harness's helpers (tests/harness/faults.py), which wait until
it serves again (the controller: until a new one leads): that time is the fault's figure.

At the end every task is accounted for as the fault tests account for their gang: one ClusteredTask, the one made at
the submission, and one JobSet `<task>-1` ever made, seen by a watch (else: duplicated); Succeeded (else: lost);
attempt 1 with no retry, restart or disruption counted (else: budget wrongly charged); the final checkpoint's weights
equal to an uninterrupted run's, every run in attempt 1, restart 0, and each run after a stop started at the step
rank 0 saved at that stop, read from the kubelet's log files on the host (else: wrong result). Preemptions are
counted by Kueue's Workloads (`Evicted`, by a watch) and by gangrun's `status.evictions`. The exit status is 1 when
a task is not accounted for; without root, the Kubernetes binaries or the node's packages this prints why, exits 0.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks._lib import load_average, prerequisites
from tests.harness import controlplane, faults
from tests.harness.client import ApiError, Watch, condition
from tests.harness.realnode_tasks import STARTING, TIMEOUT, RealCluster, real_cluster, submit, train_task
from tests.harness.tasks import ATTEMPT_LABEL, TASK_LABEL, task_path

LOW_STEPS, HIGH_STEPS, STEP_SECONDS = 250, 30, 0.2
DRAIN = 720.0  # after the last arrival and fault: time for the queue to empty
FAULTS = ("gangrun controller SIGKILLed -> a new one leads", "Kueue and JobSet SIGKILLed -> both serving",
          "API server SIGKILLed -> serving", "etcd SIGKILLed, data kept -> the API server serving",
          "kubelet SIGKILLed -> serving", "containerd SIGKILLed -> serving")
CHECKS = ("lost", "duplicated", "wrong result", "budget wrongly charged")
TERMINAL = ("Succeeded", "Failed", "Aborted")
START = re.compile(STARTING.replace("/2 ", r"/\d+ "))  # a 1-worker task says `rank 0/1`
SAVED = re.compile(r"stop requested \(.*\): saved step (\d+)")
weights = functools.cache(faults.uninterrupted)


@dataclass
class Task:
    name: str
    high: bool
    at: float                      # its arrival, seconds into the soak
    steps: int
    uid: str = ""                  # the ClusteredTask's, at its creation
    logs: Any = None               # faults.HostLogs of its JobSet's pods
    started: list[int] = field(default_factory=list)  # the steps its runs started at
    preempted: tuple[int, int] = (0, 0)                # by Kueue's Workloads, in gangrun's status.evictions
    problems: dict[str, str] = field(default_factory=dict)


def plan(seed: int, tasks: int, minutes: float, count: int) -> tuple[list[Task], list[tuple[float, str]]]:
    """The tasks (seeded arrivals, one in four high) and the faults (seeded times, kinds shuffled from FAULTS)."""
    rng, window = random.Random(seed), minutes * 60
    arrivals = sorted(rng.uniform(0, window) for _ in range(tasks))
    high = set(rng.sample(range(1, tasks), tasks // 4)) if tasks > 1 else set()
    kinds: list[str] = []
    while len(kinds) < count:
        kinds += rng.sample(FAULTS, len(FAULTS))
    times = sorted(rng.uniform(0.05 * window, 0.95 * window) for _ in range(count))
    return ([Task(f"soak-{i:02d}", i in high, at, HIGH_STEPS if i in high else LOW_STEPS)
             for i, at in enumerate(arrivals)], list(zip(times, kinds, strict=False)))


def injectors(rc: RealCluster) -> dict[str, Callable[[], object]]:
    """Each fault of FAULTS on this cluster, injected and waited for until it serves again."""
    cp, node = rc.cp, rc.node
    return dict(zip(FAULTS, (
        lambda: faults.wait_new_leader(rc, faults.kill_controller(rc)),
        lambda: faults.restart_control_plane(cp, "kueue", "jobset"),
        lambda: faults.restart_control_plane(cp, "kube-apiserver"),
        lambda: (faults.restart_control_plane(cp, "etcd"),
                 cp._wait("the API server serving", lambda: faults.serving(cp, "kube-apiserver"), TIMEOUT)),
        lambda: faults.restart_node(node, "kubelet"),
        lambda: faults.restart_node(node, "containerd")), strict=True))


class Record:
    """From watches: every JobSet of the tasks that ever existed, and every preemption Kueue made."""

    def __init__(self, rc: RealCluster) -> None:
        self.jobsets: dict[str, tuple[str, str, str, int]] = {}  # uid -> (task, attempt, name, resourceVersion)
        self.preemptions: set[tuple[str, str, str]] = set()       # (its JobSet, Workload uid, when Evicted)
        self.watches = [Watch(rc.cp, rc.ns, "jobsets", self._jobset, group="jobset.x-k8s.io", version="v1alpha2",
                              label_selector=TASK_LABEL),
                        Watch(rc.cp, rc.ns, "workloads", self._workload, group="kueue.x-k8s.io", version="v1beta2")]

    def _jobset(self, _t: float, _type: str, js: dict) -> None:
        md = js["metadata"]
        labels = md.get("labels") or {}
        self.jobsets[md["uid"]] = (labels.get(TASK_LABEL, "?"), labels.get(ATTEMPT_LABEL, "?"), md["name"],
                                   int(md["resourceVersion"]))

    def _workload(self, _t: float, _type: str, wl: dict) -> None:
        c = condition(wl, "Evicted")
        if c and c.get("status") == "True" and c.get("reason") == "Preempted":
            owner = next((o["name"] for o in wl["metadata"].get("ownerReferences") or [] if o["kind"] == "JobSet"), "")
            self.preemptions.add((owner, wl["metadata"]["uid"], c.get("lastTransitionTime", "")))

    def caught_up(self, rc: RealCluster) -> None:
        """Until the watch delivered every JobSet's newest change (in resourceVersion order: all made before)."""
        now = {js["metadata"]["uid"]: int(js["metadata"]["resourceVersion"])
               for js in rc.kube.list("JobSet", rc.ns, label_selector=TASK_LABEL)}
        rc.kube.wait_for("the JobSet watch caught up", lambda: all(
            uid in self.jobsets and self.jobsets[uid][3] >= rv for uid, rv in now.items()), timeout=30, interval=0.1)


class Soak:
    """The tasks and faults played in time order on one thread (a restarted process must be started by a thread
    that lives on: PR_SET_PDEATHSIG), the tasks' statuses polled between them."""

    def __init__(self, rc: RealCluster, tasks: list[Task]) -> None:
        self.rc, self.tasks, self.t0 = rc, tasks, time.monotonic()
        self.items: list[dict] = []   # the ClusteredTasks, as last listed
        self.loads = [load_average()]
        self._load_at, self._done = self.t0, set()  # when the load was sampled; tasks finished at the last poll

    def poll(self) -> None:
        try:
            self.items = self.rc.kube.request("GET", task_path(self.rc.ns))["items"]
        except ApiError:
            return  # the API server is away: keep the last list
        done = {i["metadata"]["name"] for i in self.items if (i.get("status") or {}).get("phase") in TERMINAL}
        for t in self.tasks:
            if t.logs and t.name in self._done:
                t.logs.stop()  # finished a poll ago: its last lines were read (the files are held open)
        self._done = done
        if time.monotonic() - self._load_at >= 60:
            self.loads.append(load_average())
            self._load_at = time.monotonic()

    def wait_until(self, at: float) -> None:
        while (left := self.t0 + at - time.monotonic()) > 0:
            self.poll()
            time.sleep(min(2.0, max(left, 0.0)))

    def submit(self, t: Task) -> None:
        body = train_task(self.rc, t.name, nodes=1 if t.high else 2, priority="high" if t.high else "low",
                          steps=t.steps, step_seconds=STEP_SECONDS)
        t.logs = faults.HostLogs(self.rc, f"{t.name}-1")

        def create() -> str:
            try:
                submit(self.rc, body)
            except ApiError as e:
                if e.status != 409:  # 409: a retry of a creation whose answer was lost
                    raise
            return str(self.rc.kube.request("GET", task_path(self.rc.ns, t.name))["metadata"]["uid"])

        t.uid = self.rc.kube.wait_for(f"{t.name} created", create, timeout=TIMEOUT, interval=1.0)

    def inject(self, kind: str, fault: Callable[[], object]) -> dict[str, Any]:
        """The fault; its time, what it took to recover and how many tasks were running."""
        t0 = time.monotonic()
        out: dict[str, Any] = {"at": round(t0 - self.t0, 1), "fault": kind, "running": sum(
            (i.get("status") or {}).get("phase") == "Running" for i in self.items)}
        try:
            fault()
            out["seconds"] = round(time.monotonic() - t0, 1)
        except Exception as e:  # reported; the soak goes on to account for its tasks
            out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        return out

    def play(self, planned: list[tuple[float, str]]) -> list[dict[str, Any]]:
        """Every arrival and fault at its time (later when a fault before it took longer), then the queue drained."""
        inject, done = injectors(self.rc), []
        events: list[tuple[float, Task | str]] = sorted([(t.at, t) for t in self.tasks] + planned,
                                                        key=lambda e: e[0])
        for at, what in events:
            self.wait_until(at)
            if isinstance(what, Task):
                self.submit(what)
            else:
                done.append(self.inject(what, inject[what]))
        deadline = time.monotonic() + DRAIN
        while time.monotonic() < deadline and not (len(self.items) == len(self.tasks) and all(
                (i.get("status") or {}).get("phase") in TERMINAL for i in self.items)):
            self.wait_until(time.monotonic() - self.t0 + 2.0)
        self.poll()
        return done


def result_problem(rc: RealCluster, t: Task) -> str:
    """Why the task's result is not an uninterrupted run's (empty: it is)."""
    try:
        final = faults.newest_checkpoint(rc.data, t.name, 1)
    except AssertionError as e:
        return str(e)
    if final != {"step": t.steps, "w": weights(t.steps)}:
        return f"final checkpoint at step {final.get('step')} differs from an uninterrupted run's"
    starts, saved = [], {0}
    for text in t.logs.texts.values():
        starts += list(START.finditer(text))
        if re.search(r"rank 0/", text):
            saved |= {int(s) for s in SAVED.findall(text)}
    t.started = sorted({int(m["step"]) for m in starts})
    if not starts:
        return "no worker's start in the kubelet's log files"
    if {(m["attempt"], m["restart"]) for m in starts} != {("1", "0")}:
        return "runs started in " + ", ".join(sorted({f"attempt {m['attempt']} restart {m['restart']}" for m in starts}))
    if set(t.started) != saved:
        return f"runs started at steps {t.started}, rank 0 saved {sorted(saved)} at its stops"
    return ""


def account(rc: RealCluster, t: Task, items: list[dict], rec: Record) -> None:
    mine = [i for i in items if i["metadata"]["name"] == t.name]
    s = (mine[0].get("status") or {}) if mine else {}
    p = t.problems
    if s.get("phase") != "Succeeded":
        p["lost"] = f"phase {s.get('phase')}: {s.get('reason')} {s.get('message') or ''}".strip() if mine else "gone"
    if mine and [i["metadata"]["uid"] for i in mine] != [t.uid]:
        p["duplicated"] = f"ClusteredTasks {[i['metadata']['uid'] for i in mine]}, made {t.uid}"
    jobsets = sorted((a, n) for task, a, n, _rv in rec.jobsets.values() if task == t.name)
    if jobsets != [("1", f"{t.name}-1")]:
        p["duplicated"] = f"JobSets (attempt, name) {jobsets}"
    counters = (s.get("attempt"), len(s.get("attempts") or []), s.get("userRetriesUsed"), s.get("systemRetriesUsed"),
                s.get("restartAttempt", 0), s.get("disruptionRestarts", 0))
    if mine and counters != (1, 1, 0, 0, 0, 0):
        p["budget wrongly charged"] = "attempt, attempts, user/system retries, restarts, disruptions: " + str(counters)
    t.preempted = (sum(js == f"{t.name}-1" for js, _uid, _at in rec.preemptions),
                   sum(e.get("kind") == "Preempted" for e in s.get("evictions") or []))
    if "lost" not in p and (wrong := result_problem(rc, t)):
        p["wrong result"] = wrong


def run(seed: int, tasks: int, minutes: float, count: int) -> dict[str, Any] | str:
    """The soak; or why the real node cannot run here."""
    parts = prerequisites()
    if isinstance(parts, str):
        return parts
    binaries, images = parts
    todo, planned = plan(seed, tasks, minutes, count)
    t0 = time.monotonic()
    with controlplane.running("C", binaries) as cp, real_cluster(cp, images) as rc:
        setup = time.monotonic() - t0
        rec = Record(rc)
        soak = Soak(rc, todo)
        try:
            done = soak.play(planned)
            rec.caught_up(rc)
            for t in todo:
                account(rc, t, soak.items, rec)
        finally:
            for w in rec.watches:
                w.stop()
            for t in todo:
                if t.logs:
                    t.logs.stop()
        soak_seconds = time.monotonic() - soak.t0
    counts = {"submitted": len(todo), "succeeded": sum("lost" not in t.problems for t in todo),
              **{c: sum(c in t.problems for t in todo) for c in CHECKS}}
    return {"seed": seed, "tasks": tasks, "high": sum(t.high for t in todo), "minutes": minutes, "counts": counts,
            "accounted": sum(not t.problems for t in todo), "preemptions": {
                "kueue": len(rec.preemptions), "gangrun": sum(t.preempted[1] for t in todo),
                "byTask": {t.name: {"kueue": t.preempted[0], "gangrun": t.preempted[1], "resumedAt": t.started[1:]}
                           for t in todo if any(t.preempted) or len(t.started) > 1}},
            "faults": done, "problems": {t.name: t.problems for t in todo if t.problems},
            "setupSeconds": round(setup, 1), "soakSeconds": round(soak_seconds, 1),
            "wallSeconds": round(time.monotonic() - t0, 1), "cores": os.cpu_count(),
            "loadAverages": [*soak.loads, load_average()]}


def report(out: dict[str, Any]) -> None:
    c = out["counts"]
    print(f"seed {out['seed']}: {out['tasks']} tasks over {out['minutes']:g} min ({out['high']} high), "
          f"{len(out['faults'])} faults")
    heads = ("submitted", "succeeded", "lost", "duplicated", "wrong result", "budget wrongly charged")
    print("  " + "  ".join(heads))
    print("  " + "  ".join(f"{c[h]:>{len(h)}}" for h in heads))
    pre = out["preemptions"]
    print(f"preemptions: {pre['kueue']} by Kueue (Workloads Evicted), {pre['gangrun']} recorded by gangrun "
          "(status.evictions); by task (Kueue/gangrun; resumed at the step saved at each stop): "
          + (", ".join(f"{k} {v['kueue']}/{v['gangrun']} at {v['resumedAt']}" for k, v in pre["byTask"].items())
             or "none"))
    for f in out["faults"]:
        figure = f"{f['seconds']:.1f} s" if "seconds" in f else f"FAILED: {f['error']}"
        print(f"  {int(f['at'] // 60):3d}:{f['at'] % 60:04.1f}  {f['fault']}: {figure} ({f['running']} tasks running)")
    for name, problems in out["problems"].items():
        print(f"  {name}: " + "; ".join(f"{k}: {v}" for k, v in problems.items()))
    print(f"wall time {out['wallSeconds']:.0f} s (cluster up in {out['setupSeconds']:.0f} s, soak "
          f"{out['soakSeconds']:.0f} s); load averages ({out['cores']} cores; before, every minute, after): "
          + " | ".join(out["loadAverages"]))
    print(f"{out['accounted']} of {out['tasks']} tasks accounted for")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tasks", type=int, default=30)
    ap.add_argument("--minutes", type=float, default=20.0, help="the window the tasks arrive in")
    ap.add_argument("--faults", type=int, default=12)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout or a kill: the cluster still torn down
    out = run(args.seed, args.tasks, args.minutes, args.faults)
    if isinstance(out, str):
        print(f"skipped: {out}")
        return 0
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        report(out)
    return 0 if out["accounted"] == out["tasks"] else 1


if __name__ == "__main__":
    sys.exit(main())
