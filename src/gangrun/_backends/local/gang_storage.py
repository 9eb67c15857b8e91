"""The stored form of a `GangTwin`: the JSON a task's row keeps, so that a daemon started again goes
on with the twin the last one left (`recovery.py`).

`dump` writes every field of the twin; `load` reads it back (an optional field that is missing takes
its default, so a row an older daemon wrote still reads).
"""

from __future__ import annotations

from typing import Any

from gangrun._backends.local.gang import GangTwin, StopReason, Worker
from gangrun._core.conditions import Condition
from gangrun._core.observation import Disruption
from gangrun._core.times import time_in, time_out


def dump(g: GangTwin) -> dict[str, Any]:
    """The twin as the store keeps it."""
    return {"task": g.task, "attempt": g.attempt, "nodes": g.nodes, "nproc": g.nproc,
            "maxRestarts": g.max_restarts, "restartOnDisruption": g.restart_on_disruption,
            "suspended": g.suspended,
            "conditions": [c.for_json() for c in g.conditions], "restarts": g.restarts,
            "restartsCountTowardsMax": g.restarts_count_towards_max,
            "workers": [{"rank": w.rank, "node": w.node, "localRank": w.local_rank, "pid": w.pid,
                         "started": w.started, "running": w.running, "exitCode": w.exit_code}
                        for w in g.workers],
            "stopping": g.stopping.value if g.stopping else None, "killAt": time_out(g.kill_at),
            "port": g.port, "firstFailure": g.first_failure, "pendingFailure": g.pending_failure,
            "disruption": None if g.disruption is None else {
                "reason": g.disruption.reason, "message": g.disruption.message,
                "worker": g.disruption.worker, "restartAttempt": g.disruption.restart_attempt,
                "node": g.disrupted_node},
            "lost": g.lost, "lostWhy": g.lost_why, "eventsOffset": g.events_offset,
            "resizes": g.resizes, "resizeTo": g.resize_to}


def load(d: dict[str, Any]) -> GangTwin:
    """The twin `dump` stored."""
    return GangTwin(task=d["task"], attempt=int(d["attempt"]), nodes=int(d["nodes"]), nproc=int(d["nproc"]),
                    max_restarts=int(d.get("maxRestarts", 0)),
                    restart_on_disruption=bool(d.get("restartOnDisruption", True)), suspended=bool(d["suspended"]),
                    conditions=[Condition.from_json(c) for c in d.get("conditions", [])],
                    restarts=int(d.get("restarts", 0)),
                    restarts_count_towards_max=int(d.get("restartsCountTowardsMax", d.get("restarts", 0))),
                    workers=[Worker(rank=int(w["rank"]), node=int(w["node"]), local_rank=int(w["localRank"]),
                                    pid=int(w.get("pid", 0)), started=int(w.get("started", 0)),
                                    running=bool(w.get("running")), exit_code=w.get("exitCode"))
                             for w in d["workers"]],
                    stopping=StopReason(d["stopping"]) if d.get("stopping") else None,
                    kill_at=time_in(d.get("killAt")), port=int(d.get("port", 0)),
                    first_failure=d.get("firstFailure", ""), pending_failure=d.get("pendingFailure", ""),
                    disruption=_disruption_in(d.get("disruption")), lost=bool(d.get("lost", False)),
                    lost_why=str(d.get("lostWhy", "")),
                    disrupted_node=int((d.get("disruption") or {}).get("node", -1)),
                    events_offset=int(d.get("eventsOffset", 0)), resizes=int(d.get("resizes", 0)),
                    resize_to=int(d.get("resizeTo", 0)))


def _disruption_in(d: dict[str, Any] | None) -> Disruption | None:
    if not d:
        return None
    return Disruption(reason=str(d["reason"]), message=str(d["message"]), worker=str(d.get("worker", "")),
                      restart_attempt=int(d.get("restartAttempt", 0)))
