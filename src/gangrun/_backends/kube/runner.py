"""`gangrun controller`: connect, serve health and metrics, win the Lease, reconcile until SIGTERM.

Exit codes: 0 after SIGTERM/SIGINT (the Lease is released so a standby takes over at once), 1 when
leadership is lost (the process must not keep acting; its Deployment restarts it), 2 when it cannot
connect to the API server.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid

from gangrun._backends.kube import live_reports
from gangrun._backends.kube.client import connect
from gangrun._backends.kube.controller import DEFAULT_WORKERS, Controller, api_connections
from gangrun._backends.kube.leader import LeaderElector
from gangrun._backends.kube.metrics import Metrics, serve
from gangrun._core.priority_boost import BoostPolicy
from gangrun._errors import ApiError, UsageError

log = logging.getLogger(__name__)


def run_controller(*, kubeconfig: str | None, namespace: str | None, metrics_port: int, health_port: int,
                   leader_election: bool, lease_namespace: str, identity: str | None,
                   workers: int | None = None, boost: BoostPolicy | None = None,
                   report_period: float | None = live_reports.PERIOD) -> int:
    """Run the controller until SIGTERM. `namespace=None` watches all namespaces; a port of 0 disables it;
    `workers=None` runs DEFAULT_WORKERS; `report_period=None` polls no live checkpoint reports."""
    workers = workers or DEFAULT_WORKERS
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        api, _default_ns = connect(kubeconfig=kubeconfig, connections=api_connections(workers))
    except UsageError as e:  # a bad kubeconfig is a user error, reported in one line
        log.error("%s", e)
        return 2
    identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    lost = threading.Event()
    metrics = Metrics()
    controller = Controller(api, namespace=namespace, metrics=metrics, identity=identity, boost=boost,
                            report_period=report_period)
    elector = LeaderElector(api, namespace=lease_namespace, identity=identity) if leader_election else None
    # In a pod the probes come from the kubelet; on a workstation stay on loopback.
    host = "0.0.0.0" if os.environ.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"
    servers = []

    def healthz() -> tuple[int, str]:
        return 200, "ok\n"

    def readyz() -> tuple[int, str]:
        # A standby is ready (it is healthy and waiting); a leader is ready once its caches are synced.
        if elector is not None and not elector.is_leader:
            return 200, "standby\n"
        return (200, "ok\n") if controller.synced else (503, "caches not synced\n")

    def metrics_page() -> tuple[int, str]:
        controller.refresh_gauges()
        return 200, metrics.render()

    if health_port:
        servers.append(serve(health_port, {"/healthz": healthz, "/readyz": readyz}, host=host))
    if metrics_port:
        servers.append(serve(metrics_port, {"/metrics": metrics_page}, host=host))

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received signal %d; stopping", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    try:
        if elector is not None:
            log.info("waiting for leadership of lease %s/%s as %s", lease_namespace, elector.name, identity)
            if not elector.acquire(stop):
                return 0

            def lose() -> None:
                log.error("lost leadership; stopping")
                lost.set()
                stop.set()

            threading.Thread(target=elector.keep_renewing, args=(stop, lose), name="lease", daemon=True).start()
        log.info("controller %s watching %s", identity, f"namespace {namespace}" if namespace else "all namespaces")
        if boost is not None:
            log.info("priority boost on: %d..%d, steps at %s node-seconds of unsaved work", boost.low, boost.high,
                     ", ".join(f"{s:g}" for s in boost.steps))
        controller.run(stop, workers=workers)
    except ApiError as e:
        log.error("controller stopped: %s", e)
        return 1
    finally:
        if elector is not None and not lost.is_set():
            elector.release()
        for s in servers:
            s.shutdown()
    return 1 if lost.is_set() else 0
