"""`gangrun local down`, as functions of the `Controller`: every live gang is told the control plane
is stopping and stopped (`stop_all`), killed at its deadline (`kill_overdue`), and once none is left
the gangs stopped for it are stored as lost (`mark_lost_on_shutdown`), so the next daemon retries
them as a system retry (`recovery.py`).
"""

from __future__ import annotations

from datetime import datetime

from gangrun._backends.local import recovery
from gangrun._backends.local.controller import Controller
from gangrun._backends.local.gang import StopReason
from gangrun._core.timeline import Event, EventType


def stop_all(ctl: Controller, now: datetime) -> None:
    """`local down`: every live gang is stopped; the next daemon finds them lost (a system retry)."""
    now = ctl.at(now)
    for t in ctl.tasks.values():
        g = t.gang
        if g is not None and g.live:
            if g.up:
                t.record(Event(time=now, type=EventType.CONTROL_PLANE, attempt=g.attempt,
                               data={"downFrom": now.isoformat()},
                               message="the local control plane is stopping; the workers of this gang are stopped"))
            effects = g.stop(g.stopping or StopReason.DELETE, grace=t.spec.termination_grace, now=now,
                             notice=("Shutdown", "the local control plane is stopping"))
            ctl.effects.apply(t, effects, now)
    ctl.flush()


def kill_overdue(ctl: Controller, now: datetime) -> None:
    for t in ctl.tasks.values():
        if t.gang is not None:
            ctl.effects.apply(t, t.gang.kill_overdue(now=now), now)


def mark_lost_on_shutdown(ctl: Controller, now: datetime) -> None:
    """After `down`: the gangs stopped for it are lost; everything is persisted."""
    for t in ctl.tasks.values():
        g = t.gang
        if (g is not None and g.stopping is StopReason.DELETE and g.attempt == t.state.attempt
                and not t.terminal and not t.cancel_requested):
            g.stopping, g.lost, g.lost_why = None, True, recovery.STOPPED_BY_DOWN
            g.touch()
    ctl.flush()
    ctl.heartbeat(now)
