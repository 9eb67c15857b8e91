"""Controller latency and cost on a real control plane: N ClusteredTasks preempted and readmitted at once.

    python -m benchmarks.bench_controller [--tasks 50] [--nodes M] [--json]

Starts tier C of tests/harness/controlplane.py (etcd, kube-apiserver, KCM, scheduler, kwok, JobSet, Kueue) on
loopback, installs deploy/crd.yaml, grows the cluster to M kwok nodes of 4 CPU (default: enough for N
tasks, at least 4) with the ClusterQueue's quota equal to all of them, and runs the controller as a
subprocess (tests/harness/controller_probe.py: `gangrun controller`'s loop with timers; `--plain` runs
`python -m gangrun controller` itself, without the breakdown). N two-node tasks of 100m CPU each run;
one `high` Job with one 4-CPU pod per node then makes Kueue preempt all of them; when it completes,
Kueue readmits them.

The benchmark watches Workloads, JobSets and ClusteredTasks itself and timestamps every event on
arrival (one clock, one process), so each figure is "event A seen -> event B seen":

* eviction:    Workload Evicted=True seen            -> task status names the eviction
               (the controller records an eviction from the Workload alone; Kueue suspends the JobSet after)
* readmission: Workload readmitted (Evicted=False) seen -> task status "running (...)" again
               (and from the JobSet's unsuspend, which Kueue's JobSet integration writes after admission:
               the controller's part of the readmission, `unsuspend_to_status_*` in the JSON)
* status writes per task in the preempt-and-readmit round (from the preemptor's creation until the
  tasks' statuses have been quiet for 5 s after the last one is running again): the probe's count of
  status PATCHes, or with `--plain` the task watch's MODIFIED events

Where the eviction time goes, per task, from the probe's records (the monotonic clock is shared by all
processes on the machine): Workload seen by the benchmark -> task key queued in the controller (the
controller's own watch hop), queued -> taken by a worker (queue wait), taken -> status PATCH sent
(cache reads and the pure reconcile), the PATCH round-trip (API write), and PATCH answered -> the
status's watch event seen (the way back through the API server).

Baselines from the same run: a GET round-trip, a write -> watch event on a ConfigMap (one hop
through the API server, where the controller's path is two hops plus a reconcile), both on a quiet
API server, and a ConfigMap PATCH round-trip every 50 ms while Kueue evicts and again while it
readmits (what any write costs during each storm, to set beside the controller's status PATCH and
the unsuspend -> status figure). The controller's
CPU seconds (utime + stime) and max RSS (VmHWM) come from /proc; the load average before the run is
printed, since the machine may be shared. `--json` ends the output with one JSON line of the figures.
Skips (exit 0) with a message when the control plane is not built (hack/build-control-plane.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from benchmarks._lib import REPO, control_plane_binaries, load_average

# Kueue's waitForPodsReady timeout (45 s in the harness) would evict gangs whose kwok pods a loaded
# machine makes Ready late; such system retries are not what this benchmark measures.
os.environ.setdefault("GANGRUN_E2E_PODS_READY_TIMEOUT", "30m")

# After the environment setup above: the harness reads it when imported.
from tests.harness import addons
from tests.harness.addons import LOCAL_QUEUE, NODE_CPU, NODE_MEMORY_GI
from tests.harness.client import Watch, has_condition
from tests.harness.controller_timeline import (
    PODS_PER_NODE,
    STAGES,
    TASK_CPU_MILLI,
    Timeline,
    breakdown,
    eviction_write,
    nodes_needed,
    readmission_write,
    writes_between,
)
from tests.harness.controlplane import ControlPlane, running
from tests.harness.kwok import ANNOTATION_COMPLETE_AFTER
from tests.harness.tasks import GROUP, PLURAL, TASK_LABEL, VERSION


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def fmt(xs: list[float]) -> str:
    if not xs:
        return "no samples"
    return (f"p50 {pct(xs, 50) * 1000:7.1f} ms   p99 {pct(xs, 99) * 1000:7.1f} ms   "
            f"max {max(xs) * 1000:7.1f} ms   (n={len(xs)})")


def proc_cpu_rss(pid: int) -> tuple[float, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            rss = int(line.split()[1]) * 1024
    return cpu, rss


def task_body(ns: str, name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusteredTask",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"nodes": 2, "command": ["python", "train.py"], "image": "example.invalid/trainer:1",
                     "resources": {"cpu": f"{TASK_CPU_MILLI}m", "memory": "64Mi"}, "retries": 0,
                     "failurePolicy": {"resumeAfterPreemption": True}, "priorityClass": "low",
                     "queue": LOCAL_QUEUE, "terminationGracePeriod": "1s"}}


def preemptor(ns: str, nodes: int) -> dict:
    """A `high` Job asking for the whole ClusterQueue (one full node per pod): every task must go."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "urgent", "namespace": ns, "labels": {
                "kueue.x-k8s.io/queue-name": LOCAL_QUEUE, "kueue.x-k8s.io/priority-class": "high"}},
            "spec": {"suspend": True, "parallelism": nodes, "completions": nodes, "completionMode": "Indexed",
                     "backoffLimit": 0, "template": {"spec": {
                         "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": "example.invalid/job:1",
                                         "resources": {"requests": {"cpu": str(NODE_CPU)}}}]}}}}


def grow_cluster(cp: ControlPlane, nodes: int) -> None:
    """Add kwok nodes up to `nodes` (the harness made 4) and make the ClusterQueue's quota all of them."""
    kube = cp.kube
    res = {"cpu": str(NODE_CPU), "memory": f"{NODE_MEMORY_GI}Gi", "pods": str(PODS_PER_NODE)}
    for i in range(addons.NODE_COUNT, nodes):
        kube.apply({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": f"kwok-node-{i}", "labels": {
                        "kubernetes.io/hostname": f"kwok-node-{i}", "type": "kwok"},
                        "annotations": {"kwok.x-k8s.io/node": "fake"}},
                    "status": {"capacity": res, "allocatable": res}})
    kube.wait_for(f"{nodes} nodes Ready", lambda: sum(
        1 for n in kube.list("Node") if has_condition(n, "Ready")) >= nodes, timeout=300, interval=0.5)
    cq = kube.get("ClusterQueue", addons.CLUSTER_QUEUE)
    for group in cq["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for r in flavor["resources"]:
                r["nominalQuota"] = str(NODE_CPU * nodes) if r["name"] == "cpu" else f"{NODE_MEMORY_GI * nodes}Gi"
    kube.apply({"apiVersion": cq["apiVersion"], "kind": "ClusterQueue",
                "metadata": {"name": addons.CLUSTER_QUEUE}, "spec": cq["spec"]})


def install_tasks(cp: ControlPlane) -> tuple[str, str]:
    """Install deploy/crd.yaml and make a namespace for the tasks: its name and its tasks' API path."""
    kube = cp.kube
    crd = yaml.safe_load((REPO / "deploy" / "crd.yaml").read_text())
    kube.apply(crd)
    kube.wait_for("CRD established", lambda: has_condition(
        kube.get("CustomResourceDefinition", crd["metadata"]["name"]), "Established"), timeout=60)
    ns = cp.make_namespace("bench")
    tasks_path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}"
    kube.wait_for("CRD served", lambda: kube.request("GET", tasks_path) is not None, timeout=60)
    return ns, tasks_path


def ms(xs: list[float], p: float) -> float | None:
    return None if not xs else round(pct(xs, p) * 1000, 1)


def storm_writes(kube: Any, ns: str, until: threading.Event) -> list[float]:
    """A ConfigMap PATCH round-trip every 50 ms on a thread until `until` is set: what any write costs
    meanwhile. The list fills as it goes."""
    out: list[float] = []

    def run() -> None:
        while not until.wait(0.05):
            s = time.monotonic()
            kube.patch("ConfigMap", "probe", ns, {"data": {"i": "storm"}})
            out.append(time.monotonic() - s)

    threading.Thread(target=run, daemon=True).start()
    return out


def quiet(tl: Timeline, seconds: float, timeout: float) -> float:
    """Wait until no task event came for `seconds` (at most `timeout`); the time of the last one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with tl.lock:
            last = tl.task_events[-1] if tl.task_events else 0.0
        if time.monotonic() - last >= seconds:
            break
        time.sleep(0.2)
    with tl.lock:
        return tl.task_events[-1] if tl.task_events else time.monotonic()


def print_breakdown(title: str, stages: dict[str, list[float]]) -> None:
    print(f"  {title} (per task; the stages add up to it):")
    for k, label in STAGES.items():
        xs = stages[k]
        mean = f"mean {sum(xs) / len(xs) * 1000:7.1f} ms   " if xs else ""
        print(f"    {label:<48} {mean}{fmt(xs)}")


def write_kinds(probe: dict[str, Any], start: float, end: float, top: int = 8) -> list[tuple[str, int]]:
    """The round's status writes grouped by what they changed (the reason's words, digits dropped, and
    the fields): which stages cost a write."""
    kinds: Counter[str] = Counter()
    for w in probe["writes"]:
        if start <= w["t0"] <= end:
            reason = re.sub(r"[0-9.]+", "#", w["reason"].split(";")[-1].split(":")[0].strip())[:48]
            kinds[f"{reason} | {','.join(w.get('changed', []))}"] += 1
    return kinds.most_common(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=0, help="kwok nodes of 4 CPU (default: enough for the tasks)")
    ap.add_argument("--timeout", type=float, default=0.0, help="per phase, seconds (default: 600 + 2 per task)")
    ap.add_argument("--plain", action="store_true", help="run `gangrun controller` itself: no breakdown")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    ap.add_argument("--keep-probe", type=Path, help="copy the probe's records of every sync and write here")
    args = ap.parse_args()
    binaries = control_plane_binaries()
    if binaries is None:
        return 0

    n = args.tasks
    nodes = args.nodes or nodes_needed(n)
    if nodes < nodes_needed(n):
        raise SystemExit(f"--nodes {nodes} cannot hold {n} tasks; it takes at least {nodes_needed(n)}")
    timeout = args.timeout or 600.0 + 2 * n
    load_before = load_average()
    print(f"load average before the run: {load_before} ({os.cpu_count()} cores)")
    t0 = time.monotonic()
    with running("C", binaries) as cp, tempfile.TemporaryDirectory(prefix="bench-ctl-") as tmp:
        kube = cp.kube
        print(f"control plane tier C up in {time.monotonic() - t0:.1f} s")
        grow_cluster(cp, nodes)
        print(f"{nodes} kwok nodes Ready, ClusterQueue quota {NODE_CPU * nodes} CPU")
        ns, tasks_path = install_tasks(cp)

        tl = Timeline()
        watches = [
            Watch(cp, ns, "workloads", tl.workload, group="kueue.x-k8s.io", version="v1beta2", timeout_seconds=60),
            Watch(cp, ns, "jobsets", tl.jobset, group="jobset.x-k8s.io", version="v1alpha2",
                  label_selector=TASK_LABEL, timeout_seconds=60),
            Watch(cp, ns, PLURAL, tl.task, group=GROUP, version=VERSION, timeout_seconds=60)]

        probe_out = Path(tmp) / "probe.json"
        common = ["--kubeconfig", str(cp.kubeconfig), "--namespace", ns]
        argv = ([sys.executable, "-m", "gangrun", "controller", *common, "--no-leader-election",
                 "--metrics-port", "0", "--health-port", "0"] if args.plain else
                [sys.executable, "-m", "tests.harness.controller_probe", str(probe_out), *common])
        ctl = cp.spawn("gangrun-controller", argv, env={"PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])})
        pid = ctl.proc.pid

        def count(key: str) -> int:
            with tl.lock:
                return sum(1 for d in tl.t.values() if key in d)

        def wait_count(key: str, what: str) -> float:
            start = time.monotonic()
            kube.wait_for(what, lambda: not ctl.alive() or count(key) >= n, timeout=timeout, interval=0.1)
            if not ctl.alive():
                raise SystemExit(f"controller died:\n{ctl.tail(60)}")
            return time.monotonic() - start

        names = [f"bt-{i:04d}" for i in range(n)]
        for name in names:
            kube.request("POST", tasks_path, body=task_body(ns, name))
        took = wait_count("st_running", f"{n} tasks Running")
        print(f"{n} tasks submitted and Running in {took:.1f} s")

        # -- baselines ------------------------------------------------------------------------
        gets = []
        for i in range(100):
            s = time.monotonic()
            kube.request("GET", f"{tasks_path}/{names[i % n]}")
            gets.append(time.monotonic() - s)
        kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": ns},
                     "data": {"i": "-1"}})
        seen: dict[str, float] = {}
        watches.append(Watch(cp, ns, "config_map",
                             lambda t, _ty, o: seen.setdefault((o.get("data") or {}).get("i", ""), t),
                             timeout_seconds=60))
        hops = []
        for i in range(50):
            s = time.monotonic()
            kube.patch("ConfigMap", "probe", ns, {"data": {"i": str(i)}})
            kube.wait_for("configmap event", lambda i=i: str(i) in seen, timeout=30, interval=0.001)
            hops.append(seen[str(i)] - s)

        # -- preempt all, then readmit all ----------------------------------------------------------
        cpu0, _ = proc_cpu_rss(pid)
        wall0 = time.monotonic()
        load_evict = load_average()
        storm_done = threading.Event()
        evict_writes = storm_writes(kube, ns, storm_done)  # the API server's write latency while Kueue evicts
        kube.create(preemptor(ns, nodes))
        took = wait_count("st_evicted", f"{n} tasks see their eviction")
        storm_done.set()
        print(f"{n} tasks preempted and waiting for re-admission in {took:.1f} s")
        pods = kube.wait_running_pods(ns, "batch.kubernetes.io/job-name=urgent", nodes, timeout=timeout)
        load_readmit = load_average()
        readmit_done = threading.Event()
        readmit_writes = storm_writes(kube, ns, readmit_done)  # ... and while it readmits
        for p in pods:
            kube.patch("Pod", p["metadata"]["name"], ns,
                       {"metadata": {"annotations": {ANNOTATION_COMPLETE_AFTER: "0s"}}})
        took = wait_count("st_readmitted", f"{n} tasks readmitted and running")
        readmit_done.set()
        print(f"{n} tasks readmitted and running again in {took:.1f} s")
        cpu1, rss = proc_cpu_rss(pid)
        wall1 = time.monotonic()
        round_end = quiet(tl, 5.0, 120.0)  # any write still to come after "running" counts too
        cp.terminate(ctl, grace=60)
        for w in watches:  # before the API server goes: a watch thread still reading at exit can abort it
            w.stop()
        probe = json.loads(probe_out.read_text()) if not args.plain else None
        if probe is not None and args.keep_probe:
            shutil.copyfile(probe_out, args.keep_probe)

        round_writes = writes_between(tl, probe, wall0, round_end)
        ev_wl = tl.deltas("wl_evicted", "st_evicted")
        wl_js_susp = tl.deltas("wl_evicted", "js_suspended")
        re_wl = tl.deltas("wl_readmitted", "st_readmitted")
        re_js = tl.deltas("js_resumed", "st_readmitted")
        wl_js = tl.deltas("wl_readmitted", "js_resumed")
        evicted_at = sorted(d["wl_evicted"] for d in tl.t.values() if "wl_evicted" in d)
        print()
        print(f"controller, {n} ClusteredTasks (2 workers each) on {nodes} nodes, all preempted then readmitted; "
              f"{os.cpu_count()} cores shared with the control plane; load average {load_before} before the "
              f"run, {load_evict} before the eviction")
        if evicted_at:
            print(f"  Kueue evicted the {len(evicted_at)} Workloads over {evicted_at[-1] - evicted_at[0]:.2f} s")
        print(f"  Workload Evicted seen             -> task status evicted:   {fmt(ev_wl)}")
        print(f"  (substrate) Workload Evicted      -> JobSet suspended:      {fmt(wl_js_susp)}")
        print(f"  Workload readmitted seen          -> task status running:   {fmt(re_wl)}")
        print(f"  JobSet unsuspended seen           -> task status running:   {fmt(re_js)}")
        if re_js and readmit_writes:
            print(f"    p99 against one ConfigMap PATCH's p99 in the same seconds: "
                  f"{pct(re_js, 99) / pct(readmit_writes, 99):.2f}x (target <= 1.2x)")
        print(f"  status writes in the round: {round_writes} for {n} tasks ({round_writes / n:.2f} a task, target <= 3)")
        print(f"  (substrate) Workload readmitted   -> JobSet unsuspended:    {fmt(wl_js)}")
        stages: dict[str, list[float]] = {}
        readmit_stages: dict[str, list[float]] = {}
        if probe is not None:
            stages = breakdown(tl, probe, "wl_evicted", "st_evicted", eviction_write)
            print_breakdown("where the eviction time goes: Workload Evicted seen -> status evicted", stages)
            readmit_stages = breakdown(tl, probe, "js_resumed", "st_readmitted", readmission_write)
            print_breakdown("where the readmission time goes: JobSet unsuspended seen -> status running",
                            readmit_stages)
            round_syncs = [x for x in probe["syncs"] if wall0 <= x["taken"] <= round_end]
            failed = Counter(x.get("error") for x in round_syncs if x.get("error"))
            print(f"  syncs in the round: {len(round_syncs)}, failed {sum(failed.values())} "
                  f"({', '.join(f'{k} {v}' for k, v in failed.most_common()) or 'none'}); a sync, taken -> done: "
                  f"{fmt([x['done'] - x['taken'] for x in round_syncs])}")
            slowest = max(round_syncs, key=lambda x: x["done"] - x["taken"], default=None)
            if slowest is not None:
                api = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in sorted(
                    (slowest.get("api") or {}).items(), key=lambda kv: -kv[1])) or "no API call"
                print(f"  the slowest sync: {slowest['done'] - slowest['taken']:.2f} s, of which {api}")
            print("  the round's status writes by what they changed (reason | fields):")
            for kind, k in write_kinds(probe, wall0, round_end):
                print(f"    {k:6d}  {kind}")
            print(f"  over the controller's life (submission included): syncs {len(probe['syncs'])}, "
                  f"status writes {len(probe['writes'])}")
        print(f"  controller CPU in the preempt+readmit round: {cpu1 - cpu0:.2f} s over {wall1 - wall0:.1f} s wall;"
              f" total {cpu1:.2f} s; max RSS {rss / 2**20:.1f} MiB")
        print("baseline, same run:")
        print(f"  GET of a ClusteredTask (round-trip):                         {fmt(gets)}")
        print(f"  ConfigMap PATCH sent -> its watch event seen (one hop):       {fmt(hops)}")
        print(f"  ConfigMap PATCH round-trip while Kueue evicts (API write):    {fmt(evict_writes)}")
        print(f"  ConfigMap PATCH round-trip while Kueue readmits (API write):  {fmt(readmit_writes)}")
        if args.json:
            figures: dict[str, Any] = {
                "tasks": n, "nodes": nodes, "cores": os.cpu_count(), "loadavg_before": load_before,
                "loadavg_before_eviction": load_evict, "loadavg_before_readmission": load_readmit,
                "eviction_p50_ms": ms(ev_wl, 50), "eviction_p99_ms": ms(ev_wl, 99),
                "readmission_p50_ms": ms(re_wl, 50), "readmission_p99_ms": ms(re_wl, 99),
                "watch_hop_p50_ms": ms(hops, 50), "watch_hop_p99_ms": ms(hops, 99),
                "get_p50_ms": ms(gets, 50), "get_p99_ms": ms(gets, 99),
                "unsuspend_to_status_p50_ms": ms(re_js, 50), "unsuspend_to_status_p99_ms": ms(re_js, 99),
                "status_writes_per_task": round(round_writes / n, 2),
                "storm_write_p50_ms": ms(evict_writes, 50), "storm_write_p99_ms": ms(evict_writes, 99),
                "readmit_storm_write_p50_ms": ms(readmit_writes, 50),
                "readmit_storm_write_p99_ms": ms(readmit_writes, 99),
                "kueue_eviction_spread_s": round(evicted_at[-1] - evicted_at[0], 3) if evicted_at else None,
                "controller_cpu_s": round(cpu1, 2), "controller_cpu_round_s": round(cpu1 - cpu0, 2),
                "controller_rss_mib": round(rss / 2**20, 1)}
            for k, xs in stages.items():
                figures[f"{k}_p50_ms"], figures[f"{k}_p99_ms"] = ms(xs, 50), ms(xs, 99)
            for k, xs in readmit_stages.items():
                figures[f"readmit_{k}_p50_ms"], figures[f"readmit_{k}_p99_ms"] = ms(xs, 50), ms(xs, 99)
            print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
