"""Controller latency and cost on a real control plane: 50 ClusteredTasks preempted and readmitted at once.

    python benchmarks/bench_controller.py [--tasks 50]

Starts tier C of tests/e2e/controlplane.py (etcd, kube-apiserver, KCM, scheduler, kwok, JobSet, Kueue) on
loopback, installs deploy/crd.yaml and runs `gangrun controller` as a subprocess. N two-node tasks of
100m CPU each (N x 0.2 CPU of the 16-CPU ClusterQueue) run; one `high` Job of 4 x 4 CPU then makes
Kueue preempt all of them; when it completes, Kueue readmits them one by one.

The benchmark watches Workloads, JobSets and ClusteredTasks itself and timestamps every event on
arrival (one clock, one process), so each figure is "event A seen -> event B seen":

* eviction:    Workload Evicted=True seen            -> task status names the eviction
               (the controller records an eviction from the Workload alone; Kueue suspends the JobSet after)
* readmission: Workload readmitted (Evicted=False) seen -> task status "running (...)" again
               (and from the JobSet's unsuspend, which Kueue's JobSet integration writes after admission)

Baselines from the same run: a GET round-trip, and a write -> watch event on a ConfigMap (one hop
through the API server, where the controller's path is two hops plus a reconcile). The controller's
CPU seconds (utime + stime) and max RSS (VmHWM) come from /proc. Skips (exit 0) with a message when
the control plane is not built (hack/build-control-plane.sh).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import yaml  # noqa: E402

import controlplane  # noqa: E402
from controlplane import LOCAL_QUEUE, NODE_CPU, ControlPlane, has_condition  # noqa: E402

GROUP, VERSION, PLURAL = "gangrun.dev", "v1alpha1", "clusteredtasks"
TASK_LABEL = "gangrun.dev/task"


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


class Watch:
    """A watch on one resource in one namespace; calls on_event(t_arrival, type, obj) on its own thread."""

    def __init__(self, cp: ControlPlane, ns: str, group: str, version: str, plural: str, on_event,
                 label_selector: str = "") -> None:
        self.args = (cp, ns, group, version, plural, label_selector)
        self.on_event = on_event
        self.ready = threading.Event()
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        assert self.ready.wait(30), f"watch on {plural} did not start"

    def _run(self) -> None:
        from kubernetes import client, watch

        cp, ns, group, version, plural, sel = self.args
        api_client = cp.api_client()
        if group:
            custom = client.CustomObjectsApi(api_client)

            def lister(**kw):
                return custom.list_namespaced_custom_object(group, version, ns, plural, **kw)
        else:
            core = client.CoreV1Api(api_client)

            def lister(**kw):
                return getattr(core, f"list_namespaced_{plural}")(ns, **kw)
        rv = ""
        while not self.stop.is_set():
            try:
                if not rv:
                    lst = lister(label_selector=sel)
                    rv = lst["metadata"]["resourceVersion"] if group else lst.metadata.resource_version
                    self.ready.set()
                w = watch.Watch()
                kw = {"label_selector": sel, "resource_version": rv, "timeout_seconds": 60}
                for ev in w.stream(lister, **kw):
                    t = time.perf_counter()
                    obj = ev["raw_object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    self.on_event(t, ev["type"], obj)
            except Exception:  # noqa: BLE001 - expired or dropped: list again
                rv = ""
                time.sleep(0.1)


def cond(obj: dict, ctype: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


class Timeline:
    """First-seen times per task, from the three watches."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.t: dict[str, dict[str, float]] = {}

    def mark(self, task: str, what: str, t: float, after: str | None = None) -> None:
        with self.lock:
            d = self.t.setdefault(task, {})
            if what in d or (after is not None and after not in d):
                return
            d[what] = t

    def workload(self, t: float, _type: str, obj: dict) -> None:
        owners = obj["metadata"].get("ownerReferences") or []
        if not owners or owners[0].get("kind") != "JobSet":
            return
        task = owners[0]["name"].rsplit("-", 1)[0]
        if cond(obj, "Evicted").get("status") == "True":
            self.mark(task, "wl_evicted", t)
        elif cond(obj, "QuotaReserved").get("status") == "True":
            self.mark(task, "wl_readmitted", t, after="wl_evicted")

    def jobset(self, t: float, _type: str, obj: dict) -> None:
        task = (obj["metadata"].get("labels") or {}).get(TASK_LABEL)
        if not task:
            return
        if obj["spec"].get("suspend") is False:
            self.mark(task, "js_running", t)
            self.mark(task, "js_resumed", t, after="js_suspended")
        elif obj["spec"].get("suspend") is True:
            self.mark(task, "js_suspended", t, after="js_running")

    def task(self, t: float, _type: str, obj: dict) -> None:
        s = obj.get("status") or {}
        reason = str(s.get("reason") or "")
        if s.get("eviction"):
            self.mark(obj["metadata"]["name"], "st_evicted", t)
        elif reason.startswith("running ("):
            self.mark(obj["metadata"]["name"], "st_running", t)
            self.mark(obj["metadata"]["name"], "st_readmitted", t, after="st_evicted")

    def deltas(self, a: str | tuple[str, ...], b: str) -> list[float]:
        out = []
        for d in self.t.values():
            starts = [d.get(x) for x in ((a,) if isinstance(a, str) else a)]
            if b in d and all(s is not None for s in starts):
                out.append(d[b] - max(starts))
        return out


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
                     "resources": {"cpu": "100m", "memory": "64Mi"}, "retries": 0,
                     "failurePolicy": {"resumeAfterPreemption": True}, "priorityClass": "low",
                     "queue": LOCAL_QUEUE, "terminationGracePeriod": "1s"}}


def preemptor(ns: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "urgent", "namespace": ns, "labels": {
                "kueue.x-k8s.io/queue-name": LOCAL_QUEUE, "kueue.x-k8s.io/priority-class": "high"}},
            "spec": {"suspend": True, "parallelism": 4, "completions": 4, "completionMode": "Indexed",
                     "backoffLimit": 0, "template": {"spec": {
                         "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": "example.invalid/job:1",
                                         "resources": {"requests": {"cpu": str(NODE_CPU)}}}]}}}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    try:
        binaries = controlplane.locate_binaries()
    except controlplane.NotBuiltError as e:
        print(f"skipped: {e}")
        return 0

    n = args.tasks
    t0 = time.perf_counter()
    with controlplane.running("C", binaries) as cp:
        kube = cp.kube
        print(f"control plane tier C up in {time.perf_counter() - t0:.1f} s")
        crd = yaml.safe_load((REPO / "deploy" / "crd.yaml").read_text())
        kube.apply(crd)
        kube.wait_for("CRD established", lambda: has_condition(
            kube.get("CustomResourceDefinition", crd["metadata"]["name"]), "Established"), timeout=60)
        ns = cp.make_namespace("bench")
        tasks_path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}"
        kube.wait_for("CRD served", lambda: kube.request("GET", tasks_path) is not None, timeout=60)

        tl = Timeline()
        Watch(cp, ns, "kueue.x-k8s.io", "v1beta2", "workloads", tl.workload)
        Watch(cp, ns, "jobset.x-k8s.io", "v1alpha2", "jobsets", tl.jobset, label_selector=TASK_LABEL)
        Watch(cp, ns, GROUP, VERSION, PLURAL, tl.task)

        ctl = cp.spawn("gangrun-controller", [
            sys.executable, "-m", "gangrun", "controller", "--kubeconfig", str(cp.kubeconfig), "--namespace", ns,
            "--no-leader-election", "--metrics-port", "0", "--health-port", "0"],
            env={"PYTHONPATH": str(REPO / "src")})
        pid = ctl.proc.pid

        def count(key: str) -> int:
            with tl.lock:
                return sum(1 for d in tl.t.values() if key in d)

        def wait_count(key: str, what: str) -> float:
            start = time.perf_counter()
            kube.wait_for(what, lambda: ctl.alive() and count(key) >= n, timeout=args.timeout, interval=0.1)
            if not ctl.alive():
                raise SystemExit(f"controller died:\n{ctl.tail(60)}")
            return time.perf_counter() - start

        names = [f"bt-{i:03d}" for i in range(n)]
        for name in names:
            kube.request("POST", tasks_path, body=task_body(ns, name))
        took = wait_count("st_running", f"{n} tasks Running")
        print(f"{n} tasks submitted and Running in {took:.1f} s")

        # -- baselines ------------------------------------------------------------------------
        gets = []
        for i in range(100):
            s = time.perf_counter()
            kube.request("GET", f"{tasks_path}/{names[i % n]}")
            gets.append(time.perf_counter() - s)
        kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": ns},
                     "data": {"i": "-1"}})
        seen: dict[str, float] = {}
        Watch(cp, ns, "", "v1", "config_map",
              lambda t, _ty, o: seen.setdefault((o.get("data") or {}).get("i", ""), t))
        hops = []
        for i in range(50):
            s = time.perf_counter()
            kube.patch("ConfigMap", "probe", ns, {"data": {"i": str(i)}})
            kube.wait_for("configmap event", lambda i=i: str(i) in seen, timeout=30, interval=0.001)
            hops.append(seen[str(i)] - s)

        # -- preempt all, then readmit all ----------------------------------------------------------
        cpu0, _ = proc_cpu_rss(pid)
        wall0 = time.perf_counter()
        kube.create(preemptor(ns))
        took = wait_count("st_evicted", f"{n} tasks see their eviction")
        print(f"{n} tasks preempted and waiting for re-admission in {took:.1f} s")
        pods = kube.wait_for("4 preemptor pods running", lambda: (lambda ps: ps if len(ps) == 4 else None)([
            p for p in kube.list("Pod", ns, label_selector="batch.kubernetes.io/job-name=urgent")
            if p["status"].get("phase") == "Running"]), timeout=args.timeout, interval=0.2)
        for p in pods:
            kube.patch("Pod", p["metadata"]["name"], ns,
                       {"metadata": {"annotations": {controlplane.ANNOTATION_COMPLETE_AFTER: "0s"}}})
        took = wait_count("st_readmitted", f"{n} tasks readmitted and running")
        print(f"{n} tasks readmitted and running again in {took:.1f} s")
        cpu1, rss = proc_cpu_rss(pid)
        wall1 = time.perf_counter()
        cp.terminate(ctl)

        ev_wl = tl.deltas("wl_evicted", "st_evicted")
        wl_js_susp = tl.deltas("wl_evicted", "js_suspended")
        re_wl = tl.deltas("wl_readmitted", "st_readmitted")
        re_js = tl.deltas("js_resumed", "st_readmitted")
        wl_js = tl.deltas("wl_readmitted", "js_resumed")
        print()
        print(f"controller, {n} ClusteredTasks (2 workers each), all preempted then readmitted; "
              f"{os.cpu_count()} cores shared with the control plane")
        print(f"  Workload Evicted seen             -> task status evicted:   {fmt(ev_wl)}")
        print(f"  (substrate) Workload Evicted      -> JobSet suspended:      {fmt(wl_js_susp)}")
        print(f"  Workload readmitted seen          -> task status running:   {fmt(re_wl)}")
        print(f"  JobSet unsuspended seen           -> task status running:   {fmt(re_js)}")
        print(f"  (substrate) Workload readmitted   -> JobSet unsuspended:    {fmt(wl_js)}")
        print(f"  controller CPU in the preempt+readmit round: {cpu1 - cpu0:.2f} s over {wall1 - wall0:.1f} s wall;"
              f" total {cpu1:.2f} s; max RSS {rss / 2**20:.1f} MiB")
        print("baseline, same run:")
        print(f"  GET of a ClusteredTask (round-trip):                         {fmt(gets)}")
        print(f"  ConfigMap PATCH sent -> its watch event seen (one hop):       {fmt(hops)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
