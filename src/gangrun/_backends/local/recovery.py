"""A daemon starting on the state an earlier one left: every task read back, dead workers accounted for.

`load()` reads every row (one that no longer reads is set aside with the reason, for the requests
that name it). Workers recorded as running belonged to the dead daemon and died with it: what they
forked is killed before anything starts; a stop in progress is finished (`GangTwin.workers_gone`: a
preempted gang keeps its attempt), a gang that was simply running is lost. Each such task records
that the control plane was down from the last time it was known alive (its newest heartbeat or
timeline entry) until now, which is where the gang's up time stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from gangrun._backends.local.effects import Effects
from gangrun._backends.local.store import Store
from gangrun._backends.local.task import LocalTask, read_rows
from gangrun._core.timeline import Event, EventType

log = logging.getLogger(__name__)
# How a lost gang went, completing "the gang of attempt N ..." in its attempt's reason: gangrun's own
# control plane ended it, which is not a deletion by someone else.
STOPPED_BY_DOWN = "was stopped with the local control plane (gangrun local down)"
DIED_WITH_DAEMON = "ended when the local control plane's process died"
KillLeftovers = Callable[[list[tuple[int, int]]], object]  # (pgid, start time) of every recorded worker


def load(store: Store, effects: Effects, *, now: datetime,
         kill_leftovers: KillLeftovers) -> tuple[dict[str, LocalTask], dict[str, str]]:
    """(tasks by name, unreadable rows by name → why)."""
    readable, broken = read_rows(store.rows())
    for name, why in broken.items():
        log.error("gangrun: task %s: %s", name, why)
    tasks = {t.name: t for t in readable}
    kill_leftovers([(w.pid, w.started) for t in tasks.values() if t.gang for w in t.gang.live])
    seen = store.heartbeat()
    down_from = datetime.fromisoformat(seen) if seen else None
    since = f" from {down_from.isoformat(timespec='seconds')}" if down_from else ""
    for task in tasks.values():
        g = task.gang
        if g is None or not g.live:
            continue
        data = {"downFrom": down_from.isoformat(), "downTo": now.isoformat()} if g.up and down_from else {}
        effects.apply(task, g.workers_gone(now=now), now)
        if g.lost and not g.lost_why:
            g.lost_why = DIED_WITH_DAEMON
        task.record(Event(time=now, type=EventType.CONTROL_PLANE, attempt=g.attempt, data=data,
                          message=f"the local control plane was down{since} until "
                                  f"{now.isoformat(timespec='seconds')}; the workers of this gang were gone"))
    return tasks, broken
