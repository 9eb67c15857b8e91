"""Daemon faults (crash, restart, lost socket) and the local store: what recovery keeps and what it says."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from gangrun._backends.local import LocalBackend
from gangrun._core.spec import TaskSpec
from gangrun._errors import DaemonUnavailable, GangrunError, UsageError
from gangrun._ui.server import Pages
from gangrun.cli.output import task_rows

from .conftest import checkpointed, event_types, kill_daemon, phase, wait_for


def waiting(v: dict) -> bool:
    return "waiting for re-admission" in v["reason"]


def test_a_sigkill_in_the_grace_period_of_a_preemption_keeps_the_attempt(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=12, resume=True, env={"LINGER_SECONDS": "2"}, grace="10s"))
    wait_for(backend, "train", checkpointed(2))
    backend.evict("train", "Preempted")  # the workers take 2 s of their 10 s grace to stop
    kill_daemon(backend)
    backend.up()
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["systemRetriesUsed"], done["userRetriesUsed"]) == (1, 0, 0)
    assert done["accounting"]["preemptionsByCause"] == {"Preempted": 1}


def test_restart_rebuilds_admission_before_starting_anything(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=60, resume=True, priority="low"))
    wait_for(backend, "train", checkpointed(2))
    backend.submit(manifest("urgent", steps=25, priority="high"))
    wait_for(backend, "train", waiting)
    wait_for(backend, "urgent", phase("Running"))
    kill_daemon(backend)
    backend.up()
    # urgent's gang died with the daemon: its next attempt competes with its priority and wins again.
    wait_for(backend, "urgent", lambda v: v["attempt"] == 2 and v["phase"] == "Running")
    lost = backend.get("urgent")["attempts"][0]
    assert (lost["code"], lost["reason"].split(";")[0]) == (
        "ControlPlaneStopped", "the gang of attempt 1 ended when the local control plane's process died")
    v = backend.get("train")
    assert waiting(v) and v["accounting"]["preemptionsByCause"] == {"Preempted": 1}
    assert event_types(backend, "train").count("Admitted") == 1  # never readmitted in between
    backend.cancel("urgent")
    done = wait_for(backend, "train", phase("Succeeded"))
    assert done["attempt"] == 1 and done["accounting"]["preemptionsByCause"] == {"Preempted": 1}


def test_time_the_daemon_was_dead_is_not_gang_up_time_and_the_timeline_stays_in_order(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", nodes=1, steps=40, step_seconds=0.1))
    wait_for(backend, "train", checkpointed(5))
    up_before = backend.get("train")["accounting"]["gangUpSeconds"]
    kill_daemon(backend)
    offline = backend.get("train")
    assert offline["reason"].startswith("unknown since ") and "not running" in offline["reason"]
    assert offline["controlPlane"]["running"] is False
    time.sleep(4)
    backend.up()
    done = wait_for(backend, "train", phase("Succeeded"))
    acct = done["accounting"]
    events = backend.events("train")
    times = [e.time for e in events]
    assert times == sorted(times), [(e.time.isoformat(), e.type.value) for e in events]
    down = next(e for e in events if e.type.value == "ControlPlane")
    assert "was down from" in down.message
    down_from, down_to = (datetime.fromisoformat(down.data[k]) for k in ("downFrom", "downTo"))
    assert (down_to - down_from).total_seconds() > 3.5  # the 4 s without a daemon
    started = [e.time for e in events if e.type.value == "GangStarted"]
    ended = next(e.time for e in events if e.type.value == "Succeeded")
    up = (down_from - started[0]) + (ended - started[1])
    assert acct["gangUpSeconds"] == pytest.approx(up.total_seconds(), abs=0.01)
    assert acct["gangUpSeconds"] >= up_before
    assert acct["workLost"][0]["cause"] == "ControlPlaneDown"


def test_a_gang_stopped_by_local_down_is_said_so_not_deleted_outside_gangrun(backend: LocalBackend,
                                                                          manifest) -> None:
    backend.submit(manifest("train", nodes=1, steps=30))
    wait_for(backend, "train", checkpointed(2))
    assert backend.down() is True
    backend.up()
    v = wait_for(backend, "train", lambda v: v["attempt"] == 2)
    first = v["attempts"][0]
    assert first["code"] == "ControlPlaneStopped" and "outside gangrun" not in first["reason"]
    assert first["reason"].startswith("the gang of attempt 1 was stopped with the local control plane "
                                      "(gangrun local down)")
    assert v["systemRetriesUsed"] == 1 and v["userRetriesUsed"] == 0
    backend.cancel("train")


def test_a_removed_socket_comes_back_and_status_says_running(backend: LocalBackend) -> None:
    backend.paths.socket.unlink()
    assert backend.status()["running"] is True  # waits for the daemon to listen again (within 5 s)


def test_a_submit_retried_after_a_lost_answer_returns_the_task_it_made(backend: LocalBackend, manifest) -> None:
    spec = manifest("train", nodes=1, steps=1)
    assert backend.submit(spec) == "train"
    assert backend.submit(spec) == "train"  # the same manifest: the same task, not "already exists"
    assert [v["name"] for v in backend.list()] == ["train"]
    with pytest.raises(UsageError, match="already exists .* with a different manifest"):
        backend.submit(manifest("train", nodes=1, steps=2))


def test_a_gang_bigger_than_a_lowered_quota_says_why_it_waits(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("blocker", nodes=2, steps=200))
    wait_for(backend, "blocker", phase("Running"))
    backend.submit(manifest("train", nodes=2, steps=1))
    status = backend.up(cpu="1")
    assert "train" in status["tooBig"] and "whole local quota is 1" in status["tooBig"]["train"]
    backend.cancel("blocker")
    v = wait_for(backend, "train", lambda v: "more than the whole quota" in v["reason"])
    assert v["phase"] == "WaitingForResources" and "more than the whole quota" in v["pending"]
    backend.up(cpu="2")
    wait_for(backend, "train", phase("Succeeded"))


def test_operations_on_an_unknown_task_in_a_fresh_home_start_nothing(tmp_path: Path) -> None:
    fresh = LocalBackend(tmp_path / "home")
    for act in (lambda: fresh.cancel("nope"), lambda: fresh.evict("nope", "Preempted"),
                lambda: fresh.delete("nope")):
        with pytest.raises(UsageError, match='unknown task "nope"'):
            act()
    assert fresh.status()["running"] is False
    assert not (tmp_path / "home").exists()


def test_a_home_gangrun_did_not_create_is_refused_unless_empty(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="GANGRUN_HOME: .* gangrun did not create and it is not empty"):
        LocalBackend(theirs).up()
    assert theirs.stat().st_mode & 0o777 == 0o755  # not chmod'ed
    empty = tmp_path / "empty"
    empty.mkdir()
    b = LocalBackend(empty)
    b.up()
    b.down()


def test_a_row_that_no_longer_reads_is_listed_as_unreadable_and_the_rest_are_served(backend: LocalBackend,
                                                                                    manifest) -> None:
    for name in ("good", "bad"):
        backend.submit(manifest(name, nodes=1, steps=1))
        wait_for(backend, name, phase("Succeeded"))
    backend.down()
    db = sqlite3.connect(backend.paths.db)
    db.execute("UPDATE tasks SET spec=? WHERE name='bad'",
               ('{"manifest": {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", '
                '"metadata": {"name": "bad"}, "spec": {"nodes": 0, "command": ["x"]}}}',))
    db.commit()
    db.close()
    why = "spec.nodes: must be >= 1"

    def listed() -> None:  # by `gangrun get` and the web UI's /api/tasks alike, named with why
        views = backend.list()
        assert [(v["name"], v["phase"]) for v in views] == [("good", "Succeeded"), ("bad", "Unreadable")]
        assert why in views[1]["unreadable"] and "`gangrun delete bad` removes it" in views[1]["reason"]
        rows = Pages(backend).tasks()["tasks"]
        assert [(r["name"], r["phase"]) for r in rows] == [("good", "Succeeded"), ("bad", "Unreadable")]
        assert why in rows[1]["reason"]
        table = task_rows(views)
        assert "bad   Unreadable" in table and why in table

    listed()  # without a daemon, from the store
    backend.up()
    listed()
    with pytest.raises(UsageError, match=r'task "bad" cannot be read .*spec\.nodes: must be >= 1'):
        backend.get("bad")
    assert backend.delete("bad") is True
    backend.submit(manifest("bad", nodes=1, steps=1))  # the name is free again
    wait_for(backend, "bad", phase("Succeeded"))


def test_a_local_db_that_is_not_a_database_is_one_line_naming_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "local.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(DaemonUnavailable, match=r"local\.db cannot be read \(file is not a database\)"):
        LocalBackend(home).up()
    with pytest.raises(DaemonUnavailable, match=r"local\.db cannot be read"):
        LocalBackend(home).get("x")


def test_delete_frees_the_name_and_refuses_a_running_task_without_force(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=200))
    wait_for(backend, "train", phase("Running"))
    with pytest.raises(UsageError, match='task "train" is Running; cancel it first or use --force'):
        backend.delete("train")
    assert backend.delete("train", force=True) is True
    with pytest.raises(UsageError, match="unknown task"):
        backend.get("train")
    backend.submit(manifest("train", nodes=1, steps=1))
    done = wait_for(backend, "train", phase("Succeeded"))
    assert done["attempt"] == 1 and event_types(backend, "train")[0] == "Submitted"
    assert event_types(backend, "train").count("Submitted") == 1  # none of the old task's timeline


def test_the_daemon_serves_prometheus_metrics_with_queue_length_and_goodput(backend: LocalBackend, manifest) -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status = backend.up(metrics_port=port)
    assert status["metrics"] == f"http://127.0.0.1:{port}/metrics"
    backend.submit(manifest("train", steps=6, resume=True, priority="low"))
    wait_for(backend, "train", checkpointed(1))
    backend.submit(manifest("waiter", nodes=1, steps=1, priority="low"))
    backend.evict("train", "Preempted")
    wait_for(backend, "train", phase("Succeeded"))
    text = urllib.request.urlopen(status["metrics"], timeout=10).read().decode()
    assert 'gangrun_preemptions_total{cause="Preempted"} 1.0' in text
    assert 'gangrun_tasks{phase="Succeeded"}' in text
    assert 'gangrun_task_goodput_ratio{task="train"}' in text
    assert "gangrun_queue_pending_gangs" in text and "gangrun_reconcile_seconds_count" in text
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=10)


def test_a_submit_after_the_daemon_was_killed_waits_for_the_new_one(backend: LocalBackend, manifest) -> None:
    """16 submits in flight when the daemon dies (stopped first, so each has sent its request and waits
    for the answer): every one is answered by the daemon that comes up next, none says the dead one
    still holds the home."""
    specs = [manifest(f"t{i}", nodes=1, steps=1, step_seconds=0.01) for i in range(16)]
    old = backend.status()["pid"]
    os.kill(old, signal.SIGSTOP)
    results: dict[str, object] = {}

    def submit(spec: TaskSpec) -> None:
        try:
            results[spec.name] = LocalBackend(backend.paths.home).submit(spec)
        except GangrunError as e:
            results[spec.name] = e

    threads = [threading.Thread(target=submit, args=(s,)) for s in specs]
    for t in threads:
        t.start()
    time.sleep(1.0)  # every request connected and sent: the stopped daemon's backlog holds them
    assert not results
    os.kill(old, signal.SIGKILL)
    for t in threads:
        t.join(120)
    assert results == {s.name: s.name for s in specs}
    new = backend.status()["pid"]
    assert new != old
    assert {v["name"] for v in backend.list()} == {s.name for s in specs}


def test_a_lock_held_without_a_live_daemon_is_reported_as_it_is(tmp_path: Path) -> None:
    home = tmp_path / "home"
    b = LocalBackend(home, start_timeout=1.0)
    b.paths.ensure()
    gone = subprocess.Popen(["true"])
    gone.wait()
    with open(b.paths.lock, "a") as lock:  # this process holds the lock, as a hung daemon would
        fcntl.flock(lock, fcntl.LOCK_EX)
        b.paths.pidfile.write_text(str(gone.pid))
        with pytest.raises(DaemonUnavailable) as dead:
            b.up()
        b.paths.pidfile.write_text(str(os.getpid()))
        with pytest.raises(DaemonUnavailable) as alive:
            b.up()
    assert f"names pid {gone.pid}, which is not running" in str(dead.value)
    assert "kill" not in str(dead.value) and "fuser" in str(dead.value)
    assert f"the local control plane (pid {os.getpid()}) holds" in str(alive.value)
    assert f"kill {os.getpid()}" in str(alive.value)
