"""Faults for the real cluster of realnode_tasks, and what a test needs to follow a gang through one.

A fault is a crash and a restart, as production has them: a process of the control plane or of the real node
(containerd, the kubelet) SIGKILLed and started again with the same command line and the same data (as systemd
or a static pod's kubelet would restart it), or the in-cluster gangrun controller's process SIGKILLed from the
host (its kubelet restarts the container, as after an OOM kill). Each helper returns once the component serves
again, with the time that took. The workers' output is read from the host (the kubelet's pod log files), not
through the API server: a log followed through the API server breaks while it is down.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import yaml

from tests.harness import incluster, realnode
from tests.harness.client import Kube, has_condition
from tests.harness.controlplane import ControlPlane
from tests.harness.processes import ControlPlaneError
from tests.harness.realnode import RealNode, _run
from tests.harness.realnode_tasks import TIMEOUT, RealCluster, pod_processes, starting

LEASE = ("gangrun-system", "gangrun-controller")  # the in-cluster controller's Lease (deploy/deployment.yaml)
CONTROLLER_PODS = f"app.kubernetes.io/name={incluster.NAME}"


# ------------------------------------------------------------------------------- the control plane


def serving(cp: ControlPlane, name: str) -> bool:
    """Whether the control-plane component `name` answers its readiness check again (as it did at its start)."""
    p = cp.ports
    probes: dict[str, Callable[[], bool]] = {
        "etcd": lambda: cp._http_ok(f"http://127.0.0.1:{p['etcd']}/readyz"),
        "kube-apiserver": lambda: cp._https_ok(p["apiserver"], "/readyz"),
        "kueue": lambda: cp._http_ok(f"http://127.0.0.1:{p['kueue_health']}/readyz"),
        "jobset": lambda: cp._http_ok(f"http://127.0.0.1:{p['jobset_health']}/readyz"),
    }
    return probes[name]()


def restart_control_plane(cp: ControlPlane, *names: str) -> float:
    """SIGKILL the control-plane components `names` together and start them again; the seconds from the kill to
    the last one serving."""
    return _restart(cp, names, lambda name: serving(cp, name))


def node_serving(node: RealNode, name: str) -> bool:
    """Whether the real node's `containerd` or `kubelet` answers again (containerd its socket, the kubelet its
    /healthz)."""
    if name == "containerd":
        return "Server" in _run(["ctr", "--address", str(node.containerd_socket), "version"])
    port = yaml.safe_load((node.workdir / "kubelet" / "config.yaml").read_text())["healthzPort"]
    return ControlPlane._http_ok(f"http://127.0.0.1:{port}/healthz")


def restart_node(node: RealNode, name: str) -> float:
    """SIGKILL the real node's `containerd` or `kubelet` and start it again; the seconds until it serves."""
    return _restart(node, (name,), lambda n: node_serving(node, n))


def _restart(owner: ControlPlane | RealNode, names: tuple[str, ...], ready: Callable[[str], bool],
             timeout: float = 120.0) -> float:
    t0 = time.monotonic()
    for name in names:
        owner.restart(name)
    waiting = set(names)
    while waiting:
        owner.check_alive()
        waiting = {n for n in waiting if not ready(n)}
        if waiting and time.monotonic() - t0 > timeout:
            tails = "\n".join(f"--- {c.name}\n{c.tail()}" for c in owner.components if c.name in waiting)
            raise ControlPlaneError(f"{sorted(waiting)} not serving {timeout}s after their restart:\n{tails}")
        time.sleep(0.1)
    return time.monotonic() - t0


# ------------------------------------------------------------------------------- a node lost outright

OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
KCM = "kube-controller-manager"


def _swap_kcm(cp: ControlPlane, argv: list[str]) -> None:
    """Stop kube-controller-manager and start it with `argv` in its place."""
    i, old = next((i, c) for i, c in enumerate(cp.components) if c.name == KCM)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(old.proc.pid, signal.SIGKILL)
    old.proc.wait(timeout=10)
    cp.components.remove(old)
    new = cp._spawn(KCM, argv)
    cp.components.remove(new)
    cp.components.insert(i, new)
    new.core = old.core
    time.sleep(2)
    cp.check_alive()


@contextlib.contextmanager
def node_lifecycle(cp: ControlPlane, grace_seconds: int = 10) -> Iterator[None]:
    """kube-controller-manager with its node lifecycle and taint eviction controllers on, as every production
    cluster has them (tier B turns them off for kwok's nodes): a node that has not reported for `grace_seconds`
    (the kubelets report every 5 s) is NotReady and tainted ``node.kubernetes.io/unreachable``, and its pods are
    deleted once their toleration of that taint runs out. The usual command line again on exit."""
    (old,) = [c for c in cp.components if c.name == KCM]
    usual = [str(a) for a in old.proc.args]
    _swap_kcm(cp, [a for a in usual if not a.startswith("--controllers=")] + [
        "--controllers=*", f"--node-monitor-grace-period={grace_seconds}s", "--node-monitor-period=1s"])
    try:
        yield
    finally:
        _swap_kcm(cp, usual)


def power_off(node: RealNode) -> set[int]:
    """Kill the node as a power loss does: its kubelet, its containerd, the containers' shims and every process
    in its pods SIGKILLed at once (nothing of it runs a line of shutdown code). Only for a node joined beside the
    first (realnodes.JoinedNode): its processes are told apart by its own folder and cgroup. Returns the pids."""
    assert node.net.cgroup_root != "/", "power_off is for a joined node, whose cgroup and folder are its own"
    pids = realnode._processes_of(node.workdir, node.net.cgroups)
    for c in node.components:  # the kubelet and containerd first: nobody restarts what dies next
        with contextlib.suppress(ProcessLookupError):
            os.killpg(c.proc.pid, signal.SIGKILL)
    realnode._kill_pids(pids | realnode._processes_of(node.workdir, node.net.cgroups))
    for c in node.components:
        c.proc.wait(timeout=10)
    return pids


def power_on(node: RealNode) -> float:
    """Start the node's containerd and kubelet again on the same folders (the machine booted); the seconds until
    both serve."""
    t0 = time.monotonic()
    for name in ("containerd", "kubelet"):
        node.restart(name)
        deadline = time.monotonic() + 120
        while not node_serving(node, name):
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} of {node.net.name} not serving 120 s after its start")
            time.sleep(0.1)
    node.check_alive()
    return time.monotonic() - t0


def taint_out_of_service(kube: Kube, node: str, on: bool) -> None:
    """Add (or remove) ``node.kubernetes.io/out-of-service``: what an operator does once they know a NotReady
    node is shut down (Kubernetes' non-graceful node shutdown), so that its pods, stuck Terminating for a
    kubelet that will not answer, are force-deleted by PodGC; removed again once the node is back."""
    body = kube.get("Node", node)
    taints = [t for t in body["spec"].get("taints") or [] if t["key"] != OUT_OF_SERVICE["key"]]
    kube.request("PATCH", f"/api/v1/nodes/{node}", body={"spec": {"taints": [*taints, *([OUT_OF_SERVICE] if on
                                                                                       else [])]}},
                 content_type="application/merge-patch+json")


# ------------------------------------------------------------------------------- the gangrun controller


def lease_holder(kube: Kube) -> str:
    return ((kube.get("Lease", LEASE[1], LEASE[0]).get("spec") or {}).get("holderIdentity")) or ""


def kill_controller(rc: RealCluster) -> str:
    """SIGKILL the in-cluster controller's process from the host (a crash: no shutdown code runs, the Lease is
    not released) and wait until it is dead; returns the Lease holder it leaves behind."""
    holder = lease_holder(rc.kube)
    (pod,) = rc.kube.running_pods(incluster.NAMESPACE, CONTROLLER_PODS)
    pids = [pid for pid, argv in pod_processes(pod["metadata"]["uid"]).items() if "controller" in argv]
    assert pids, f"no controller process in {pod['metadata']['name']}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    rc.kube.wait_for("the controller process gone", lambda: not any(Path(f"/proc/{p}").exists() for p in pids),
                     timeout=10, interval=0.02)
    return holder


def wait_new_leader(rc: RealCluster, old: str) -> str:
    """Wait until a controller other than `old` holds the Lease (the restarted container, after the crashed
    one's Lease expired) and is Ready; returns its identity."""
    kube = rc.kube
    holder = kube.wait_for("a new controller leading", lambda: (h := lease_holder(kube)) not in ("", old) and h,
                           timeout=TIMEOUT, interval=0.1)
    kube.wait_for("the controller Ready", lambda: any(
        has_condition(p, "Ready") for p in kube.running_pods(incluster.NAMESPACE, CONTROLLER_PODS)), timeout=TIMEOUT)
    return str(holder)


# ------------------------------------------------------------------------------- the workers, seen from the host


class HostLogs:
    """The worker output of the pods of JobSet `jobset`, by pod uid, read from the kubelets' pod log files on this
    host (every node's, also of a node that is down) (``<podLogsDir>/<namespace>_<pod>_<uid>/worker/*.log``) on a thread. Each file is held open from the
    moment it appears, so that its last lines are read even when the kubelet removes it as the container ends."""

    def __init__(self, rc: RealCluster, jobset: str) -> None:
        self.texts: dict[str, str] = {}
        self._pattern = f"{rc.ns}_{jobset}-*/worker/*.log"
        self._nodes, self._kube = (rc.node, *rc.others), rc.kube
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True, name=f"host-logs-{jobset}").start()

    def _run(self) -> None:
        files: dict[Path, TextIO] = {}
        try:
            while not self._stop.wait(0.05):
                for path in (p for n in self._nodes for p in n.pod_logs(self._pattern)):
                    if path not in files:
                        with contextlib.suppress(OSError):
                            files[path] = open(path, errors="replace")  # noqa: SIM115 (held open on purpose)
                for path, fh in files.items():
                    if chunk := fh.read():
                        uid = path.parts[-3].rsplit("_", 1)[1]
                        self.texts[uid] = self.texts.get(uid, "") + chunk
        finally:
            for fh in files.values():
                fh.close()

    def stop(self) -> None:
        self._stop.set()

    def wait(self, uid: str, pattern: str, timeout: float = TIMEOUT) -> re.Match:
        try:
            return self._kube.wait_for(f"{pattern!r} in the log of pod {uid}", lambda: re.search(
                pattern, self.texts.get(uid, "")), timeout=timeout, interval=0.1)
        except TimeoutError as e:
            raise AssertionError(f"{e}; its log ends:\n{self.texts.get(uid, '')[-2000:]}\n"
                                 + "\n".join(n.stops_told(uid) for n in self._nodes)) from None

    def starts(self, exclude: set[str], count: int = 2, timeout: float = TIMEOUT, *,
               restart: int | None = None, world: int | None = None) -> dict[int, re.Match]:
        """The `starting at step` line of `count` workers whose pods are not in `exclude`, by rank; with
        `restart`, the line of that restart round (a gang restarted in place starts again in its pods); with
        `world`, of a gang of that many workers (an elastic gang's size)."""
        pattern = starting(restart, world=world)

        def found() -> dict[int, re.Match] | None:
            lines = {int(m["rank"]): m for uid, text in list(self.texts.items())
                     if uid not in exclude and (m := re.search(pattern, text))}
            return lines if len(lines) == count else None
        return self._kube.wait_for(f"{count} workers started", found, timeout=timeout, interval=0.1)


def uninterrupted(steps: int) -> list[float]:
    """The example's weights after `steps` steps without a stop (gangrun.examples.train computes each step from
    the step number alone, and its checkpoints keep the weights exactly)."""
    from gangrun.examples.train import FEATURES, dataset, sgd_step

    xs, ys, _ = dataset()
    w = [0.0] * FEATURES
    for step in range(steps):
        w = sgd_step(w, xs, ys, step)
    return w


@contextlib.contextmanager
def frozen_inside_a_save(pid: int, folder: Path, timeout: float = 60.0) -> Iterator[Path]:
    """Stop the process (SIGSTOP) at moments drawn at random until it is stopped inside a save: a checkpoint of
    `folder` still being written (`ckpt-<seq>.tmp-<id>`, renamed to `ckpt-<seq>` as its commit, gangrun._ckpt.commit).
    Yields that folder with every thread of the process stopped; continues it (SIGCONT) on the way out."""
    rng, deadline = random.Random(pid), time.monotonic() + timeout
    while True:
        os.kill(pid, signal.SIGSTOP)
        try:
            while not _all_stopped(pid):
                time.sleep(0.001)
            writing = sorted(folder.glob("ckpt-*.tmp-*"))
            if writing:
                yield writing[0]
                return
        finally:
            os.kill(pid, signal.SIGCONT)
        assert time.monotonic() < deadline, f"process {pid} was never stopped inside a save of {folder}"
        time.sleep(rng.uniform(0, 0.03))


def _all_stopped(pid: int) -> bool:
    """Every thread of `pid` is stopped (state T), or the process is gone."""
    return all(realnode._state(int(t.name)) in ("T", "Z") for t in Path(f"/proc/{pid}/task").glob("*"))


def newest_checkpoint(data: Path, task: str, attempt: int) -> dict:
    """The payload of the newest committed checkpoint of the task's attempt in the hostPath folder."""
    manifests = sorted(data.glob(f"{task}/*/attempt-{attempt}/ckpt-*/manifest.json"), key=lambda m: m.parent.name)
    assert manifests, f"no committed checkpoint of {task} attempt {attempt}"
    return dict(json.loads((manifests[-1].parent / "data" / "payload").read_bytes()))
