"""`gangrun run`'s status line: it says why a task waits (its place in the queue, Kueue's message), and on a
terminal it is redrawn in place under the timeline and the workers' output."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

import gangrun
from gangrun._backends.local import LocalBackend
from gangrun.cli.follow import follow_run
from gangrun.cli.output import status_line, waiting_why

WAITING = "waiting for gang admission: waiting for quota"
PREEMPTED = "gang evicted by kueue (Preempted, InClusterQueue): room for urgent; waiting for re-admission"


def view(phase: str, reason: str, **extra) -> dict:
    return {"phase": phase, "reason": reason, "attempt": 1, "queue": "default", **extra}


@pytest.mark.parametrize(("doc", "want"), [
    pytest.param(view("WaitingForResources", WAITING, queuePosition=2, pending="insufficient unused quota for cpu"),
                 "#2 in queue default: insufficient unused quota for cpu", id="place-and-kueues-message"),
    pytest.param(view("WaitingForResources", WAITING, queuePosition=None, pending="insufficient unused quota"),
                 "insufficient unused quota", id="no-visibility-api-the-message-alone"),
    pytest.param(view("Queued", "task submitted"), "task submitted", id="no-message-yet-gangruns-reason"),
    pytest.param(view("Running", PREEMPTED, queuePosition=1), f"#1 in queue default: {PREEMPTED}",
                 id="preempted-and-waiting-for-re-admission"),
    pytest.param(view("Running", "running (restart attempt 0)", queuePosition=None), "", id="running-is-not-waiting"),
    pytest.param(view("Succeeded", "all workers succeeded"), "", id="ended"),
])
def test_waiting_why(doc: dict, want: str) -> None:
    assert waiting_why(doc) == want


def test_the_status_line_fits_its_width_and_keeps_both_ends_of_the_reason() -> None:
    doc = view("WaitingForResources", WAITING, queuePosition=3, pending="x" * 300 + " the end")
    line = status_line(doc, elapsed=75, width=100)
    assert line.startswith("[01:15] WaitingForResources  attempt 1  #3 in queue default: xxx")
    assert len(line) <= 100 and line.endswith("the end") and "…" in line


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.slow
def test_on_a_terminal_a_waiting_task_shows_its_place_in_the_queue_then_its_output(tmp_path: Path) -> None:
    home = tmp_path / "home"
    local = LocalBackend(home)
    local.up(cpu="1", memory="1Gi")
    try:
        def task(name: str, seconds: float) -> gangrun.ClusteredTask:
            code = f"import time; time.sleep({seconds}); print('{name} done', flush=True)"
            return gangrun.ClusteredTask(name=name, nodes=1, command=[sys.executable, "-c", code],
                                         resources={"cpu": "1", "memory": "64Mi"}, termination_grace_period="1s")

        gangrun.submit(task("first", 3), home=home)
        second = gangrun.submit(task("second", 0), home=home)
        out = Terminal()
        final = follow_run(second, rank=0, stream=out)
        text = out.getvalue()
        assert final["phase"] == "Succeeded"
        assert "\r\x1b[K[00:0" in text and "WaitingForResources  attempt 1  #1 in queue default: waiting for quota" in text
        assert "[rank 0]  second done\n" in text and text.endswith("second: Succeeded — all workers succeeded\n")
    finally:
        local.down()


def test_describe_says_why_a_task_waits_and_the_retries_left() -> None:
    from gangrun.cli.output import describe

    doc = {**view("WaitingForResources", WAITING, queuePosition=2, pending="insufficient quota"), "name": "t",
           "phaseVersion": 0, "restartAttempt": 0, "userRetriesUsed": 1, "systemRetriesUsed": 0, "retriesLeft": 2,
           "attempts": []}
    text = describe(doc, [])
    assert "Waiting:        #2 in queue default: insufficient quota" in text
    assert "Retries used:   user 1, system 0 (2 user retries left)" in text
