"""What the local control plane tells about its queue: places in it, `local status`, and why a gang waits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gangrun._backends.local import admission
from gangrun._backends.local.admission import Resources
from gangrun._backends.local.config import CLUSTER_QUEUE, Config
from gangrun._backends.local.scheduler import boosts
from gangrun._backends.local.task import LocalTask


def queue_positions(tasks: Iterable[LocalTask], boost: Mapping[str, int] | None = None) -> dict[str, int]:
    """1-based place of every pending gang in its queue, in the order admission considers them (by
    priority plus `boost`, then submission)."""
    boost = boost or {}
    waiting: dict[str, list[tuple[int, int, str]]] = {}
    for t in tasks:
        wl = t.workload
        if wl is not None and not t.terminal and not wl.reserved and not wl.finished and wl.active:
            waiting.setdefault(wl.queue, []).append((-(wl.priority + boost.get(t.name, 0)), t.seq, t.name))
    out: dict[str, int] = {}
    for ranked in waiting.values():
        out.update({name: i for i, (_, _, name) in enumerate(sorted(ranked), start=1)})
    return out


def too_big(tasks: Iterable[LocalTask], quota: Resources) -> dict[str, str]:
    """Tasks still to run that can never be admitted under `quota`, and why."""
    out = {}
    for t in tasks:
        why = None if t.terminal else admission.too_big(t.spec, quota)
        if why is not None:
            out[t.name] = why[1]
    return out


def status(tasks: list[LocalTask], config: Config, *, broken: Mapping[str, str], now: datetime) -> dict[str, Any]:
    """The `gangrun local status -o json` document (tasks in submission order)."""
    used = admission.ZERO
    boost = boosts(tasks, config.boost_policy(), now=now)
    gangs = []
    positions = queue_positions(tasks, boost)
    for t in tasks:
        wl = t.workload
        if wl is None or wl.finished:
            continue
        if wl.reserved:
            used = used + Resources.from_json(wl.resources)
        state = ("Evicted" if wl.evicted and wl.reserved else "Admitted" if wl.reserved
                 else "Inactive" if not wl.active else "Pending")
        gangs.append({"task": t.name, "attempt": wl.attempt, "workload": wl.name, "state": state,
                      "priority": wl.priority, "boost": boost.get(t.name, 0), "priorityClass": wl.priority_class,
                      "queue": wl.queue,
                      "resources": wl.resources, "phase": t.state.phase.value,
                      "workers": len(t.gang.live) if t.gang else 0, "queuePosition": positions.get(t.name),
                      "pending": wl.pending_message if state == "Pending" else None})
    port = config.metrics_port
    return {"running": True, "clusterQueue": CLUSTER_QUEUE, "quota": config.quota.for_json(),
            "used": used.for_json(), "queues": list(config.queues), "priorityClasses": config.priority_classes,
            "defaultPriorityClass": config.default_priority_class, "gangs": gangs,
            "admitted": [g["task"] for g in gangs if g["state"] in ("Admitted", "Evicted")],
            "pending": [g["task"] for g in gangs if g["state"] in ("Pending", "Inactive")],
            "tooBig": too_big(tasks, config.quota), "unreadable": dict(broken),
            "metrics": f"http://127.0.0.1:{port}/metrics" if port else None,
            "priorityBoost": config.priority_boost, "boostSteps": list(config.boost_steps)}
