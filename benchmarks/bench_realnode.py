"""Where the time goes on a real node: a gang created, preempted by Kueue and resumed, in real containers.

    python -m benchmarks.bench_realnode [--rounds 3] [--json]      # as root; ./dev bench runs it too

Starts the control plane (tier C of tests/harness/controlplane.py), the real node beside it
(tests/harness/realnode.py: containerd, the kubelet, CoreDNS; the images of hack/build-images.sh) and
the gangrun controller in-cluster from the image, as the real-node tests do (tests/harness/realnode_tasks.py).
Each round runs the shipped example (`python -m gangrun.examples.train`) as a 2-worker gang of half a
CPU each, its checkpoints on a hostPath volume, and once rank 0 trained 10 steps submits a 1-worker
task of higher priority, which makes Kueue preempt the gang; when that task is done Kueue readmits
the gang, which resumes from the step it saved at the stop. Three figures, each split into steps:

* create:     task created -> all workers Running;
* preemption: preemptor created -> every worker's final save committed -> the gang's pods gone;
* readmission: the preemptor's Workload Finished -> the workers' first training step after their load.

Every step is attributed to the substrate (Kueue, JobSet and the Job controller, the scheduler, the
kubelet and containerd), to gangrun (the controller, the stop notice, the SDK's save and load, the
launcher) or to the training script (the step in progress when SIGTERM comes, the first step's
compute). The ratio of gangrun's steps to the substrate's, over preemption and readmission, is the
figure of interest; the preemptor's own run between them belongs to neither.

The timestamps come from one run, on one machine and one clock: watches on the Workloads, JobSets and
pods, stamped on arrival (the objects' own timestamps have whole seconds only); the pods' processes
on this host (/proc: a new process is seen within 50 ms, its exit within 50 ms); the workers' log lines
with the container runtime's nanosecond timestamps; and the workers' termination messages (the SDK's
own record of each commit: when its state was taken and when it committed, and of the first step).
Each figure is the median over the rounds (min-max beside it). Without root, the Kubernetes binaries
(hack/build-control-plane.sh) or the node's Debian packages it prints why and exits 0.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks._lib import load_average, realnode_start
from tests.harness import client, controlplane, realnode

SUBSTRATE, GANGRUN, SCRIPT = "substrate", "gangrun", "script"
TASK_LABEL = "gangrun.dev/task"
NOTICE = "gangrun.dev/stop-notice"
INDEX = "batch.kubernetes.io/job-completion-index"
OFFSET = time.time() - time.monotonic()  # the watches stamp with the monotonic clock


class Record:
    """Every event of the namespace's Workloads, JobSets and pods, stamped on arrival (wall clock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, dict]] = []

    def on(self, kind: str):
        def add(t: float, type_: str, obj: dict) -> None:
            with self.lock:
                self.events.append((t + OFFSET, kind, type_, obj))
        return add

    def first(self, kind: str, pred, after: float = 0.0) -> float:
        with self.lock:
            ts = [t for t, k, ty, o in self.events if k == kind and t >= after and pred(ty, o)]
        if not ts:
            raise LookupError(f"no {kind} event matched")
        return min(ts)

    def pods(self, task: str) -> dict[str, dict]:
        """The task's pods by uid, each as last seen."""
        with self.lock:
            return {o["metadata"]["uid"]: o for _t, k, _ty, o in self.events
                    if k == "pod" and (o["metadata"].get("labels") or {}).get(TASK_LABEL) == task}


class Processes:
    """The pods' processes on this host, from /proc: when each launcher was first seen running
    Python, when each script process started (its start time, 10 ms), and when each exited."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.procs: dict[int, dict[str, Any]] = {}  # pid -> uid, argv, seen, start, exit
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="processes").start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            now = time.time()
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) not in self.seen:
                    self._check(int(name), now)
            for pid, p in self.procs.items():
                if p["exit"] is None and not _alive(pid):
                    p["exit"] = now
                elif "python" not in " ".join(p["argv"]):  # still `runc init`: look again
                    p["argv"] = _argv(pid)
                    p["seen"] = now

    def _check(self, pid: int, now: float) -> None:
        self.seen.add(pid)
        try:
            m = re.search(r"pod([0-9a-f]{8}-[0-9a-f-]{27})", Path(f"/proc/{pid}/cgroup").read_text())
        except OSError:
            return
        if m:
            self.procs[pid] = {"uid": m.group(1), "argv": _argv(pid), "seen": now, "start": _start(pid), "exit": None,
                               "parent": realnode.parent_pid(pid)}

    def of(self, uid: str, role: str) -> dict[str, Any]:
        """The pod's launcher or script process. A Python script runs in a fork of the launcher, with the
        launcher's command line: the script is the pod's Python process whose parent is the launcher."""
        mine = {pid: p for pid, p in list(self.procs.items()) if p["uid"] == uid and "python" in " ".join(p["argv"])}
        for p in mine.values():
            launcher = "gangrun.launch" in p["argv"] and p["parent"] not in mine
            if launcher == (role == "launcher"):
                return p
        raise LookupError(f"no {role} process seen for pod {uid}")


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and realnode._state(pid) not in ("Z", "")


def _start(pid: int) -> float:
    """The process's start time on the wall clock (/proc's start time is in clock ticks since boot)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))


def _rfc3339(text: str) -> float:
    """A container runtime's timestamp (nanoseconds) as unix seconds."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float(f"0.{frac or 0}")


def cond(obj: dict, ctype: str, status: str = "True") -> bool:
    return client.has_condition(obj, ctype, status)


def owned_by(obj: dict, jobset: str) -> bool:
    return any(o.get("kind") == "JobSet" and o.get("name") == jobset for o in obj["metadata"].get("ownerReferences") or [])


def terminated(pod: dict) -> dict:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs["name"] == "worker" and "terminated" in (cs.get("state") or {}):
            return cs["state"]["terminated"]
    return {}


# ------------------------------------------------------------------------------- one round


def one_round(rc: Any, rec: Record, procs: Processes, i: int) -> dict[str, list[tuple[str, str, float]]]:
    """Create, preempt and readmit one gang; the steps of each figure: (what, whose, seconds)."""
    from tests.harness.realnode_tasks import STARTING, LogFollower, new_running_pods, submit, train_task, wait_phase

    kube, ns = rc.kube, rc.ns
    gang, urgent = f"gang-{i}", f"urgent-{i}"
    body = train_task(rc, gang, steps=40, step_seconds=0.1)
    body["spec"]["env"]["SAVE_EVERY"] = "1"  # a save is a step the SDK sees
    c0 = time.time()
    submit(rc, body)
    first = kube.wait_running_pods(ns, f"{TASK_LABEL}={gang}", 2, timeout=180)
    rank0 = next(p for p in first if p["metadata"]["annotations"][INDEX] == "0")
    LogFollower(rc, rank0["metadata"]["name"]).wait(r"step 10: loss")
    p0 = time.time()
    submit(rc, train_task(rc, urgent, nodes=1, priority="high", steps=10, step_seconds=0.1))
    wait_phase(rc, urgent, "Succeeded")
    again = new_running_pods(rc, gang, 1, {p["metadata"]["uid"] for p in first})
    loaded = [LogFollower(rc, p["metadata"]["name"], timestamps=True) for p in again]
    loaded_at = [_rfc3339(f.wait(r"(\S+) " + STARTING).group(1)) for f in loaded]
    wait_phase(rc, gang, "Succeeded")
    time.sleep(2)  # the watches' last events

    jobsets = {o["metadata"]["name"]: (o["metadata"].get("labels") or {}).get(TASK_LABEL)
               for _t, k, _ty, o in list(rec.events) if k == "jobset"}
    js = next(n for n, t in jobsets.items() if t == gang)
    ujs = next(n for n, t in jobsets.items() if t == urgent)
    pods = rec.pods(gang)
    old = [u for u in pods if u in {p["metadata"]["uid"] for p in first}]
    new = [u for u in pods if u in {p["metadata"]["uid"] for p in again}]
    uid0 = rank0["metadata"]["uid"]

    def pod_t(uid: str, pred, after: float = 0.0) -> float:
        return rec.first("pod", lambda ty, o: o["metadata"]["uid"] == uid and pred(ty, o), after)

    def all_pods(uids: list[str], pred) -> float:
        return max(pod_t(u, pred) for u in uids)

    def jobset_t(name: str, pred, after: float = 0.0) -> float:
        return rec.first("jobset", lambda ty, o: o["metadata"]["name"] == name and pred(o), after)

    def workload_t(name: str, pred, after: float = 0.0) -> float:
        return rec.first("workload", lambda ty, o: owned_by(o, name) and pred(o), after)

    def added(_ty: str, _o: dict) -> bool:  # the first event of a pod is its creation
        return True

    def scheduled(_ty: str, o: dict) -> bool:
        return cond(o, "PodScheduled")

    def running(_ty: str, o: dict) -> bool:
        return (o.get("status") or {}).get("phase") == "Running"

    # Create: task -> all workers Running.
    js_added = jobset_t(js, lambda o: True)
    admitted = workload_t(js, lambda o: cond(o, "Admitted"))
    unsuspended = jobset_t(js, lambda o: o["spec"].get("suspend") is False)
    created, sched = all_pods(old, added), all_pods(old, scheduled)
    started = max(procs.of(u, "launcher")["seen"] for u in old)
    run = all_pods(old, running)
    create = [("controller: task -> its JobSet", GANGRUN, js_added - c0),
              ("Kueue: JobSet -> Workload admitted", SUBSTRATE, admitted - js_added),
              ("Kueue: admitted -> JobSet unsuspended", SUBSTRATE, unsuspended - admitted),
              ("JobSet, Job controller: -> pods created", SUBSTRATE, created - unsuspended),
              ("scheduler: -> pods bound", SUBSTRATE, sched - created),
              ("kubelet, containerd: -> containers running (host)", SUBSTRATE, started - sched),
              ("kubelet: -> pods Running in the API", SUBSTRATE, run - started)]

    # Preemption: preemptor created -> final save committed -> pods gone.
    ujs_added = jobset_t(ujs, lambda o: True)
    evicted = workload_t(js, lambda o: cond(o, "Evicted"))
    suspended = jobset_t(js, lambda o: o["spec"].get("suspend") is True, after=evicted - 1)
    noticed = all_pods(old, lambda ty, o: NOTICE in (o["metadata"].get("annotations") or {}))
    deleting = pod_t(uid0, lambda ty, o: bool(o["metadata"].get("deletionTimestamp")))
    newest = json.loads(terminated(pods[uid0]).get("message") or "{}").get("newest") or {}
    if not newest.get("final"):
        raise RuntimeError(f"rank 0 made no final save at the stop: {terminated(pods[uid0])}")
    exited = procs.of(uid0, "launcher")["exit"]
    gone = all_pods(old, lambda ty, o: ty == "DELETED")
    preempt = [("controller: preemptor task -> its JobSet", GANGRUN, ujs_added - p0),
               ("Kueue: -> the gang's Workload Evicted (preempted)", SUBSTRATE, evicted - ujs_added),
               ("Kueue: Evicted -> JobSet suspended", SUBSTRATE, suspended - evicted),
               ("JobSet, Job controller: -> pods deleted", SUBSTRATE, deleting - suspended),
               ("kubelet SIGTERM + the step in progress -> final save starts", SCRIPT, newest["takenAt"] - deleting),
               ("SDK: final save committed", GANGRUN, newest["time"] - newest["takenAt"]),
               ("SDK, launcher: process exits (termination message)", GANGRUN, exited - newest["time"]),
               ("kubelet: exit seen, sandbox removed, pods gone", SUBSTRATE, gone - exited)]
    beside = {"controller: Evicted -> stop notice on every pod (beside the suspend)": noticed - evicted,
              "stop notice on every pod, ahead of the pods' deletion": deleting - noticed,
              "the preemptor's own run (pods gone -> its Workload Finished)": 0.0}

    # Readmission: the preemptor's Workload Finished -> the workers' first step after the load.
    finished = workload_t(ujs, lambda o: cond(o, "Finished"))
    beside["the preemptor's own run (pods gone -> its Workload Finished)"] = finished - gone
    readmitted = workload_t(js, lambda o: cond(o, "Admitted"), after=finished)
    unsuspended2 = jobset_t(js, lambda o: o["spec"].get("suspend") is False, after=readmitted - 1)
    created2, sched2 = all_pods(new, added), all_pods(new, scheduled)
    started2 = max(procs.of(u, "launcher")["seen"] for u in new)
    script2 = max(procs.of(u, "script")["start"] for u in new)
    first_step = max(json.loads(terminated(pods[u]).get("message") or "{}").get("firstStep", float("nan")) for u in new)
    readmit = [("Kueue: preemptor Finished -> gang readmitted", SUBSTRATE, readmitted - finished),
               ("Kueue: -> JobSet unsuspended", SUBSTRATE, unsuspended2 - readmitted),
               ("JobSet, Job controller: -> pods created", SUBSTRATE, created2 - unsuspended2),
               ("scheduler: -> pods bound", SUBSTRATE, sched2 - created2),
               ("kubelet, containerd: -> containers running (host)", SUBSTRATE, started2 - sched2),
               ("launcher: rank 0's name resolves, script started", GANGRUN, script2 - started2),
               ("script start: Python, gangrun imported, checkpoint loaded", GANGRUN, max(loaded_at) - script2),
               ("the example: first step after the load", SCRIPT, first_step - max(loaded_at))]
    return {"create": create, "preemption": preempt, "readmission": readmit,
            "beside": [(k, "", v) for k, v in beside.items()]}


# ------------------------------------------------------------------------------- report


def report(rounds: list[dict[str, list[tuple[str, str, float]]]]) -> dict[str, Any]:
    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):6.2f} s  ({min(xs):.2f}-{max(xs):.2f})"

    out: dict[str, Any] = {"rounds": len(rounds)}
    titles = {"create": "gang created -> all workers Running",
              "preemption": "preemptor created -> final save committed -> the gang's pods gone",
              "readmission": "preemptor's Workload Finished -> the workers' first step after the load",
              "beside": "beside the critical path"}
    for fig, title in titles.items():
        steps = [name for name, _w, _s in rounds[0][fig]]
        whose = {name: w for name, w, _s in rounds[0][fig]}
        print(f"\n{title}" + ("" if fig == "beside" else f": {med([sum(s for _n, _w, s in r[fig]) for r in rounds])}"))
        for i, name in enumerate(steps):
            xs = [r[fig][i][2] for r in rounds]
            print(f"  {whose[name]:9s}  {name:62s} {med(xs)}")
            out[f"{fig}: {name}"] = round(statistics.median(xs), 3)
        if fig == "beside":
            continue
        for w in (SUBSTRATE, GANGRUN, SCRIPT):
            xs = [sum(s for _n, ww, s in r[fig] if ww == w) for r in rounds]
            out[f"{fig} {w}"] = round(statistics.median(xs), 3)
    print("\npreemption + readmission (the preemptor's own run left out):")
    shares = {w: [sum(s for f in ("preemption", "readmission") for _n, ww, s in r[f] if ww == w) for r in rounds]
              for w in (SUBSTRATE, GANGRUN, SCRIPT)}
    for w, xs in shares.items():
        print(f"  {w:9s}  {med(xs)}")
    ratio = [g / s for g, s in zip(shares[GANGRUN], shares[SUBSTRATE], strict=True)]
    print(f"  gangrun / substrate: {statistics.median(ratio):.1%} (min {min(ratio):.1%}, max {max(ratio):.1%}; "
          "target: at most 10%)")
    out["gangrun / substrate"] = round(statistics.median(ratio), 4)
    return out


def main() -> int:
    started = realnode_start(__doc__)
    if started is None:
        return 0
    args, (binaries, images) = started
    from tests.harness.realnode_tasks import real_cluster

    t0 = time.monotonic()
    with controlplane.running("C", binaries) as cp, real_cluster(cp, images) as rc:
        print(f"control plane, real node and controller up in {time.monotonic() - t0:.1f} s")
        rec, procs = Record(), Processes()
        watches = [client.Watch(cp, rc.ns, "workloads", rec.on("workload"), group="kueue.x-k8s.io",
                                      version="v1beta2", timeout_seconds=60),
                   client.Watch(cp, rc.ns, "jobsets", rec.on("jobset"), group="jobset.x-k8s.io",
                                      version="v1alpha2", timeout_seconds=60),
                   client.Watch(cp, rc.ns, "pod", rec.on("pod"), label_selector=TASK_LABEL, timeout_seconds=60)]
        try:
            rounds = [one_round(rc, rec, procs, i) for i in range(1, args.rounds + 1)]
        finally:
            for w in watches:
                w.stop()
            procs.stop()
    figures = report(rounds)
    print(f"load average after the run: {load_average()}")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
