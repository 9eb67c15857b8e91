"""The local backend's `get -o json` has the keys `gangrun._core.view_types` declares for it, no other,
down to its nested documents, whether the daemon answers (the controller's view) or the CLI reads the
store without one; an unreadable row is an `UnreadableView`. A key renamed in the builder or in the
types fails here (and the readers, typed by the same definitions, fail mypy)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

import pytest

from builders import T0
from gangrun import cli
from gangrun._backends.local import operations, reads
from gangrun._backends.local.config import Paths
from gangrun._backends.local.controller import Controller
from gangrun._backends.local.gang import GangTwin, Worker
from gangrun._backends.local.render import Launch
from gangrun._backends.local.store import Store
from gangrun._core.view_types import ListedView, LocalView, OfflineLocalView, TaskView, UnreadableView
from view_shape import check_shape


class PretendProcesses:
    """Workers as pids only: nothing runs, and nothing is left behind."""

    def __init__(self) -> None:
        self.pid = 1000

    def start(self, gang: GangTwin, worker: Worker, launch: Launch, env: dict[str, str]) -> tuple[int, int]:
        self.pid += 1
        return self.pid, 0

    def signal(self, pgids: Iterable[int], sig: int) -> None:
        pass

    def free_port(self) -> int:
        return 29500


def manifest(name: str, **spec: object) -> dict:
    return {"manifest": {
        "apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
        "spec": {"nodes": 2, "command": ["true"], "resources": {"cpu": "1", "memory": "100Mi"},
                 "terminationGracePeriod": "3s", "failurePolicy": {"resumeAfterPreemption": True}, **spec}},
        "source": "", "cwd": "/", "executable": "/usr/bin/true"}


@pytest.fixture
def controller(tmp_path: Path):
    (tmp_path / "home").mkdir()
    paths = Paths(tmp_path / "home")
    store = Store(paths.db)
    ctl = Controller(paths, store, PretendProcesses())
    operations.configure(ctl, cpu="4", memory="1Gi", gpu=0)
    yield ctl
    store.close()


def test_the_daemons_views_have_the_declared_keys(controller: Controller) -> None:
    ctl, now = controller, T0
    operations.submit(ctl, manifest("preempted"), now)
    operations.submit(ctl, manifest("failed", retries=1), now)
    ctl.tick(now)
    operations.evict(ctl, "preempted", "Preempted", now + timedelta(seconds=1))  # waits for re-admission: an open eviction
    for rank in (0, 1):
        operations.on_exit(ctl, "failed", 1, rank, 1, now + timedelta(seconds=2))
    now += timedelta(seconds=3)
    ctl.tick(now)
    views = {v["name"]: v for v in reads.views(ctl, now)}
    for view in views.values():
        check_shape(view, LocalView)
        check_shape(json.loads(json.dumps(view)), TaskView)  # as the daemon sends it
    assert "eviction" in views["preempted"] and views["preempted"]["gang"] is not None
    assert views["failed"]["attempts"][0]["outcome"] is not None and "retriesLeft" in views["failed"]


def test_the_clis_json_without_a_daemon_has_the_declared_keys(controller: Controller, capsys,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, now = controller, T0
    operations.submit(ctl, manifest("running"), now)
    operations.submit(ctl, manifest("broken"), now)
    ctl.tick(now)
    ctl.store.close()
    db = sqlite3.connect(ctl.paths.db)
    db.execute("UPDATE tasks SET state='{\"phase\": \"Bogus\"}' WHERE name='broken'")
    db.commit()
    db.close()
    monkeypatch.setenv("GANGRUN_HOME", str(ctl.paths.home))
    capsys.readouterr()
    assert cli.main(["get", "-o", "json"]) == 0
    listed = {v["name"]: v for v in json.loads(capsys.readouterr().out)}
    check_shape(listed["broken"], UnreadableView)
    check_shape(listed["running"], OfflineLocalView)  # its gang was up when the daemon went away
    for view in listed.values():
        check_shape(view, ListedView)
    assert cli.main(["get", "running", "-o", "json"]) == 0
    one = json.loads(capsys.readouterr().out)  # the same document (its figures count up to now)
    check_shape(one, OfflineLocalView)
    assert list(one) == list(listed["running"])
