"""Properties of the local reconcile, driven through the controller over any sequence of what happens
to a gang (a worker exits with any code, time passes, Kueue evicts, the user cancels, a task of higher
priority arrives): once a round is done, repeated rounds with an unchanged observation produce no
action and no event, and a gang's creation is recorded once per attempt.

The controller is the real one, with its real store and twins; only its `Processes` pretends: a
worker "started" is a pid, and it exits when the sequence says so (the scenarios of test_scenarios.py
and test_timeline_once.py run the same things with real processes)."""

from __future__ import annotations

import signal
import tempfile
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangrun._backends.local import operations, shutdown
from gangrun._backends.local.config import Paths
from gangrun._backends.local.controller import Controller
from gangrun._backends.local.gang import GangTwin, Worker
from gangrun._backends.local.reconcile import CreateJobSet, DeleteJobSet, reconcile
from gangrun._backends.local.render import Launch
from gangrun._backends.local.store import Store
from gangrun._core.actions import RecordEvent
from gangrun._errors import UsageError
from tests.harness.builders import T0


class PretendProcesses:
    """Workers as pids only: started at once, signalled into a list, gone when the test says so."""

    def __init__(self) -> None:
        self.pid = 1000
        self.signals: list[tuple[tuple[int, ...], int]] = []

    def start(self, gang: GangTwin, worker: Worker, launch: Launch, env: dict[str, str]) -> tuple[int, int]:
        self.pid += 1
        return self.pid, 0

    def signal(self, pgids: Iterable[int], sig: int) -> None:
        self.signals.append((tuple(pgids), sig))

    def free_port(self) -> int:
        return 29500


def manifest(name: str, *, priority: str, retries: int, max_restarts: int) -> dict[str, Any]:
    return {"manifest": {
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
        "spec": {"nodes": 2, "command": ["true"], "resources": {"cpu": "1", "memory": "100Mi"},
                 "retries": retries, "priorityClass": priority, "terminationGracePeriod": "3s",
                 "failurePolicy": {"maxRestarts": max_restarts, "resumeAfterPreemption": True}}},
        "source": "", "cwd": "/"}


TASKS = st.sampled_from(["a", "b"])
STEPS = st.one_of(
    st.tuples(st.just("exit"), TASKS, st.integers(0, 1), st.sampled_from([0, 1, 137, 143])),
    st.tuples(st.just("advance"), st.floats(0.1, 40)),
    st.tuples(st.just("evict"), TASKS, st.sampled_from(["Preempted", "NodeFailures", "PodsReadyTimeout"])),
    st.tuples(st.just("cancel"), TASKS),
    st.tuples(st.just("submit"), st.just("b")),
)


def act(ctl: Controller, step: tuple[Any, ...], now: Any) -> Any:
    kind = step[0]
    try:
        if kind == "advance":
            now = now + timedelta(seconds=step[1])
            shutdown.kill_overdue(ctl, now)
        elif kind == "exit":
            task = ctl.tasks.get(step[1])
            g = task.gang if task else None
            if g is not None and g.workers[step[2]].running:
                operations.on_exit(ctl, step[1], g.attempt, step[2], step[3], now)
        elif kind == "evict":
            operations.evict(ctl, step[1], step[2], now)
        elif kind == "cancel":
            operations.cancel(ctl, step[1], now)
        elif kind == "submit" and step[1] not in ctl.tasks:
            operations.submit(ctl, manifest(step[1], priority="high", retries=1, max_restarts=0), now)
    except UsageError:
        pass  # nothing to evict or cancel right now: the step changes nothing
    return now


def assert_quiet(ctl: Controller, now: Any) -> None:
    """A round with nothing new: no state, no action, no event; the tick itself settled."""
    assert not ctl.dirty, "the tick gave up with tasks still changing"
    counts = {n: len(ctl.store.events(n)) for n in ctl.tasks}
    procs: PretendProcesses = ctl.effects.procs  # type: ignore[assignment]
    stops = len([s for s in procs.signals if s[1] == signal.SIGTERM])
    ctl.tick(now)
    assert {n: len(ctl.store.events(n)) for n in ctl.tasks} == counts
    # no worker is told to stop twice (a SIGKILL past the deadline is repeated until the worker is gone)
    assert len([s for s in procs.signals if s[1] == signal.SIGTERM]) == stops
    for task in ctl.tasks.values():
        assert not task.dirty
        state, actions = reconcile(task, now=now)
        assert state is None, task.name
        assert not [a for a in actions if isinstance(a, RecordEvent | CreateJobSet | DeleteJobSet)], actions


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(retries=st.integers(0, 2), max_restarts=st.integers(0, 1), steps=st.lists(STEPS, max_size=25))
def test_repeated_rounds_with_an_unchanged_observation_produce_no_action_and_no_event(
        retries: int, max_restarts: int, steps: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(Path(tmp))
        store = Store(paths.db)
        try:
            ctl = Controller(paths, store, PretendProcesses())
            operations.configure(ctl, cpu="2", memory="1Gi", gpu=0)
            now = T0
            operations.submit(ctl, manifest("a", priority="low", retries=retries, max_restarts=max_restarts), now)
            ctl.tick(now)
            assert_quiet(ctl, now)
            for step in steps:
                now = act(ctl, step, now)
                ctl.tick(now)
                assert_quiet(ctl, now)
            for name in ctl.tasks:
                created = Counter(e.attempt for e in store.events(name) if e.type.value == "GangCreated")
                assert all(n == 1 for n in created.values()), (name, created)
        finally:
            store.close()
