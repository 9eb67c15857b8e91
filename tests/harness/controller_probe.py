"""The controller that benchmarks/bench_controller.py runs: `gangrun controller`'s loop with timers.

    python -m tests.harness.controller_probe OUT.json --kubeconfig KC --namespace NS [--workers 8]

Started by the benchmark, not by hand. It builds the same `Controller` that `gangrun controller
--no-leader-election --metrics-port 0 --health-port 0` builds and runs it with the same number of
workers, but its work queue and API client note, on the monotonic clock every process on the machine
shares, when each task key was queued, when a worker took it, and how long each status PATCH took.
On SIGTERM it writes one record per sync to OUT.json, so the benchmark can split "Workload evicted
-> task status" into: the controller's watch hop, queue wait, reconcile (cache reads and the pure
reconcile), the status write, and the write's way back through the API server.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from collections.abc import Hashable
from typing import Any, cast

from gangrun._backends.kube.client import TASKS, KubeApi, Resource, connect
from gangrun._backends.kube.controller import DEFAULT_WORKERS, Controller, api_connections
from gangrun._backends.kube.workqueue import WorkQueue


class TimedQueue(WorkQueue):
    """A work queue that remembers when each key was first queued since a worker last took it."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._first_add: dict[Hashable, float] = {}
        self.taken: dict[Hashable, tuple[float, float]] = {}  # key -> (queued at, taken at), per sync

    def add(self, key: Hashable) -> None:
        with self._lock:
            self._first_add.setdefault(key, time.monotonic())
        super().add(key)

    def get(self, timeout: float | None = None) -> Hashable | None:
        key = super().get(timeout)
        if key is not None:
            now = time.monotonic()
            with self._lock:
                # a key promoted from a timer (wake_at, retry backoff) never passed through add()
                self.taken[key] = (self._first_add.pop(key, now), now)
        return key


class TimedApi:
    """The controller's API client, timing every status PATCH of a ClusteredTask, and every call a
    sync makes: `calls.spent` is the calling thread's seconds per method and resource since the
    sync began (`calls.spent = {}`), so a slow sync says which request held it."""

    def __init__(self, api: KubeApi, writes: list[dict[str, Any]]) -> None:
        self._api, self._writes = api, writes
        self._last: dict[tuple[str | None, str], dict[str, Any]] = {}
        self.calls = threading.local()

    def _spent(self, what: str, started: float) -> None:
        spent = getattr(self.calls, "spent", None)
        if spent is not None:
            spent[what] = round(spent.get(what, 0.0) + time.monotonic() - started, 4)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)
        if not callable(method):
            return method

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return method(*args, **kwargs)
            finally:
                res = args[0] if args and isinstance(args[0], Resource) else None
                self._spent(f"{name} {res.plural}" if res is not None else name, started)

        return timed

    def patch(self, res: Resource, namespace: str | None, name: str, patch: dict[str, Any], *,
              subresource: str | None = None) -> Any:
        started = time.monotonic()
        try:
            out = self._api.patch(res, namespace, name, patch, subresource=subresource)
        finally:
            self._spent(f"patch {res.plural}" + (f"/{subresource}" if subresource else ""), started)
        if res is TASKS and subresource == "status":
            status = patch.get("status") or {}
            last = self._last.get((namespace, name), {})
            self._last[(namespace, name)] = status
            self._writes.append({"key": [namespace, name], "t0": started, "t1": time.monotonic(),
                                 "evictions": len(status.get("evictions") or []),
                                 "evicted": bool(status.get("eviction")), "reason": str(status.get("reason") or ""), "changed": changed(last, status)})
        return out


def changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The status fields a write changed (`accounting.x` for the accounting's), to tell writes apart."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if k in ("accounting", "elastic") and isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{x}" for x in sorted(set(a) | set(b)) if a.get(x) != b.get(x)]
        elif k == "conditions" and isinstance(a, list) and isinstance(b, list):
            before = {c.get("type"): c.get("status") for c in a}
            out += [f"conditions.{c.get('type')}" for c in b if before.get(c.get("type")) != c.get("status")]
        else:
            out.append(k)
    return out


class ProbeController(Controller):
    def __init__(self, api: KubeApi, *, namespace: str | None, queue: TimedQueue,
                 syncs: list[dict[str, Any]], writes: list[dict[str, Any]]) -> None:
        # TimedApi delegates everything else to `api`, which mypy cannot see through __getattr__
        self._timed_api = TimedApi(api, writes)
        super().__init__(cast(KubeApi, self._timed_api), namespace=namespace, queue=queue, identity="bench")
        self._timed_queue, self._syncs = queue, syncs

    def sync(self, key: Any) -> None:
        queued, taken = self._timed_queue.taken.pop(key, (time.monotonic(), time.monotonic()))
        error = ""
        self._timed_api.calls.spent = spent = {}
        try:
            super().sync(key)
        except Exception as e:
            error = type(e).__name__  # the sync is retried after a backoff: its key waits that long
            raise
        finally:
            self._syncs.append({"key": list(key), "queued": queued, "taken": taken, "done": time.monotonic(),
                                "error": error, "api": spent})
            self._timed_api.calls.spent = None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api, _ = connect(kubeconfig=args.kubeconfig, connections=api_connections(args.workers))
    syncs: list[dict[str, Any]] = []
    writes: list[dict[str, Any]] = []
    ctl = ProbeController(api, namespace=args.namespace, queue=TimedQueue(), syncs=syncs, writes=writes)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ctl.run(stop, workers=args.workers)
    with open(args.out, "w") as f:
        json.dump({"syncs": syncs, "writes": writes}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
