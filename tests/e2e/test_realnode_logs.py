"""`gangrun logs` on real pods across a preemption: `-f` follows the gang into its next pods, and the
output of the pods Kueue deleted stays readable (`--attempt 1 --round 0`) from the ConfigMap the
controller keeps it in (`<task>.gangrun-output`).

The cluster is test_realnode_e2e.py's (realnode_tasks.py): the shipped example in 2 real pods, a
ClusterQueue sized for them, a 1-worker task of higher priority to make Kueue preempt the gang, the
controller in-cluster with deploy/'s RBAC. The CLI runs in a subprocess as a user types it, with the
token of a ServiceAccount holding exactly deploy/rbac.yaml's `gangrun-user` rules.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import real_node_images
from tests.harness.binaries import REPO_ROOT
from tests.harness.controlplane import ControlPlane
from tests.harness.realnode_tasks import (
    TIMEOUT,
    RealCluster,
    cleanup_task,
    real_cluster,
    submit,
    train_task,
    wait_phase,
)
from tests.harness.tasks import TASK_LABEL

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

STEP = re.compile(r"^\[rank (\d)\] step (\d+): loss")


@pytest.fixture(scope="module", name="real_cluster")
def real_cluster_fixture(control_plane_tier_c: ControlPlane) -> Iterator[RealCluster]:
    cp = control_plane_tier_c
    with real_cluster(cp, real_node_images(cp.binaries)) as rc:
        yield rc


def user_kubeconfig(rc: RealCluster) -> Path:
    """A kubeconfig of a user with exactly the `gangrun-user` ClusterRole's rules."""
    role = next(d for d in yaml.safe_load_all((REPO_ROOT / "deploy" / "rbac.yaml").read_text())
                if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gangrun-user")
    return rc.cp.service_account_kubeconfig(rc.ns, "logs-reader", cluster_rules=role["rules"])


def gangrun(rc: RealCluster, kubeconfig: Path, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**rc.cp.env(), "PYTHONPATH": str(REPO_ROOT / "src"), "KUBECONFIG": str(kubeconfig)}
    env.pop("GANGRUN_BACKEND", None)
    return subprocess.Popen([sys.executable, "-m", "gangrun", "--backend", "kubernetes", "-n", rc.ns, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)  # type: ignore[call-overload]


class Follow:
    """`gangrun logs -f NAME`, its lines read on a thread as they come."""

    def __init__(self, rc: RealCluster, kubeconfig: Path, name: str) -> None:
        self.proc = gangrun(rc, kubeconfig, "logs", "-f", name)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait(self, rc: RealCluster, pattern: str) -> None:
        rc.kube.wait_for(f"{pattern!r} in gangrun logs -f", lambda: any(re.search(pattern, x) for x in self.lines),
                         timeout=TIMEOUT, interval=0.3)


def steps(lines: list[str], rank: int) -> list[int]:
    return [int(m[2]) for x in lines if (m := STEP.match(x)) and int(m[1]) == rank]


def first(lines: list[str], pattern: str) -> int:
    return next(i for i, x in enumerate(lines) if re.search(pattern, x))


def test_logs_f_follows_a_preempted_gang_into_its_next_pods_and_the_gone_pods_output_is_kept(
        real_cluster: RealCluster) -> None:
    rc, kube, name, urgent = real_cluster, real_cluster.kube, "follow", "follow-urgent"
    kubeconfig = user_kubeconfig(rc)
    follow: Follow | None = None
    try:
        t0 = time.monotonic()
        submit(rc, train_task(rc, name, steps=60, resume=True))
        before = kube.wait_running_pods(rc.ns, f"{TASK_LABEL}={name}", 2, timeout=TIMEOUT)
        gone = {p["metadata"]["uid"]: p["metadata"]["name"] for p in before}
        follow = Follow(rc, kubeconfig, name)  # as a user would, while the gang runs
        for r in (0, 1):
            follow.wait(rc, rf"^\[rank {r}\] step 10: loss")
        submit(rc, train_task(rc, urgent, nodes=1, priority="high", steps=10))
        for r in (0, 1):
            follow.wait(rc, rf"^\[rank {r}\] stop requested \(.*\): saved step \d+")
        wait_phase(rc, urgent, "Succeeded")
        wait_phase(rc, name, "Succeeded")
        _, err = follow.proc.communicate(timeout=60)  # it ends with the task
        assert follow.proc.returncode == 0, err
        follow._reader.join(10)
        lines = follow.lines
        elapsed = time.monotonic() - t0

        # In order, each rank: its first run, its words at the stop, its resumed run from the step rank 0
        # saved (every rank loads the checkpoint rank 0 wrote, test_realnode_e2e.py).
        saved = re.search(r"saved step (\d+)", lines[first(lines, r"^\[rank 0\] stop requested")])
        assert saved, lines
        for r in (0, 1):
            started = first(lines, rf"^\[rank {r}\] rank {r}/2 attempt 1 restart 0: starting at step 0 ")
            stopped = first(lines, rf"^\[rank {r}\] stop requested")
            resumed = first(lines, rf"^\[rank {r}\] rank {r}/2 attempt 1 restart 0: starting at step {saved[1]} \(own\)")
            assert started < stopped < resumed, (started, stopped, resumed, lines)
            assert steps(lines, r)[-1] == 60, lines
        done = steps(lines, 0)
        assert done == sorted(set(done)), done  # rank 0 resumes at the step it stopped at: no step twice
        assert len([x for x in lines if "starting at step" in x]) == 4, lines  # no pod printed twice
        assert len([x for x in lines if re.match(r"^\[rank \d\] stop requested", x)]) == 2, lines

        # The pods Kueue deleted are gone; their output is in the task's ConfigMap, and `logs` reads it.
        assert not {p["metadata"]["uid"] for p in kube.list("Pod", rc.ns, label_selector=f"{TASK_LABEL}={name}")} & set(gone)
        cm = kube.wait_for("the preempted pods' output kept", lambda: (
            c if (c := kube.get("ConfigMap", f"{name}.gangrun-output", rc.ns))
            and set(gone) <= {p["uid"] for p in json.loads(c["data"]["index.json"])} else None), timeout=60)
        size = sum(len(v.encode()) for v in cm["data"].values())
        shown = gangrun(rc, kubeconfig, "logs", name, "--attempt", "1", "--round", "0")
        text, err = shown.communicate(timeout=60)
        assert shown.returncode == 0, err
        kept = text.splitlines()
        for r in (0, 1):
            assert first(kept, rf"^\[rank {r}\] rank {r}/2 attempt 1 restart 0: starting at step 0 ") \
                < first(kept, rf"^\[rank {r}\] stop requested") \
                < first(kept, rf"^\[rank {r}\] rank {r}/2 attempt 1 restart 0: starting at step [1-9]")
        # `logs -f` of the ended task: the kept output of the pods that are gone, then the pods still
        # there; each pod once, each rank's in the order the live follow showed them.
        again = gangrun(rc, kubeconfig, "logs", "-f", name)
        text, err = again.communicate(timeout=60)
        assert again.returncode == 0, err
        for r in (0, 1):
            starts = [x for x in lines if x.startswith(f"[rank {r}] ") and "starting at step" in x]
            assert [x for x in text.splitlines() if x.startswith(f"[rank {r}] ") and "starting at step" in x] \
                == starts, text
        print(f"\nlogs -f across a preemption: {elapsed:.1f} s; {len(lines)} lines followed; ConfigMap "
              f"{size} bytes for {len(json.loads(cm['data']['index.json']))} pods")
    finally:
        if follow is not None and follow.proc.poll() is None:
            follow.proc.kill()
        cleanup_task(rc, urgent)
        cleanup_task(rc, name)
