"""A gang of hundreds of pods restarted after one worker fails: in place next to recreated, on kwok, same run.

    python -m benchmarks.bench_kwok_restart [--pods 256,1000] [--json]

Starts tier C of tests/harness/controlplane.py (etcd, kube-apiserver, KCM, scheduler, kwok, JobSet, Kueue)
on loopback with kwok's pod IPs in 127.64.0.0/16, grows the cluster to enough kwok nodes and runs the
controller (`python -m gangrun controller`). For each gang size, one ClusteredTask of that many
workers (100m CPU each, `maxRestarts: 3`) runs once per strategy, and one of its workers fails:

* Recreate: the pod fails with exit 137 (a kwok stage, as a kubelet reports an OOM kill); the Job fails,
  JobSet deletes the Job and its pods and creates them again, the scheduler binds every pod, kwok
  starts them. Done when every pod of the gang is a new one, Running and Ready, and the task says
  running again with `restartAttempt` 1.
* InPlace: kwok pods run no process, so this benchmark answers for their launchers: kwok's pod IPs
  are loopback addresses, and one HTTP server on the report port answers at each of them as that pod's
  launcher would (`gangrun._worker.in_place`): GET /round, POST /restart. The failed worker's launcher
  says its round failed with 137, and the benchmark writes what the kubelet's readiness probe would:
  the pod's Ready=False, then Ready=True once its launcher has the order. Done when every launcher has
  the order for round 1, every pod is Ready, and the task says running again with `restartAttempt` 1.

Figures per run: wall time from the failure to done, the API writes meanwhile (the API server's own
`apiserver_request_total`, every client's POST/PUT/PATCH/APPLY/DELETE, by resource; node heartbeats
and leases, which tick with time whatever happens, are shown apart), and the HTTP calls the
controller made to launchers. What it leaves out: a real restart's worker processes (the stop notice,
the final save, the new interpreter: seconds, in parallel in every pod, bench_realnode_restart
measures them), the readiness probe's period (up to a second before the kubelet would see the
failure, and again after the order; written here at once) and, for Recreate, what a real node adds
per pod (the sandbox, the image, the container start). The targets (issue): at 1,000 pods, API writes for an in-place restart independent
of the gang's size, wall time at most a tenth of Recreate's.

Skips (exit 0) with a message when the control plane is not built (hack/build-control-plane.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Kueue's waitForPodsReady timeout (45 s in the harness) would evict a gang of a thousand kwok pods that
# a loaded machine makes Ready late; that is not what this benchmark measures.
os.environ.setdefault("GANGRUN_E2E_PODS_READY_TIMEOUT", "30m")

# After the environment setup above: the harness reads it when imported.
from benchmarks._lib import REPO, control_plane_binaries, load_average
from benchmarks.bench_controller import grow_cluster, install_tasks
from gangrun._backends.kube.render import REPORT_PORT
from gangrun._core import worker_env as wenv
from tests.harness.addons import LOCAL_QUEUE
from tests.harness.client import Watch, has_condition
from tests.harness.controller_timeline import nodes_needed
from tests.harness.controlplane import ControlPlane, running
from tests.harness.kwok import ANNOTATION_EXIT_CODE, ANNOTATION_FAIL_AFTER
from tests.harness.tasks import GROUP, TASK_LABEL, VERSION

KWOK_CIDR = "127.64.0.0/16"
STRATEGIES = ("InPlace", "Recreate")
WRITES = ("POST", "PUT", "PATCH", "APPLY", "DELETE")
BACKGROUND = ("nodes", "leases")  # heartbeats: writes by the clock, not by the restart
KILLED = 137


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the controller asks 64 launchers at once
    daemon_threads = True


class Launchers:
    """Every kwok pod's launcher at once: one server on 0.0.0.0:`port` answers at each pod's (loopback)
    IP as that pod's launcher: its round (JOBSET_RESTART_ATTEMPT, 0, at first), a failure, an order."""

    def __init__(self, port: int) -> None:
        self.lock = threading.Lock()
        self.rounds: dict[str, int] = {}
        self.failed: dict[str, tuple[int, float]] = {}
        self.calls: Counter[str] = Counter()
        launchers = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                ip = self.connection.getsockname()[0]
                if self.path != wenv.ROUND_PATH:
                    self._answer(404, b"no report")
                    return
                with launchers.lock:
                    launchers.calls["GET " + self.path] += 1
                    code, at = launchers.failed.get(ip, (None, None))
                    body = {"restart": launchers.rounds.get(ip, 0), "failed": code, "at": at}
                self._answer(200, json.dumps(body).encode())

            def do_POST(self) -> None:
                ip = self.connection.getsockname()[0]
                order = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with launchers.lock:
                    launchers.calls["POST " + self.path] += 1
                    if self.path == wenv.RESTART_PATH and order.get("restart", 0) > launchers.rounds.get(ip, 0):
                        launchers.rounds[ip] = order["restart"]
                        launchers.failed.pop(ip, None)
                self._answer(200, b"ok")

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("0.0.0.0", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True, name="launchers").start()

    def fail(self, ip: str, code: int) -> None:
        with self.lock:
            self.failed[ip] = (code, time.time())

    def round_of(self, ip: str) -> int:
        with self.lock:
            return self.rounds.get(ip, 0)

    def reset(self) -> Counter[str]:
        with self.lock:
            calls, self.calls = self.calls, Counter()
            self.rounds.clear()
            self.failed.clear()
        return calls


class Pods:
    """The benchmark's view of one namespace's pods, from a watch (no list per look)."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        self.lock = threading.Lock()
        self.by_uid: dict[str, dict[str, Any]] = {}
        self.watch = Watch(cp, ns, "pod", self._on, timeout_seconds=60)

    def _on(self, _t: float, kind: str, pod: dict[str, Any]) -> None:
        with self.lock:
            if kind == "DELETED":
                self.by_uid.pop(pod["metadata"]["uid"], None)
            else:
                self.by_uid[pod["metadata"]["uid"]] = pod

    def of(self, task: str) -> list[dict[str, Any]]:
        with self.lock:
            return [p for p in self.by_uid.values() if (p["metadata"].get("labels") or {}).get(TASK_LABEL) == task]


def up(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and has_condition(pod, "Ready") and not pod[
        "metadata"].get("deletionTimestamp")


def api_writes(cp: ControlPlane) -> Counter[str]:
    """Every write the API server has answered so far, by resource (and subresource)."""
    out: Counter[str] = Counter()
    for line in cp.api_text("/metrics").splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        if labels.get("verb") in WRITES:
            res = labels.get("resource", "") + ("/" + labels["subresource"] if labels.get("subresource") else "")
            out[res] += int(float(line.rsplit(" ", 1)[1]))
    return out


def set_ready(cp: ControlPlane, ns: str, pod: dict[str, Any], ready: bool) -> None:
    """What the kubelet writes when the readiness probe of the pod's one container changes its answer."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conds = [c for c in pod["status"].get("conditions") or [] if c["type"] not in ("Ready", "ContainersReady")]
    conds += [{"type": t, "status": str(ready), "lastTransitionTime": now} for t in ("Ready", "ContainersReady")]
    cp.kube.patch("Pod", pod["metadata"]["name"], ns, {"status": {"conditions": conds}}, subresource="status")


def task_body(ns: str, name: str, pods: int, strategy: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusteredTask",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"nodes": pods, "command": ["python", "train.py"], "image": "example.invalid/trainer:1",
                     "resources": {"cpu": "100m", "memory": "64Mi"}, "retries": 0,
                     "failurePolicy": {"maxRestarts": 3, "restartStrategy": strategy},
                     "queue": LOCAL_QUEUE, "terminationGracePeriod": "1s"}}


def one_run(cp: ControlPlane, ns: str, tasks_path: str, pods: Pods, launchers: Launchers, n: int, strategy: str,
            timeout: float) -> dict[str, Any]:
    kube = cp.kube
    name = f"restart-{strategy.lower()}-{n}"

    def status() -> dict[str, Any]:
        return kube.request("GET", f"{tasks_path}/{name}").get("status") or {}

    def running(restart: int) -> bool:
        s = status()
        return (s.get("phase") == "Running" and str(s.get("reason", "")).startswith("running (")
                and s.get("restartAttempt", 0) == restart)

    launchers.reset()
    t = time.monotonic()
    kube.request("POST", tasks_path, body=task_body(ns, name, n, strategy))
    kube.wait_for(f"{n} pods of {name} Ready", lambda: sum(map(up, pods.of(name))) == n, timeout=timeout,
                  interval=0.5)
    kube.wait_for(f"{name} running", lambda: running(0), timeout=timeout, interval=0.5)
    started = time.monotonic() - t
    time.sleep(5)  # the start's writes settle (Kueue's and JobSet's status updates, events)
    old = {p["metadata"]["uid"]: p for p in pods.of(name)}
    victim = max(old.values(), key=lambda p: int(p["metadata"]["annotations"].get(
        "batch.kubernetes.io/job-completion-index", "0")))
    ip = victim["status"]["podIP"]
    launchers.reset()
    writes0 = api_writes(cp)
    t0 = time.monotonic()
    if strategy == "InPlace":
        launchers.fail(ip, KILLED)
        set_ready(cp, ns, victim, False)
        probed = False

        def done() -> bool:
            nonlocal probed
            if not probed and launchers.round_of(ip) >= 1:
                set_ready(cp, ns, victim, True)
                probed = True
            now = pods.of(name)
            return (probed and len(now) == n and all(map(up, now))
                    and all(launchers.round_of(p["status"]["podIP"]) >= 1 for p in now) and running(1))
    else:
        kube.patch("Pod", victim["metadata"]["name"], ns, {"metadata": {"annotations": {
            ANNOTATION_FAIL_AFTER: "0s", ANNOTATION_EXIT_CODE: str(KILLED)}}})

        def done() -> bool:
            now = [p for p in pods.of(name) if p["metadata"]["uid"] not in old]
            return len(now) == n and all(map(up, now)) and running(1)
    kube.wait_for(f"{name} restarted", done, timeout=timeout, interval=0.05)
    wall = time.monotonic() - t0
    writes = api_writes(cp) - writes0
    calls = launchers.reset()
    kube.request("DELETE", f"{tasks_path}/{name}")
    kube.wait_for(f"pods of {name} gone", lambda: not pods.of(name), timeout=timeout, interval=0.5)
    own = sum(v for k, v in writes.items() if not k.startswith(BACKGROUND))
    return {"pods": n, "strategy": strategy, "start_s": round(started, 1), "wall_s": round(wall, 2),
            "api_writes": own, "background_writes": sum(writes.values()) - own,
            "writes_by_resource": dict(sorted(((k, v) for k, v in writes.items() if not k.startswith(BACKGROUND)),
                                              key=lambda kv: -kv[1])),
            "launcher_calls": dict(calls)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", default="256,1000", help="gang sizes, comma-separated")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()
    binaries = control_plane_binaries()
    if binaries is None:
        return 0
    sizes = [int(x) for x in args.pods.split(",")]
    nodes = nodes_needed((max(sizes) + 1) // 2)
    print(f"load average before the run: {load_average()} ({os.cpu_count()} cores)")
    t0 = time.monotonic()
    launchers = Launchers(REPORT_PORT)
    with running("C", binaries, kwok_cidr=KWOK_CIDR) as cp:
        print(f"control plane tier C up in {time.monotonic() - t0:.1f} s")
        grow_cluster(cp, nodes)
        ns, tasks_path = install_tasks(cp)
        ctl = cp.spawn("gangrun-controller", [
            sys.executable, "-m", "gangrun", "controller", "--kubeconfig", str(cp.kubeconfig), "--namespace", ns,
            "--no-leader-election", "--metrics-port", "0", "--health-port", "0"],
            env={"PYTHONPATH": str(REPO / "src")})
        pods = Pods(cp, ns)
        results = []
        for n in sizes:
            for strategy in STRATEGIES:
                r = one_run(cp, ns, tasks_path, pods, launchers, n, strategy, timeout=600 + n)
                if not ctl.alive():
                    raise SystemExit(f"controller died:\n{ctl.tail(60)}")
                results.append(r)
                top = ", ".join(f"{k} {v}" for k, v in list(r["writes_by_resource"].items())[:6])
                print(f"{n:5d} pods  {strategy:<8}  failure -> all running again {r['wall_s']:7.2f} s   "
                      f"API writes {r['api_writes']:5d} ({top}); launcher calls {r['launcher_calls'] or 'none'}; "
                      f"(started in {r['start_s']} s)", flush=True)
        pods.watch.stop()
        cp.terminate(ctl, grace=30)
    print()
    print(f"gang restart after one worker failed, kwok, {os.cpu_count()} cores shared with the control plane:")
    for n in sizes:
        by = {r["strategy"]: r for r in results if r["pods"] == n}
        ip, rc = by["InPlace"], by["Recreate"]
        print(f"  {n:5d} pods: InPlace {ip['wall_s']:.2f} s, {ip['api_writes']} writes; Recreate {rc['wall_s']:.2f} s, "
              f"{rc['api_writes']} writes; time ratio {ip['wall_s'] / rc['wall_s']:.3f} (target <= 0.1), writes "
              f"ratio {ip['api_writes'] / max(rc['api_writes'], 1):.3f}")
    if args.json:
        print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
