"""End to end on the local backend with real processes: the behaviours of docs/behaviours.md, by name."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from gangrun._backends.local import LocalBackend
from gangrun._errors import SpecError, UsageError

from .conftest import checkpointed, event_types, phase, wait_for


def resumed_from(lines: list[str]) -> list[tuple[int, int, int, str]]:
    """(attempt, restart, step, loaded_from) of every rank-0 start line."""
    out = []
    for line in lines:
        m = re.search(r"start attempt=(\d+) restart=(\d+) rank=0 resumed_from=(\d+) loaded_from=(\w+)", line)
        if m:
            out.append((int(m[1]), int(m[2]), int(m[3]), m[4]))
    return out


def conditions(view: dict, type_: str) -> dict:
    return next(c for c in view["workload"]["conditions"] if c["type"] == type_)


def test_s11_preempted_gang_resumes_from_step_6_on_attempt_1(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", nodes=2, retries=0, resume=True, priority="low"))
    wait_for(backend, "train", checkpointed(6), what="step 6 saved")
    backend.submit(manifest("urgent", nodes=1, steps=3, priority="high"))
    waiting = wait_for(backend, "train", lambda v: "waiting for re-admission" in v["reason"], what="preempted")
    assert waiting["phase"] == "Running" and waiting["attempt"] == 1
    assert "gang evicted by kueue (Preempted, InClusterQueue): Preempted to accommodate a workload" in waiting["reason"]
    wait_for(backend, "urgent", phase("Succeeded"))
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["userRetriesUsed"], done["systemRetriesUsed"], done["restartAttempt"]) == (1, 0, 0, 0)
    lines = list(backend.logs("train", rank=0))
    assert all("sdk=gangrun.checkpoint" in line for line in lines if line.startswith("start ")), lines
    starts = resumed_from(lines)
    assert starts[0] == (1, 0, 0, "None")
    attempt, restart, step, source = starts[-1]
    assert (attempt, restart, source) == (1, 0, "own") and step >= 6, starts
    # Kueue's conditions after readmission, in its words.
    evicted = conditions(done, "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("False", "QuotaReserved")
    assert evicted["message"].startswith("Previously: Preempted to accommodate a workload")
    assert (conditions(done, "Requeued")["status"], conditions(done, "Requeued")["reason"]) == ("True", "Preempted")
    events = backend.events("train")
    preempted = next(e for e in events if e.type.value == "Preempted")
    assert "preempted by task urgent" in preempted.message
    types = [e.type.value for e in events]
    for t in ("Submitted", "Admitted", "GangStarted", "WorkerReady", "CheckpointCommitted", "Preempted",
              "WaitingForReadmission", "Readmitted", "Succeeded"):
        assert t in types, (t, types)
    acct = done["accounting"]
    assert acct["preemptionsByCause"] == {"Preempted": 1}
    assert acct["waitingForReadmissionSeconds"] > 0
    assert len(acct["workLost"]) == 1 and acct["workLost"][0]["cause"] == "Preempted"
    assert 0 < acct["goodput"] <= 1
    # Both starts are restoring until the workers' first step; the readmitted gang is up once they run.
    assert types.count("FirstStep") >= 2 and "WorkersRunning" in types
    # Each names what its start loaded: nothing at first, then the step the readmitted gang resumed from.
    firsts = [e.message for e in events if e.type.value == "FirstStep" and e.message.startswith("rank 0 ")]
    assert re.fullmatch(r"rank 0 took its first step \(nothing to load: a fresh start\), [0-9.]+ s after the gang "
                        r"came up \(the task's first start\)", firsts[0]), firsts
    assert re.fullmatch(rf"rank 0 took its first step after loading step {step}, [0-9.]+ s after the gang came up",
                        firsts[-1]), firsts
    assert acct["restoringSeconds"] > 0 and acct["badputSeconds"]["restoring"] == acct["restoringSeconds"]
    assert acct["badputSeconds"]["waitingForReadmission"] > 0
    assert acct["lastCheckpoint"]["takenAt"] <= acct["lastCheckpoint"]["at"]


def test_preemption_without_resume_is_a_user_retry_and_attempt_2_resumes_from_attempt_1(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", retries=1, resume=False, priority="low"))
    wait_for(backend, "train", checkpointed(6))
    backend.submit(manifest("urgent", nodes=1, steps=3, priority="high"))
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["userRetriesUsed"], done["systemRetriesUsed"]) == (2, 1, 0)
    assert done["attempts"][0]["outcome"] == "UserRetry" and done["attempts"][0]["code"] == "GangEvicted"
    starts = resumed_from(list(backend.logs("train", rank=0, attempt=2)))
    assert starts[0][0] == 2 and starts[0][3] == "previous" and starts[0][2] >= 6, starts


def test_s11_deactivated_while_waiting_is_a_system_retry_that_resumes_from_the_newest_checkpoint(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", resume=True, priority="low"))
    wait_for(backend, "train", checkpointed(6))
    backend.submit(manifest("urgent", nodes=1, steps=200, priority="high"))
    wait_for(backend, "train", lambda v: "waiting for re-admission" in v["reason"])
    backend.deactivate("train")
    retried = wait_for(backend, "train", lambda v: v["attempt"] == 2, what="attempt 2")
    assert retried["systemRetriesUsed"] == 1 and retried["userRetriesUsed"] == 0
    assert retried["attempts"][0]["outcome"] == "SystemRetry"
    assert retried["workload"]["active"] is True  # the new attempt has a fresh, active Workload
    backend.cancel("urgent")
    done = wait_for(backend, "train", phase("Succeeded"))
    assert done["attempt"] == 2
    starts = resumed_from(list(backend.logs("train", rank=0, attempt=2)))
    assert starts[0][3] == "previous" and starts[0][2] >= 6, starts
    assert wait_for(backend, "urgent", phase("Aborted"))


def test_b10_worker_crash_restarts_the_whole_gang_inside_the_attempt_from_its_own_checkpoint(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=8, max_restarts=1, env={"CRASH_AT_STEP": "4", "CRASH_RANK": "1"}))
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["restartAttempt"], done["userRetriesUsed"]) == (1, 1, 0)
    lines = list(backend.logs("train", rank=0))
    starts = resumed_from(lines)
    # Rank 0's saves are blocking: the restarted round resumes at exactly the last step it said it saved.
    saved = [int(line.split("=")[1]) for line in lines[:lines.index(next(x for x in lines if "restart=1" in x))]
             if line.startswith("step=")]
    assert starts[-1][:2] == (1, 1) and starts[-1][3] == "own" and starts[-1][2] == saved[-1] >= 1, (starts, saved)
    types = event_types(backend, "train")
    assert "WorkerExited" in types and "GangRestarting" in types and "GangRestarted" in types
    assert done["accounting"]["workLost"][0]["cause"] == "WorkerFailed"


def test_worker_crash_with_max_restarts_0_fails_saying_the_worker_failed_and_no_restarts_are_allowed(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=8, env={"CRASH_AT_STEP": "2", "CRASH_RANK": "1"}))
    done = wait_for(backend, "train", phase("Failed"))
    assert done["code"] == "MaxRetriesExceeded"
    assert ("WorkerFailed: worker rank 1 (node 1) exited with code 3 (no restarts allowed: maxRestarts is 0)"
            in done["message"]), done["message"]
    assert "ReachedMaxRestarts" not in done["message"]  # JobSet's word for it, not what a user expects


def test_max_runtime_exceeded_ends_the_attempt(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=1000, max_runtime="1s"))
    done = wait_for(backend, "train", phase("Failed"))
    assert "MaxRuntimeExceeded" in done["message"]
    # The task fails first; its quota is released once the workers have stopped (SIGTERM, grace), as Kueue
    # releases a Workload's quota only when its pods are gone.
    wait_for(backend, "train", lambda _: backend.status()["used"]["cpu"] == "0", what="quota released",
             after_end=True)
    assert not any(w["running"] for w in backend.get("train")["gang"]["workers"])


def test_cancel_stops_every_worker_and_frees_the_quota(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=1000))
    wait_for(backend, "train", phase("Running"))
    assert backend.cancel("train") is True
    done = wait_for(backend, "train", lambda v: v["phase"] == "Aborted" and not any(
        w["running"] for w in v["gang"]["workers"]), after_end=True)
    assert done["reason"] == "cancelled by the user"
    assert backend.cancel("train") is False
    wait_for(backend, "train", lambda _: backend.status()["used"]["cpu"] == "0", what="quota released",
             after_end=True)


@pytest.mark.parametrize("reason", ["NodeFailures", "PodsReadyTimeout"])
def test_b6_injected_eviction_after_start_is_a_system_retry_that_resumes(backend: LocalBackend, manifest,
                                                                       reason: str) -> None:
    backend.submit(manifest("train", steps=12, resume=True))
    wait_for(backend, "train", checkpointed(2))
    backend.evict("train", reason)
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["userRetriesUsed"], done["systemRetriesUsed"]) == (2, 0, 1)
    assert f"({reason})" in done["attempts"][0]["reason"]
    starts = resumed_from(list(backend.logs("train", rank=0, attempt=2)))
    assert starts[0][3] == "previous" and starts[0][2] >= 2


def test_b6_injected_preemption_with_room_left_is_readmitted_in_the_same_attempt(backend: LocalBackend,
                                                                                manifest) -> None:
    backend.submit(manifest("train", steps=12, resume=True))
    wait_for(backend, "train", checkpointed(2))
    backend.evict("train", "Preempted")
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["userRetriesUsed"]) == (1, 0)
    assert "Readmitted" in event_types(backend, "train")


def test_daemon_sigkill_mid_run_loses_and_duplicates_nothing(backend: LocalBackend, manifest, home: Path) -> None:
    backend.submit(manifest("train", steps=14))
    running = wait_for(backend, "train", checkpointed(3))
    pids = [w["pid"] for w in running["gang"]["workers"]]
    os.kill(backend.status()["pid"], signal.SIGKILL)
    _wait_gone(pids)
    assert not any(_alive(p) for p in pids), "workers outlived their daemon"
    stale = backend.get("train")  # read from the store while no daemon runs
    assert stale["attempt"] == 1
    backend.up()
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["systemRetriesUsed"], done["userRetriesUsed"]) == (2, 1, 0)
    assert [v["name"] for v in backend.list()] == ["train"]
    assert "ControlPlane" in event_types(backend, "train")
    starts = resumed_from(list(backend.logs("train", rank=0, attempt=2)))
    assert starts[0][3] == "previous" and starts[0][2] >= 3


def test_bad_manifests_and_unknown_queues_are_refused_and_nothing_is_stored(backend: LocalBackend, manifest,
                                                                            tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r'spec\.queue: unknown queue "research".*default') as e:
        backend.submit(manifest("train", queue="research"))
    assert e.value.field == "spec.queue"  # the daemon's error arrives with its field
    with pytest.raises(SpecError, match=r"spec\.resources\.cpu: the gang needs 6 cpu"):
        backend.submit(manifest("big", nodes=3, cpu="2"))
    with pytest.raises(SpecError, match="spec.priorityClass: unknown priority class"):
        backend.submit(manifest("odd", priority="urgent"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: gangrun.dev/v1alpha1\nkind: ClusteredTask\nmetadata: {name: bad}\nspec: {nodes: 0}\n")
    from gangrun._manifest_file import load_manifest

    with pytest.raises(SpecError, match="spec.nodes"):
        load_manifest(bad)
    assert backend.list() == []
    assert backend.list() == []
    backend.submit(manifest("train", steps=1))
    with pytest.raises(UsageError, match="unknown task"):
        backend.get("nope")


def test_a_command_that_cannot_start_is_reported_not_retried_forever(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", command=["/nonexistent/program"]))
    done = wait_for(backend, "train", phase("Failed"))
    assert "WorkerCannotStart" in done["message"]


def test_home_and_socket_are_private(backend: LocalBackend, home: Path) -> None:
    assert home.stat().st_mode & 0o777 == 0o700
    assert Path(backend.status()["socket"]).stat().st_mode & 0o777 == 0o600


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.split(")")[-1].split()[0] != "Z"


def _wait_gone(pids: list[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_what_workers_forked_dies_too_after_a_daemon_crash(backend: LocalBackend, manifest) -> None:
    # The worker leaves a grandchild in its process group: PR_SET_PDEATHSIG does not reach it, the next
    # daemon kills it from the recorded group (the autouse fixture fails the test if it survives).
    import sys

    from .conftest import WORKER

    cmd = ["/bin/sh", "-c", f"sleep 300 & exec {sys.executable} {WORKER}"]
    backend.submit(manifest("train", steps=10, command=cmd))
    wait_for(backend, "train", checkpointed(2))
    daemon = backend.status()["pid"]
    os.kill(daemon, signal.SIGKILL)
    _wait_gone([daemon])  # its lock is free: the next daemon can take the home
    backend.up()
    wait_for(backend, "train", phase("Succeeded"))


def test_reads_answer_from_the_store_after_down(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", nodes=1, steps=1))
    done = wait_for(backend, "train", phase("Succeeded"))
    assert backend.down() is True
    assert backend.status()["running"] is False
    assert backend.get("train")["phase"] == "Succeeded"
    assert [v["name"] for v in backend.list()] == ["train"]
    assert event_types(backend, "train")[-1] == "Succeeded"
    assert backend.get("train")["attempt"] == done["attempt"]
    with pytest.raises(UsageError, match="unknown task"):
        backend.events("nope")


def test_logs_of_attempt_0_is_refused_not_taken_for_the_current_one(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", nodes=1, steps=1))
    wait_for(backend, "train", phase("Succeeded"))
    with pytest.raises(UsageError, match=r"has attempts 1\.\.1, not 0"):
        list(backend.logs("train", attempt=0))


def test_a_bad_quota_is_refused_naming_the_flag_and_changes_nothing(backend: LocalBackend) -> None:
    before = backend.status()["quota"]
    with pytest.raises(UsageError, match=r"--cpu: expected a quantity like 2, 500m or 4Gi, got 'abc'"):
        backend.up(cpu="abc")
    with pytest.raises(UsageError, match=r"--gpu: a quantity cannot be negative"):
        backend.up(gpu=-2)
    assert backend.status()["quota"] == before


def test_a_nul_byte_in_command_or_env_is_refused_by_the_daemon_naming_the_field(backend: LocalBackend,
                                                                                manifest) -> None:
    # The manifest reader refuses these too; here the daemon gets them, as from a client that skipped it.
    from dataclasses import replace

    good = manifest("train")
    bad_env = {**good.raw, "spec": {**good.raw["spec"], "env": {"BAD": "a\0b"}}}
    with pytest.raises(SpecError, match=r"spec\.env\.BAD: contains a NUL byte"):
        backend.submit(replace(good, raw=bad_env))
    bad_command = {**good.raw, "spec": {**good.raw["spec"], "command": ["/bin/echo", "a\0b"]}}
    with pytest.raises(SpecError, match=r"spec\.command\[1\]: contains a NUL byte"):
        backend.submit(replace(good, raw=bad_command))
    assert backend.list() == []
