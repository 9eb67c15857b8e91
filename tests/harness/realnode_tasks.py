"""Tasks on the real node: the cluster around it, the shipped example as a ClusteredTask, following
its workers (their logs through the API server, their processes on this host) and ending them the
ways a worker ends in production (SIGKILL from the host, the Eviction API).

Shared by tests/e2e/test_realnode_*.py and benchmarks/bench_realnode.py. The cluster: a real node
beside the control plane (tier C), the images built here, a ClusterQueue sized for two half-CPU
workers (so that a one-worker task of higher priority makes Kueue preempt a gang), and the gangrun
controller deployed in-cluster from the image (incluster.py), watching one namespace of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.harness import incluster, realnode, realnodes
from tests.harness.binaries import REPO_ROOT
from tests.harness.client import Kube, has_condition
from tests.harness.controlplane import ControlPlane
from tests.harness.tasks import ATTEMPT_LABEL, TASK_LABEL, PodRecorder, task_path, wait_status

QUEUE = "real"
CLUSTER_QUEUE = "real-node"
TIMEOUT = 180.0
# The example's line when it starts: rank, attempt, restart, the step it loaded and from where.
STARTING = (r"rank (?P<rank>\d+)/(?P<world>\d+) attempt (?P<attempt>\d+) restart (?P<restart>\d+): "
            r"starting at step (?P<step>\d+) \((?P<source>.*)\)")


@dataclass
class RealCluster:
    cp: ControlPlane
    node: realnode.RealNode
    ns: str
    data: Path       # a host folder the pods see at the same path
    others: list[realnode.RealNode] = field(default_factory=list)  # the nodes that joined `node` (realnodes.py)

    @property
    def kube(self) -> Kube:
        return self.cp.kube


@contextlib.contextmanager
def real_cluster(cp: ControlPlane, images: list[Path], *, cpu: str = "1", memory: str = "8Gi",
                 nodes: int = 1) -> Iterator[RealCluster]:
    """The real node started beside `cp` (tier C; with `nodes`, that many on this host), its queue and the
    controller in-cluster; all removed again on exit. The quota is `cpu` (two half-CPU workers fill it) and
    `memory`."""
    node, *others = realnodes.start_nodes(cp.binaries, cp.kubeconfig, Path(tempfile.mkdtemp(prefix="gangrun-node-")),
                                          images, nodes, keep_workdir=bool(os.environ.get("GANGRUN_E2E_KEEP")))
    data = Path(tempfile.mkdtemp(prefix="gangrun-data-"))
    data.chmod(0o1777)  # the image's user (65532) writes the checkpoints
    try:
        ns = cp.make_namespace("realnode")
        kube = cp.kube
        kube.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
                    "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                             "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                                 "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": cpu},
                                                                         {"name": "memory", "nominalQuota": memory}]}]}]}})
        kube.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                    "metadata": {"name": QUEUE, "namespace": ns}, "spec": {"clusterQueue": CLUSTER_QUEUE}})
        kube.wait_for("LocalQueue real Active", lambda: has_condition(kube.get("LocalQueue", QUEUE, ns), "Active"))
        incluster.deploy(kube, cp.api_url, namespace=ns)
        yield RealCluster(cp, node, ns, data, others)
    finally:
        with contextlib.suppress(Exception):
            incluster.remove(cp.kube)
        realnodes.stop_nodes([node, *others])
        shutil.rmtree(data, ignore_errors=True)


def train_task(rc: RealCluster, name: str, *, nodes: int = 2, priority: str = "low", steps: int = 60,
               resume: bool = True, retries: int = 0, max_restarts: int = 0, step_seconds: float = 0.2,
               restart_strategy: str = "") -> dict:
    """The shipped example in real containers, its checkpoints in a hostPath folder through podTemplate.
    `restart_strategy`: failurePolicy.restartStrategy ("": the default, Recreate)."""
    worker = {"name": "worker", "volumeMounts": [{"name": "data", "mountPath": str(rc.data)}]}
    template = {"spec": {"containers": [worker],
                         "volumes": [{"name": "data", "hostPath": {"path": str(rc.data), "type": "Directory"}}],
                         **realnode.placement()}}
    return {
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name, "namespace": rc.ns},
        "spec": {"nodes": nodes, "command": ["python", "-m", "gangrun.examples.train"], "image": realnode.IMAGE,
                 "env": {"STEPS": str(steps), "SAVE_EVERY": "2", "STEP_SECONDS": str(step_seconds)},
                 "resources": {"cpu": "500m", "memory": "256Mi"}, "queue": QUEUE, "priorityClass": priority,
                 "retries": retries, "terminationGracePeriod": "20s",
                 "failurePolicy": {"maxRestarts": max_restarts, "resumeAfterPreemption": resume,
                                   **({"restartStrategy": restart_strategy} if restart_strategy else {})},
                 "checkpoint": {"uri": f"file://{rc.data}"}, "podTemplate": template},
    }


def submit(rc: RealCluster, body: dict) -> None:
    rc.kube.request("POST", task_path(rc.ns), body=body)


class LogFollower:
    """A worker's output, followed from the API server on a thread and kept after its pod is gone.
    With `timestamps`, each line starts with the time the container runtime received it (RFC 3339)."""

    def __init__(self, rc: RealCluster, pod: str, *, timestamps: bool = False) -> None:
        self.text = ""
        self._rc, self._pod, self._timestamps = rc, pod, timestamps
        threading.Thread(target=self._run, daemon=True, name=f"log-{pod}").start()

    def _run(self) -> None:
        from kubernetes import client

        api = client.CoreV1Api(self._rc.kube.api_client)
        resp = api.read_namespaced_pod_log(self._pod, self._rc.ns, container="worker", follow=True,
                                           timestamps=self._timestamps, _preload_content=False)
        for chunk in resp.stream(1024):
            self.text += chunk.decode(errors="replace")

    def wait(self, pattern: str, timeout: float = TIMEOUT) -> re.Match:
        try:
            return self._rc.kube.wait_for(f"{pattern!r} in the log of {self._pod}",
                                          lambda: re.search(pattern, self.text), timeout=timeout, interval=0.3)
        except TimeoutError as e:
            nodes = (self._rc.node, *self._rc.others)
            on_host = ""
            for f in (f for n in nodes for f in n.pod_logs(f"{self._rc.ns}_{self._pod}_*/worker/*.log")):
                with contextlib.suppress(OSError):  # removed with its pod
                    on_host += f.read_text(errors="replace")
            raise AssertionError(f"{e}; its log ends:\n{self.text[-1000:]}\nits log file on the node ends:\n"
                                 f"{on_host[-1000:]}\n" + "\n".join(n.stops_told(self._pod) for n in nodes)) from None


def running_pods(rc: RealCluster, task: str, attempt: int) -> list[dict]:
    return rc.kube.running_pods(rc.ns, f"{TASK_LABEL}={task},{ATTEMPT_LABEL}={attempt}")


def new_running_pods(rc: RealCluster, task: str, attempt: int, old: set[str], count: int = 2) -> list[dict]:
    """Wait for `count` Running pods of the task's `attempt` whose uids are not in `old`."""
    return rc.kube.wait_for(f"attempt {attempt} of {task} running again", lambda: (
        p if len(p := [x for x in running_pods(rc, task, attempt) if x["metadata"]["uid"] not in old]) == count
        else None), timeout=TIMEOUT)


def worker_exits(rec: PodRecorder, uids: set[str]) -> dict[str, dict]:
    """The worker container's terminated state of each pod in `uids`, as the watch saw it last."""
    out: dict[str, dict] = {}
    for _rv, name, pod in rec.changes:
        if pod["metadata"]["uid"] not in uids:
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs["name"] == "worker" and "terminated" in (cs.get("state") or {}):
                out[name] = cs["state"]["terminated"]
    return out


def cleanup_task(rc: RealCluster, name: str) -> None:
    with contextlib.suppress(Exception):
        rc.kube.request("DELETE", task_path(rc.ns, name))


def wait_phase(rc: RealCluster, name: str, phase: str, timeout: float = TIMEOUT) -> dict:
    return _wait(rc, name, lambda s: s.get("phase") == phase, phase, timeout)


def wait_restarts(rc: RealCluster, name: str, restarts: int, timeout: float = TIMEOUT) -> dict:
    """The task's status once its gang restarted `restarts` times (JobSet's and in place)."""
    return _wait(rc, name, lambda s: s.get("restartAttempt", 0) >= restarts, f"restartAttempt {restarts}", timeout)


def _wait(rc: RealCluster, name: str, ok: Callable[[dict], bool], what: str, timeout: float) -> dict:
    """The task's status once `ok` holds; a timeout ends with the in-cluster controller's log."""
    try:
        return wait_status(rc.kube, rc.ns, name, ok, what, timeout=timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}\ncontroller:\n{incluster.logs(rc.kube)[-6000:]}") from None


def starting(restart: int | None = None, *, world: int | None = None) -> str:
    """STARTING, or its line of one restart round, or of a gang of `world` workers."""
    pattern = STARTING if restart is None else STARTING.replace(r"(?P<restart>\d+)", f"(?P<restart>{restart})")
    return pattern if world is None else pattern.replace(r"(?P<world>\d+)", f"(?P<world>{world})")


def starts_by_rank(rc: RealCluster, pods: list[dict], *, restart: int | None = None) -> dict[int, re.Match]:
    """The `starting at step` line of each of `pods`' workers, by rank; with `restart`, the line of that
    restart round (a gang restarted in place starts again in the same pods)."""
    return {int(m["rank"]): m for p in pods
            if (m := LogFollower(rc, p["metadata"]["name"]).wait(starting(restart)))}


# ------------------------------------------------------------------------------- on the host


def pod_processes(pod_uid: str) -> dict[int, list[str]]:
    """The host's processes in the pod's cgroups (the kubelet's cgroupfs driver names them
    `pod<uid>`): pid -> command line."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if f"pod{pod_uid}" in (d / "cgroup").read_text():
                out[int(d.name)] = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    return out


def training_process(pod_uid: str) -> int | None:
    """The pid of the pod's training process (the example under the launcher), or None. A Python worker
    runs in a fork of the launcher, so it shows the launcher's command line: it is the process whose
    parent is the launcher (a worker the launcher started as a new program shows its own)."""
    found = {pid: argv for pid, argv in pod_processes(pod_uid).items() if "gangrun.examples.train" in argv}
    for pid, argv in found.items():
        if "gangrun.launch" not in argv or realnode.parent_pid(pid) in found:
            return pid
    return None


def kill_training_process(pod_uid: str) -> int:
    """SIGKILL the pod's training process from the host, as a crash or the OOM killer would, and wait
    until it is dead (a zombie or gone). Returns its pid."""
    pid = training_process(pod_uid)
    assert pid is not None, f"no training process in pod {pod_uid}: {pod_processes(pod_uid)}"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and realnode._state(pid) != "Z":
        time.sleep(0.02)
    return pid


def evict(rc: RealCluster, pod: str) -> None:
    """Evict `pod` through the Eviction API (policy/v1), as `kubectl drain` does."""
    rc.kube.request("POST", f"/api/v1/namespaces/{rc.ns}/pods/{pod}/eviction",
                    body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": rc.ns}})


def committed_steps(rc: RealCluster, task: str, attempt: int) -> dict[int, int]:
    """The committed checkpoints of the task's attempt in the hostPath folder (`<name>/<uid>/attempt-N`):
    seq -> step."""
    import json

    out = {}
    for manifest in (rc.data / task).glob(f"*/attempt-{attempt}/ckpt-*/manifest.json"):
        m = re.fullmatch(r"ckpt-(\d+)", manifest.parent.name)
        if m:
            out[int(m.group(1))] = int(json.loads(manifest.read_text())["step"])
    return out


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def rank_of(pod: dict) -> int:
    return int(pod["metadata"]["annotations"][COMPLETION_INDEX])


def ddp_task(rc: RealCluster, name: str) -> dict:
    """examples/ddp/train.py (DDP over gloo, sharded checkpoints through gangrun.torch) as a 2-worker task of
    20 steps. The image has no torch (PyPI's is a multi-GB CUDA build): this host's torch is mounted read-only
    through a hostPath volume and put on PYTHONPATH (the image's Python has the same minor version)."""
    torch = pytest.importorskip("torch")
    site = str(Path(torch.__file__).resolve().parents[1])
    example = REPO_ROOT / "examples" / "ddp"
    body = train_task(rc, name)
    spec = body["spec"]
    spec.update(command=["python", str(example / "train.py")], resources={"cpu": "500m", "memory": "2Gi"},
                env={"STEPS": "20", "SAVE_EVERY": "5", "STEP_SECONDS": "0.05", "OMP_NUM_THREADS": "1",
                     "PYTHONPATH": site})
    pod = spec["podTemplate"]["spec"]
    for volume, path in (("torch", site), ("example", str(example))):
        pod["volumes"].append({"name": volume, "hostPath": {"path": path, "type": "Directory"}})
        pod["containers"][0]["volumeMounts"].append({"name": volume, "mountPath": path, "readOnly": True})
    return body
