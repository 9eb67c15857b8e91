"""The CLI's new commands and flags on the local backend, as a user types them: run's interleaved output,
delete (and --force), ui, and manifests with metadata.generateName."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow


def manifest(tmp_path: Path, name: str, code: str, *, generate: bool = False, **spec) -> Path:
    metadata = {"generateName": f"{name}-"} if generate else {"name": name}
    doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": metadata,
           "spec": {"nodes": 2, "command": [sys.executable, "-c", code], "image": "registry.invalid/x:1",
                    "resources": {"cpu": "500m", "memory": "64Mi"}, "terminationGracePeriod": "3s", **spec}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


HELLO = "import os; print('hello from rank', os.environ['RANK'], flush=True)"


def test_run_interleaves_rank_0_output_with_the_timeline_each_line_prefixed(gangrun, tmp_path) -> None:
    out = gangrun("run", str(manifest(tmp_path, "hello", HELLO))).stdout.splitlines()
    assert "[rank 0]  hello from rank 0" in out and not any("hello from rank 1" in line for line in out)
    assert any(line.startswith("[gangrun] ") and "GangStarted" in line for line in out)
    assert out[0] == "[gangrun] submitted hello to the local backend" and out[-1].startswith("hello: Succeeded")
    assert all(line.startswith(("[gangrun] ", "[rank 0]  ")) for line in out[:-1]), out


def test_run_rank_all_shows_every_rank_and_a_bad_rank_is_one_line(gangrun, tmp_path) -> None:
    out = gangrun("run", str(manifest(tmp_path, "every", HELLO)), "--rank", "all").stdout.splitlines()
    assert "[rank 0]  hello from rank 0" in out and "[rank 1]  hello from rank 1" in out
    r = gangrun("run", str(manifest(tmp_path, "beyond", HELLO)), "--rank", "5", check=False)
    assert r.returncode == 2 and r.stderr == 'gangrun: error: task "beyond" has ranks 0..1, not 5\n'
    r = gangrun("run", str(manifest(tmp_path, "typo", HELLO)), "--rank", "first", check=False)
    assert r.returncode == 2 and "--rank: expected a rank (0, 1, ...) or all, got 'first'" in r.stderr


def test_delete_frees_the_name_and_refuses_a_running_task_without_force(gangrun, tmp_path) -> None:
    path = manifest(tmp_path, "again", HELLO)
    gangrun("run", str(path))
    assert gangrun("delete", "again").stdout == "again: deleted (its checkpoints are kept; --purge removes them)\n"
    r = gangrun("get", "again", check=False)
    assert r.returncode == 2 and r.stderr.startswith('gangrun: error: unknown task "again"')
    assert "again: Succeeded" in gangrun("run", str(path)).stdout

    gangrun("submit", str(manifest(tmp_path, "sleepy", "import time; time.sleep(60)")))
    r = gangrun("delete", "sleepy", check=False)
    assert r.returncode == 2 and "--force" in r.stderr and r.stderr.count("\n") == 1
    assert json.loads(gangrun("delete", "sleepy", "--force", "-o", "json").stdout) == {"name": "sleepy",
                                                                                       "deleted": True}
    gangrun("run", str(path))
    assert gangrun("delete", "again", "--purge").stdout == "again: deleted with its checkpoints\n"


def test_ui_serves_the_page_and_the_tasks_until_stopped(gangrun, env, tmp_path) -> None:
    gangrun("run", str(manifest(tmp_path, "shown", HELLO)))
    # Ctrl-C is SIGINT; a suite started in the background of a script inherits SIGINT ignored, and the
    # page would then (rightly) ignore it too: give it the terminal's default.
    ui = subprocess.Popen([sys.executable, "-m", "gangrun", "ui", "--port", "0"], stdout=subprocess.PIPE, text=True,
                          env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        first = ui.stdout.readline()
        assert first.startswith("gangrun ui: http://127.0.0.1:") and "local backend" in first
        url = first.split()[2]
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "<title>gangrun</title>" in page and "/static/app.js" in page
        tasks = json.loads(urllib.request.urlopen(url + "api/tasks", timeout=10).read())
        assert [t["name"] for t in tasks["tasks"]] == ["shown"]
    finally:
        ui.send_signal(signal.SIGINT)
        try:
            assert ui.wait(timeout=10) == 130
        finally:
            ui.kill()


def test_ui_refuses_a_port_it_cannot_have(gangrun) -> None:
    r = gangrun("ui", "--port", "70000", check=False)
    assert r.returncode == 2 and "--port: must be from 0 to 65535, got 70000" in r.stderr


def test_validate_and_render_say_the_name_is_generated(gangrun, tmp_path) -> None:
    path = manifest(tmp_path, "train", HELLO, generate=True)
    assert "valid ClusteredTask with a name generated from 'train-'" in gangrun("validate", str(path)).stdout
    r = gangrun("render", str(path), "-o", "json")
    assert json.loads(r.stdout)["metadata"]["name"] == "train-xxxxx-1"
    assert r.stderr == "gangrun: the task's name is generated at submit; shown here as train-xxxxx\n"
