"""What the controller benchmark (``python -m benchmarks.bench_controller``) reads from a storm: the first time each
task was seen evicted, readmitted and running again, from the watches (:class:`Timeline`), and where the time went,
from the records of the controller it runs (:mod:`tests.harness.controller_probe`). Here and not in the
benchmark so that the tests check it (tests/kube/test_bench_probe.py) without importing a benchmark."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from tests.harness.addons import NODE_CPU
from tests.harness.client import has_condition
from tests.harness.tasks import TASK_LABEL

TASK_CPU_MILLI = 100  # per pod; a task is two pods
PODS_PER_NODE = 110  # kubelet's default, which kwok nodes declare too


class Timeline:
    """First-seen times per task, from the three watches."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.t: dict[str, dict[str, float]] = {}
        self.task_events: list[float] = []  # when each MODIFIED event of a task arrived

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
        if has_condition(obj, "Evicted", reason="Preempted"):  # ours, not a timeout
            self.mark(task, "wl_evicted", t)
        elif has_condition(obj, "QuotaReserved"):
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

    def task(self, t: float, type_: str, obj: dict) -> None:
        if type_ == "MODIFIED":
            with self.lock:
                self.task_events.append(t)
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


def nodes_needed(tasks: int) -> int:
    """kwok nodes of NODE_CPU for `tasks` two-pod tasks, by CPU (with a tenth spare, so the scheduler
    need not pack perfectly) and by the 110-pod limit; at least 4."""
    by_cpu = math.ceil(tasks * 2 * TASK_CPU_MILLI * 11 / (NODE_CPU * 1000 * 10))
    by_pods = math.ceil(tasks * 2 / (PODS_PER_NODE - 10))  # room for the preemptor's pod
    return max(4, by_cpu, by_pods)


def writes_between(tl: Timeline, probe: dict[str, Any] | None, start: float, end: float) -> int:
    """The status writes from `start` to `end`: the probe's PATCHes, else the tasks' MODIFIED events
    (a status write is one; gangrun changes nothing else on a task)."""
    if probe is not None:
        return sum(1 for w in probe["writes"] if start <= w["t0"] <= end)
    with tl.lock:
        return sum(1 for t in tl.task_events if start <= t <= end)


def eviction_write(writes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The write that recorded the eviction: the task's first with an eviction in it."""
    return next((w for w in writes if w["evictions"] >= 1), None)


def readmission_write(writes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The write that said running again: the first after the eviction's with no open eviction."""
    evicted = eviction_write(writes)
    return None if evicted is None else next(
        (w for w in writes if w["t0"] > evicted["t0"] and not w.get("evicted") and w["reason"].startswith("running (")),
        None)


def breakdown(tl: Timeline, probe: dict[str, Any], start: str, end: str,
              which: Callable[[list[dict[str, Any]]], dict[str, Any] | None]) -> dict[str, list[float]]:
    """Per task, the way from mark `start` to mark `end` (a status seen) split into stages, from the
    probe's records: the write is the one `which` picks from the task's writes in order, its sync the
    one that was running when it was sent."""
    writes: dict[str, list[dict[str, Any]]] = {}
    for w in sorted(probe["writes"], key=lambda w: w["t0"]):
        writes.setdefault(w["key"][1], []).append(w)
    syncs: dict[str, list[dict[str, Any]]] = {}
    for sy in probe["syncs"]:
        syncs.setdefault(sy["key"][1], []).append(sy)
    out: dict[str, list[float]] = {k: [] for k in STAGES}
    for task, d in tl.t.items():
        w = which(writes.get(task, []))
        if w is None or start not in d or end not in d:
            continue
        sy = next((x for x in syncs.get(task, []) if x["taken"] <= w["t0"] <= x["done"]), None)
        if sy is None:
            continue
        out["controller_watch"].append(sy["queued"] - d[start])
        out["queue_wait"].append(sy["taken"] - sy["queued"])
        out["reconcile"].append(w["t0"] - sy["taken"])
        out["api_write"].append(w["t1"] - w["t0"])
        out["write_to_watch"].append(d[end] - w["t1"])
    return out


STAGES = {"controller_watch": "the event reaches the controller's queue",
          "queue_wait": "queued -> taken by a worker (queue wait)",
          "reconcile": "taken -> status PATCH sent (reads + reconcile)",
          "api_write": "status PATCH round-trip (API write)",
          "write_to_watch": "PATCH answered -> status event seen"}
