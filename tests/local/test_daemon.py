"""The daemon's process bookkeeping and request handling, without a socket or a loop."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from gangrun._backends.local import launcher, operations
from gangrun._backends.local.config import Paths
from gangrun._backends.local.daemon import Daemon
from gangrun._backends.local.gang import GangTwin
from gangrun._backends.local.render import Launch


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    d = Daemon(paths)
    yield d
    d.store.close()


def test_a_worker_the_daemon_cannot_watch_is_killed_not_left_running(daemon: Daemon, tmp_path: Path,
                                                                      monkeypatch) -> None:
    started = []

    def spawn(*args, **kwargs):
        p = launcher_spawn(*args, **kwargs)
        started.append(p)
        return p

    def no_pidfd(pid: int) -> int:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    launcher_spawn = launcher.spawn
    monkeypatch.setattr(launcher, "spawn", spawn)
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    g = GangTwin(task="train", attempt=1, nodes=1, nproc=1)
    launch = Launch(argv=["sleep", "300"], cwd=str(tmp_path), env=dict(os.environ), logs=daemon.paths.logs("train", "", 1))
    with pytest.raises(OSError, match="Too many open files"):
        daemon.start(g, g.workers[0], launch, dict(os.environ))
    (p,) = started
    left = p.poll() is None
    if left:
        p.kill()
        p.wait()
    assert not left, "the worker outlived a spawn that reported failure"


def test_a_failing_reconcile_does_not_fail_every_request(daemon: Daemon, monkeypatch) -> None:
    def broken_tick(now: datetime) -> None:
        raise RuntimeError("a bug in one reconcile")

    monkeypatch.setattr(daemon.ctl, "tick", broken_tick)
    configured = json.loads(daemon._handle(None, "configure", {"cpu": "2"}))  # a write: it ticks, and fails there
    assert configured["ok"] is True and configured["result"]["quota"]["cpu"] == "2"
    assert json.loads(daemon._handle(None, "list", {})) == {"ok": True, "result": []}


def test_a_task_whose_reconcile_fails_does_not_stall_the_others(daemon: Daemon, tmp_path: Path,
                                                                monkeypatch) -> None:
    from gangrun._backends.local import controller

    def doc(name: str) -> dict:
        return {"manifest": {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
                             "spec": {"nodes": 1, "command": ["true"], "resources": {"cpu": "100m", "memory": "1Mi"}}},
                "source": "", "cwd": str(tmp_path)}

    real = controller.reconcile

    def reconcile(task, *, now):
        if task.name == "bad":
            raise RuntimeError("a bug in one task's reconcile")
        return real(task, now=now)

    monkeypatch.setattr(controller, "reconcile", reconcile)
    for name in ("bad", "good"):  # both pending in the same tick, the broken one first
        operations.submit(daemon.ctl, doc(name), daemon.clock())
    daemon.ctl.tick(daemon.clock())
    assert daemon.ctl.tasks["good"].state.phase.value not in ("Queued", "WaitingForResources")
    assert daemon.ctl.tasks["bad"].state.phase.value == "Queued"


def test_a_workers_exit_reaches_its_gang_before_the_sweep_for_leftovers(daemon: Daemon, tmp_path: Path,
                                                                        monkeypatch) -> None:
    """A worker's exit is the gang's news first (its peers are stopped for a restart at once); the walk of
    /proc for what the worker left behind comes after, and still comes when handling the exit fails."""
    calls: list[str] = []

    def on_exit(*args: object) -> None:
        calls.append("gang")
        raise RuntimeError("a bug in handling the exit")

    monkeypatch.setattr(operations, "on_exit", on_exit)
    monkeypatch.setattr(daemon.orphans, "sweep", lambda **_: calls.append("sweep") or 0)
    g = GangTwin(task="train", attempt=1, nodes=1, nproc=1)
    launch = Launch(argv=["true"], cwd=str(tmp_path), env=dict(os.environ), logs=daemon.paths.logs("train", "", 1))
    daemon.start(g, g.workers[0], launch, dict(os.environ))
    (key, _), = daemon.sel.select(timeout=30)
    with pytest.raises(RuntimeError, match="a bug in handling the exit"):
        daemon._exited(*key.data[1:])
    assert calls == ["gang", "sweep"]
