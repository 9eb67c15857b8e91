"""What a client reads of the local control plane, as functions of the `Controller`: a task's view
(`get`, `describe`, `wait`), every task's, the status of the local queue, the Prometheus metrics and
how many workers are still alive. None of them changes a task.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gangrun._backends.local.controller import Controller
from gangrun._backends.local.scheduler import boosts
from gangrun._backends.local.status import queue_positions
from gangrun._backends.local.status import status as status_doc
from gangrun._backends.local.task import LocalTask, unreadable_view
from gangrun._backends.local.task import view as task_view
from gangrun._core.view_types import ListedView, TaskView


def _in_order(ctl: Controller) -> list[LocalTask]:
    return sorted(ctl.tasks.values(), key=lambda t: t.seq)


def view(ctl: Controller, name: str, now: datetime) -> TaskView:
    return task_view(ctl.task(name), ctl.config, ctl.paths, now=now,
                     queue_position=_positions(ctl, now).get(name))


def views(ctl: Controller, now: datetime) -> list[ListedView]:
    """Every task's view, then one for each stored task that no longer reads (never left out)."""
    return [*readable_views(ctl, now), *(unreadable_view(name, why) for name, why in ctl.broken.items())]


def readable_views(ctl: Controller, now: datetime) -> list[TaskView]:
    positions = _positions(ctl, now)
    return [task_view(t, ctl.config, ctl.paths, now=now, queue_position=positions.get(t.name))
            for t in _in_order(ctl)]


def _positions(ctl: Controller, now: datetime) -> dict[str, int]:
    return queue_positions(ctl.tasks.values(), boosts(ctl.tasks.values(), ctl.config.boost_policy(), now=now))


def status(ctl: Controller, now: datetime) -> dict[str, Any]:
    return status_doc(_in_order(ctl), ctl.config, broken=ctl.broken, now=now)


def render_metrics(ctl: Controller, now: datetime) -> str:
    """The Prometheus exposition: the counters as they ran, the gauges from the tasks' views now."""
    ctl.metrics.observe_views(readable_views(ctl, now))
    return ctl.metrics.render()


def live_workers(ctl: Controller) -> int:
    return sum(len(t.gang.live) for t in ctl.tasks.values() if t.gang is not None)
