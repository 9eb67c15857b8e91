"""A Kubernetes cluster of one node (or more: ``--nodes 2``) on this machine, for people: ``./dev cluster up`` /
``./dev cluster down``.

``up`` starts a supervisor process in the background that brings up the control plane (etcd,
kube-apiserver, controller-manager, scheduler, JobSet, Kueue; no fake nodes), the real node
(containerd, kubelet, CoreDNS; realnode.py; with ``--nodes``, more beside it: realnodes.py), the Kueue
objects below and the gangrun controller
in-cluster from the image (incluster.py); ``up`` returns once all of it is ready and prints how to
use it. ``down`` stops the supervisor and removes whatever is left on the host (also after a failed
or killed ``up``). The contract, in ``$GANGRUN_CLUSTER_HOME`` (default ``~/.gangrun/cluster``):

* ``kubeconfig``: an admin kubeconfig (``gangrun --backend kubernetes --kubeconfig <it>``);
* ``data/``: a folder the pods see at ``DATA_IN_POD`` through a ``hostPath`` volume;
* ``images/``: image archives of your own, imported into the node at every ``up``;
* LocalQueue ``default`` in namespace ``default`` on a ClusterQueue whose quota is the nodes'
  allocatable CPU and memory; WorkloadPriorityClasses ``low`` 100, ``normal`` 1000, ``high`` 10000;
* the image ``localhost/gangrun:dev``.

Usage: ``python -m tests.harness.cluster up [--nodes N]|down|status`` from the repository's root (``./dev cluster``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from tests.harness import addons, incluster, realnode, realnodes
from tests.harness.binaries import REPO_ROOT, locate_binaries
from tests.harness.client import Kube
from tests.harness.controlplane import ControlPlane

# `gangrun controller` flags of `./dev cluster up`: checkpoint-aware preemption on, as on the local backend.
CONTROLLER_ARGS = ("--priority-boost",)
# Where the pods see the shared folder: not at its host path, which is under root's home for `sudo ./dev cluster
# up`, and the image's /root (mode 0700) keeps the workers' user (65532) out of anything mounted beneath it.
DATA_IN_POD = "/var/lib/gangrun/checkpoints"  # the default checkpoint root, so a manifest may leave the URI out
# Image archives (docker-archive .tar) the node imports at every `up`, after gangrun's own: your training images.
IMAGES = "images"
PRIORITY_CLASSES = {"low": 100, "normal": 1000, "high": 10000}


def home() -> Path:
    return Path(os.environ.get("GANGRUN_CLUSTER_HOME") or Path.home() / ".gangrun" / "cluster").resolve()


def _pid(h: Path) -> int | None:
    try:
        pid = int((h / "supervisor.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def usage(h: Path, ready: dict) -> str:
    kc = h / "kubeconfig"
    took = ", ".join(f"{k} {v:.1f} s" for k, v in ready["took"].items())
    nodes = ", ".join(f"{n.name} ({n.gateway}, pods on {n.bridge} {n.subnet})"
                      for n in map(realnodes.node_net, range(1, ready["nodes"] + 1)))
    return f"""The gangrun cluster is up ({took}).

  kubeconfig     {kc}
  nodes          {nodes}
  image          {realnode.IMAGE}
  queue          LocalQueue 'default' in namespace 'default'; priority classes low, normal, high
  shared folder  {h / 'data'} (the pods see it at {DATA_IN_POD} through a hostPath volume)
  your images    {h / IMAGES}/*.tar (docker-archive; imported at every up)
  logs           {h / 'logs'}

Run the example (2 workers training, checkpoints in the shared folder), then preempt it with a task of
higher priority from another terminal (docs/kubernetes.md, "A cluster on your machine"):

  export GANGRUN_BACKEND=kubernetes KUBECONFIG={kc}
  gangrun run {h / 'examples' / 'train.yaml'}
  gangrun run {h / 'examples' / 'urgent.yaml'}
  gangrun get; gangrun describe train

kubectl, if you have one:  KUBECONFIG={kc} kubectl get nodes,pods -A
Stop it and clean the host: ./dev cluster down
"""


def user_images(h: Path) -> list[Path]:
    """The image archives the user keeps in the cluster home, imported at every `up` (`down` removes the
    node's containerd and everything imported into it)."""
    return sorted((h / IMAGES).glob("*.tar"))


def example_manifests(h: Path, allocatable_cpu: str, nodes: int = 1) -> dict[str, dict]:
    """The shipped training example sized to fill the cluster (train) and to preempt it (urgent): each worker
    takes half the cluster's CPU (of `nodes` nodes of `allocatable_cpu` each). On more than one node, train's
    workers keep off each other's node (a pod anti-affinity on the task's label), one worker per node as on
    machines of their own, so that they meet across the nodes' bridges."""
    from gangrun._core.units import parse_quantity

    half = max(int(parse_quantity(allocatable_cpu) * 1000 * nodes) // 2 - 100, 100)  # room for the controller's 100m
    template = {"spec": {"containers": [{"name": "worker", "volumeMounts": [{"name": "data", "mountPath": DATA_IN_POD}]}],
                         "volumes": [{"name": "data", "hostPath": {"path": str(h / "data"), "type": "Directory"}}]}}

    def task(name: str, workers: int, priority: str, steps: int) -> dict:
        pod_template = template
        if nodes > 1 and workers > 1:
            pod_template = {"spec": {**template["spec"], "affinity": one_worker_per_node(name)}}
        return {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
                "spec": {"nodes": workers, "command": ["python", "-m", "gangrun.examples.train"],
                         "image": realnode.IMAGE, "env": {"STEPS": str(steps), "SAVE_EVERY": "5", "STEP_SECONDS": "0.5"},
                         "resources": {"cpu": f"{half}m", "memory": "256Mi"}, "priorityClass": priority,
                         "terminationGracePeriod": "20s",
                         "failurePolicy": {"maxRestarts": 1, "resumeAfterPreemption": True},
                         "checkpoint": {"uri": f"file://{DATA_IN_POD}"}, "podTemplate": pod_template}}
    return {"train": task("train", 2, "low", 200), "urgent": task("urgent", 1, "high", 20)}


def one_worker_per_node(task: str) -> dict:
    """A pod ``affinity`` that keeps the task's workers on different nodes: no two pods with its task label
    share a ``kubernetes.io/hostname``."""
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"gangrun.dev/task": task}}, "topologyKey": "kubernetes.io/hostname"}]}}


def up(nodes: int = 1, timeout: float = 900.0) -> int:
    h = home()
    if _pid(h) and (h / "ready.json").exists():
        ready = json.loads((h / "ready.json").read_text())
        if ready["nodes"] != nodes:
            print(f"dev cluster: up with {ready['nodes']} node(s), not {nodes}: ./dev cluster down first", file=sys.stderr)
            return 1
        print(usage(h, ready))
        return 0
    down(quiet=True)
    (h / "logs").mkdir(parents=True, exist_ok=True)
    (h / "data").mkdir(parents=True, exist_ok=True)
    os.chmod(h / "data", 0o1777)  # the image's user (65532) writes checkpoints there
    (h / IMAGES).mkdir(exist_ok=True)
    with open(h / "logs" / "cluster.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.harness.cluster", "serve", f"--nodes={nodes}"], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO_ROOT)
    (h / "supervisor.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (h / "ready.json").exists():
            print(usage(h, json.loads((h / "ready.json").read_text())))
            return 0
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    tail = (h / "logs" / "cluster.log").read_text(errors="replace").splitlines()[-30:]
    print("dev cluster up failed; last lines of " + str(h / "logs" / "cluster.log") + ":\n" + "\n".join(tail),
          file=sys.stderr)
    down(quiet=True)
    return 1


def down(quiet: bool = False) -> int:
    h = home()
    pid = _pid(h)
    if pid:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
    # Whatever a killed supervisor left: its process group, the node's changes to the host.
    if pid:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    realnode.clean_leftovers()
    for name in ("supervisor.pid", "ready.json", "kubeconfig"):
        with contextlib.suppress(FileNotFoundError):
            (h / name).unlink()
    import shutil

    for d in (h / "control-plane", h / "node", *h.glob("node-*")):
        shutil.rmtree(d, ignore_errors=True)
    if not quiet:
        print(f"dev cluster: down; the host is clean ({h / 'data'} is kept)")
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return realnode._state(pid) != "Z"


def status() -> int:
    h = home()
    if _pid(h) and (h / "ready.json").exists():
        print(f"up: {h / 'kubeconfig'} ({json.loads((h / 'ready.json').read_text())['nodes']} node(s))")
        return 0
    print("down")
    return 1


def serve(count: int = 1) -> None:
    """The supervisor: bring everything up (`count` real nodes), write ready.json, and stop it all on SIGTERM."""
    h = home()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    figures: dict[str, float] = {}
    t0 = time.monotonic()
    binaries = locate_binaries()
    missing = realnode.missing_pieces(binaries)
    if missing:
        raise realnode.NodeSetupError("missing: " + "; ".join(missing))
    t = time.monotonic()
    images = realnode.image_archives() + user_images(h)
    figures["images"] = time.monotonic() - t
    cp = ControlPlane(binaries, workdir=h / "control-plane", keep_workdir=False, kwok_nodes=0)
    nodes: list[realnode.RealNode] = []
    try:
        t = time.monotonic()
        (h / "control-plane").mkdir(parents=True, exist_ok=True)
        cp.ensure("C")
        figures["control plane"] = time.monotonic() - t
        nodes = realnodes.start_nodes(binaries, h / "control-plane" / "admin.kubeconfig", h / "node", images, count,
                                      exclusive=False)
        for i, n in enumerate(nodes, 1):
            figures["node" if i == 1 else f"node {i}"] = n.timings["node start"]
        t = time.monotonic()
        queues(cp.kube, [n.net.name for n in nodes])
        (h / "examples").mkdir(exist_ok=True)
        cpu = cp.kube.get("Node", realnode.NODE_NAME)["status"]["allocatable"]["cpu"]
        for name, doc in example_manifests(h, cpu, count).items():
            (h / "examples" / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        # Checkpoint-aware preemption on, as on the local backend (this Kueue runs with PriorityBoost).
        incluster.deploy(cp.kube, cp.api_url, on_real_node=False, args=CONTROLLER_ARGS)
        figures["controller"] = time.monotonic() - t
        figures["total"] = time.monotonic() - t0
        kc = h / "kubeconfig"
        kc.write_text(cp.kubeconfig.read_text())
        os.chmod(kc, 0o600)
        (h / "ready.json").write_text(json.dumps({"nodes": count, "took": figures}))
        print("ready: " + json.dumps(figures), flush=True)
        while not stop.wait(2):
            cp.check_alive()
            for n in nodes:
                n.check_alive()
    finally:
        with contextlib.suppress(FileNotFoundError):
            (h / "ready.json").unlink()
        realnodes.stop_nodes(nodes)
        cp.stop()


def queues(kube: Kube, nodes: list[str]) -> None:
    """The ClusterQueue's quota is the nodes' allocatable CPU and memory together (on one machine each node
    counts the machine's: see docs/kubernetes.md, "Two nodes"); the priority classes of the contract."""
    from gangrun._core.units import parse_quantity

    allocs = [kube.get("Node", n)["status"]["allocatable"] for n in nodes]
    cpu = sum(parse_quantity(a["cpu"]) for a in allocs)
    memory = sum(parse_quantity(a["memory"]) for a in allocs)
    kube.patch("ClusterQueue", addons.CLUSTER_QUEUE, None, {"spec": {"resourceGroups": [{
        "coveredResources": ["cpu", "memory"],
        "flavors": [{"name": addons.RESOURCE_FLAVOR, "resources": [
            {"name": "cpu", "nominalQuota": f"{round(cpu * 1000)}m"},
            {"name": "memory", "nominalQuota": str(round(memory))}]}],
    }]}})
    for name, value in PRIORITY_CLASSES.items():
        kube.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                    "metadata": {"name": name}, "value": value, "description": f"gangrun cluster: {name}"})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="./dev cluster")
    parser.add_argument("cmd", choices=["up", "down", "status", "serve"])
    parser.add_argument("--nodes", type=int, default=1, help="real nodes on this machine (up; 1 or 2)")
    args = parser.parse_args(argv)
    if args.cmd in ("up", "serve") and not 1 <= args.nodes <= 2:
        parser.error("--nodes: 1 or 2")
    if args.cmd == "up":
        return up(args.nodes)
    if args.cmd == "down":
        return down()
    if args.cmd == "status":
        return status()
    serve(args.nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
