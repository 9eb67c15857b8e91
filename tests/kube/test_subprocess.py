"""`gangrun controller --kubeconfig X` as a real subprocess against a token kubeconfig (an HTTP fake API)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gangrun._backends.kube import KubeBackend
from gangrun._backends.kube.client import JOBSETS, LEASES, LOCAL_QUEUES, TASKS
from gangrun._core.spec import parse_manifest
from tests.harness.kube_builders import manifest
from tests.harness.kube_fake import FakeApi
from tests.harness.kube_http import kubeconfig, serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, fn, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_controller_subprocess_drives_a_task_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    api = FakeApi()
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    server = serve(api)
    config = kubeconfig(tmp_path / "kubeconfig", server)
    backend = KubeBackend(kubeconfig=str(config))
    backend.submit(parse_manifest(manifest()))
    health, metrics = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    proc = subprocess.Popen([sys.executable, "-m", "gangrun", "controller", "--kubeconfig", str(config),
                             "--health-port", str(health), "--metrics-port", str(metrics),
                             "--lease-namespace", "gangrun-system", "--identity", "replica-a"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait("the JobSet of attempt 1", lambda: api.obj(JOBSETS, "ml", "train-1"))
        status = _wait("the status", lambda: (api.obj(TASKS, "ml", "train") or {}).get("status"))
        assert status["attempt"] == 1
        assert api.obj(LEASES, "gangrun-system", "gangrun-controller")["spec"]["holderIdentity"] == "replica-a"
        assert backend.get("train")["attempt"] == 1
        ready = _wait("readyz", lambda: urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2).read())
        assert ready == b"ok\n"
        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=2).read().decode()
        assert "gangrun_tasks{" in page and "gangrun_reconcile_seconds_count" in page
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert api.obj(LEASES, "gangrun-system", "gangrun-controller")["spec"]["holderIdentity"] == ""  # released
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.shutdown()


def test_controller_with_an_unreadable_kubeconfig_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    out = subprocess.run([sys.executable, "-m", "gangrun", "controller", "--kubeconfig", str(bad),
                          "--health-port", "0", "--metrics-port", "0", "--no-leader-election"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
