"""The CLI against the local backend, as a user types it: every state command with `-o json`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def manifest(tmp_path: Path, name: str, code: str, **spec) -> Path:
    doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": name},
           "spec": {"nodes": 2, "command": [sys.executable, "-c", code], "resources": {"cpu": "1", "memory": "64Mi"},
                    "terminationGracePeriod": "3s", **spec}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_run_follows_a_task_to_success_and_every_view_has_json(gangrun, tmp_path):
    code = "import os; print('hello from rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])"
    r = gangrun("run", str(manifest(tmp_path, "hello", code)))
    assert "hello: Succeeded" in r.stdout
    assert "GangStarted" in r.stdout  # the timeline is printed as it happens

    view = json.loads(gangrun("get", "hello", "-o", "json").stdout)
    assert (view["name"], view["phase"], view["attempt"]) == ("hello", "Succeeded", 1)
    assert {"phaseVersion", "reason", "userRetriesUsed", "systemRetriesUsed", "restartAttempt", "attempts"} <= set(view)
    assert json.loads(gangrun("get", "-o", "json").stdout)[0]["name"] == "hello"
    described = json.loads(gangrun("describe", "hello", "-o", "json").stdout)
    assert any(e["type"] == "Succeeded" for e in described["events"])
    events = json.loads(gangrun("events", "hello", "-o", "json").stdout)
    assert events[0]["type"] == "Submitted"
    logs = gangrun("logs", "hello", "--rank", "1").stdout
    assert "hello from rank 1 of 2" in logs and "rank 0" not in logs
    every = gangrun("logs", "hello", "--rank", "all").stdout  # as `gangrun run --rank all`
    assert "hello from rank 0 of 2" in every and "hello from rank 1 of 2" in every
    status = json.loads(gangrun("local", "status", "-o", "json").stdout)
    assert status["running"] is True and status["used"]["cpu"] == "0"
    assert "Succeeded" in gangrun("describe", "hello").stdout


def test_run_exits_1_when_the_task_fails(gangrun, tmp_path):
    r = gangrun("run", str(manifest(tmp_path, "boom", "raise SystemExit(3)")), check=False)
    assert r.returncode == 1
    assert "boom: Failed" in r.stdout


def test_user_mistakes_are_one_line_with_exit_2(gangrun, tmp_path):
    r = gangrun("submit", str(manifest(tmp_path, "lost", "pass", queue="nowhere")), check=False)
    assert r.returncode == 2 and r.stderr.startswith("gangrun: error: ") and "default" in r.stderr
    r = gangrun("get", "nobody", check=False)
    assert r.returncode == 2 and r.stderr.startswith("gangrun: error: ") and "Traceback" not in r.stderr
    assert "UsageError" not in r.stderr and r.stderr.count("\n") == 1
    r = gangrun("local", "evict", "nobody", "--reason", "Preempted", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_events_follow_prints_json_lines_until_the_task_ends(gangrun, tmp_path):
    gangrun("submit", str(manifest(tmp_path, "short", "import time; time.sleep(1)")))
    lines = gangrun("events", "short", "--follow", "-o", "json").stdout.splitlines()
    types = [json.loads(line)["type"] for line in lines]
    assert types[0] == "Submitted" and types[-1] == "Succeeded"


def test_local_up_turns_checkpoint_aware_preemption_off_and_on_and_names_a_bad_step(gangrun):
    status = json.loads(gangrun("local", "up", "-o", "json").stdout)
    assert status["priorityBoost"] is True  # on by default locally
    status = json.loads(gangrun("local", "up", "--no-priority-boost", "--boost-steps", "5,20", "-o", "json").stdout)
    assert (status["priorityBoost"], status["boostSteps"]) == (False, [5.0, 20.0])
    r = gangrun("local", "up", "--boost-steps", "20,5", check=False)
    assert r.returncode == 2 and r.stderr.startswith("gangrun: error: --boost-steps") and "Traceback" not in r.stderr
    r = gangrun("local", "up", "--boost-steps", "soon", check=False)
    assert r.returncode == 2 and "--boost-steps" in r.stderr and r.stderr.count("\n") == 1
    for never_crossed in ("nan", "5,inf"):  # a NaN step silently turned checkpoint-aware preemption off
        r = gangrun("local", "up", "--boost-steps", never_crossed, check=False)
        assert r.returncode == 2 and r.stderr.startswith("gangrun: error: --boost-steps") and r.stderr.count("\n") == 1


def test_delete_purge_of_a_deleted_task_removes_the_checkpoints_it_kept(gangrun, tmp_path):
    code = ("import gangrun; ck = gangrun.context().checkpoint; "
            "ck.save(b'x', step=1) if gangrun.context().rank == 0 else None")
    gangrun("run", str(manifest(tmp_path, "src", code)))
    root = Path(json.loads(gangrun("get", "src", "-o", "json").stdout)["checkpointRoot"])
    assert root.is_dir()
    gangrun("delete", "src")
    out = gangrun("delete", "src", "--purge").stdout
    assert out.startswith("src: no such task; removed the checkpoints deleted tasks of that name kept, at ")
    assert not root.exists()
    r = gangrun("delete", "src", "--purge", check=False)
    assert r.returncode == 2 and r.stderr.startswith('gangrun: error: unknown task "src"') and r.stderr.count("\n") == 1
    # Nothing named src is left to resume from: a manifest asking for it is refused at submit, naming the field.
    r = gangrun("submit", str(manifest(tmp_path, "end", "pass", checkpoint={"resumeFrom": "src"})), check=False)
    assert r.returncode == 2 and r.stderr.startswith('gangrun: error: spec.checkpoint.resumeFrom: no task named "src"')
    assert r.stderr.count("\n") == 1
