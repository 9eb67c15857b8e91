"""The web page's timeline (B5): lanes per attempt from the view and the events, as plain values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gangrun._core.lanes import task_row, timeline

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def t(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def ev(at: float, type_: str, attempt: int | None = 1, message: str = "", **data: Any) -> dict[str, Any]:
    return {"time": t(at), "type": type_, "attempt": attempt, "message": message, **({"data": data} if data else {})}


def attempt(n: int, start: float, running: float | None, end: float | None, outcome: str | None = None) -> dict:
    return {"number": n, "startedAt": t(start), "runningAt": None if running is None else t(running),
            "endedAt": None if end is None else t(end), "outcome": outcome, "reason": outcome and f"{outcome} reason"}


def eviction(n: int, kind: str, at: float, back: float | None) -> dict:
    return {"attempt": n, "kind": kind, "reason": kind, "detail": "InClusterQueue", "message": "",
            "at": t(at), "readmittedAt": None if back is None else t(back)}


def view(attempts: list[dict], evictions: list[dict] | None = None, **extra: Any) -> dict:
    doc = {"name": "train", "phase": "Running", "reason": "running (restart attempt 0)", "attempt": len(attempts),
           "attempts": attempts, "evictionsByCause": {}, "waitingForReadmissionSeconds": 0.0, **extra}
    if evictions is not None:
        doc["evictions"] = evictions
    return doc


def kinds(lane: dict) -> list[tuple[str, str, str]]:
    return [(s["kind"], s["start"], s["end"]) for s in lane["segments"]]


def marks(lane: dict, *which: str) -> list[tuple[str, str, str]]:
    return [(m["kind"], m["at"], m["label"]) for m in lane["marks"] if m["kind"] in which]


PREEMPTED_AND_RESUMED = (
    view([attempt(1, 0, 2, 30, "Succeeded")], [eviction(1, "Preempted", 10, 20)],
         accounting={"goodput": 0.7, "workLost": [{"attempt": 1, "cause": "Preempted", "seconds": 2.0, "at": t(10)}]}),
    [ev(0, "Submitted"), ev(1, "Admitted"), ev(2, "GangStarted"), ev(8, "CheckpointCommitted", step=6),
     ev(10, "Preempted", reason="Preempted", detail="InClusterQueue", preemptor="urgent"),
     ev(10, "WaitingForReadmission"), ev(20, "Readmitted"), ev(25, "CheckpointCommitted", step=9),
     ev(30, "Succeeded")],
)


def test_s5_a_preempted_and_resumed_gang_runs_waits_and_resumes_from_its_checkpoint_on_one_lane() -> None:
    doc = timeline(*PREEMPTED_AND_RESUMED, now=T0 + timedelta(seconds=40))
    (lane,) = doc["lanes"]
    assert kinds(lane) == [("queued", t(0), t(1)), ("starting", t(1), t(2)), ("running", t(2), t(10)),
                           ("waiting", t(10), t(20)), ("running", t(20), t(30))]
    assert lane["segments"][3]["label"] == "waited 10.0s for re-admission"
    assert marks(lane, "preempted", "readmitted", "resumed", "ended") == [
        ("preempted", t(10), "preempted by urgent"), ("readmitted", t(20), "readmitted"),
        ("resumed", t(20), "resumed from step 6"), ("ended", t(30), "Succeeded")]
    assert [m["step"] for m in lane["marks"] if m["kind"] == "checkpoint"] == [6, 9]
    assert lane["lost"] == [{"start": t(8), "end": t(10), "seconds": 2.0, "cause": "Preempted"}]
    assert (doc["start"], doc["end"], doc["summary"]["goodput"], doc["summary"]["checkpoints"]) == (t(0), t(30), 0.7, 2)


def test_s4_an_eviction_that_ends_the_attempt_is_a_mark_and_the_next_attempt_resumes_from_the_earlier_one() -> None:
    doc = timeline(
        view([attempt(1, 0, 1, 10.5, "UserRetry"), attempt(2, 10.5, 12, 20, "Succeeded")],
             [eviction(1, "Preempted", 10, 10.5)]),
        [ev(1, "GangStarted"), ev(5, "CheckpointCommitted", step=4),
         ev(10, "Preempted", reason="Preempted", detail="InClusterQueue"), ev(10.5, "AttemptEnded"),
         ev(12, "GangStarted", attempt=2), ev(20, "Succeeded", attempt=2)],
        now=T0 + timedelta(seconds=30))
    first, second = doc["lanes"]
    assert kinds(first)[1:] == [("running", t(1), t(10))]  # no wait: the eviction ended the attempt
    assert marks(first, "preempted", "ended") == [("preempted", t(10), "preempted (InClusterQueue)"),
                                                  ("ended", t(10.5), "UserRetry")]
    assert marks(second, "resumed") == [("resumed", t(12), "resumed from step 4 of attempt 1")]
    assert [k for k, _, _ in kinds(second)] == ["queued", "running"]


def test_a_whole_gang_restart_is_a_restarting_span_and_the_gang_resumes_from_its_newest_checkpoint() -> None:
    doc = timeline(view([attempt(1, 0, 1, None)]),
                   [ev(1, "GangStarted"), ev(3, "CheckpointCommitted", step=2), ev(4, "WorkerExited"),
                    ev(6, "GangRestarted")], now=T0 + timedelta(seconds=9))
    (lane,) = doc["lanes"]
    assert kinds(lane)[1:] == [("running", t(1), t(4)), ("restarting", t(4), t(6)), ("running", t(6), t(9))]
    assert marks(lane, "restarted", "resumed") == [("restarted", t(6), "gang restarted"),
                                                    ("resumed", t(6), "resumed from step 2")]


@pytest.mark.parametrize(("doc", "want"), [
    pytest.param(view([attempt(1, 0, 1, None)], [eviction(1, "Preempted", 5, None)]),
                 [("queued", t(0), t(1)), ("running", t(1), t(5)), ("waiting", t(5), t(9))],
                 id="still-waiting-for-re-admission-until-now"),
    pytest.param(view([attempt(1, 0, None, None)]), [("queued", t(0), t(9))], id="never-admitted"),
    pytest.param(view([attempt(1, 0, 1, None)]), [("queued", t(0), t(1)), ("running", t(1), t(9))],
                 id="queued-until-running-without-an-admitted-event"),
])
def test_open_spans_end_now(doc: dict, want: list) -> None:
    (lane,) = timeline(doc, [], now=T0 + timedelta(seconds=9))["lanes"]
    assert kinds(lane) == want


def test_a_view_without_evictions_takes_the_wait_from_the_timeline() -> None:
    doc = timeline(view([attempt(1, 0, 1, 9, "Succeeded")]),
                   [ev(4, "Preempted", reason="Preempted"), ev(6, "Readmitted")], now=T0 + timedelta(seconds=9))
    assert [k for k, _, _ in kinds(doc["lanes"][0])] == ["queued", "running", "waiting", "running"]


@pytest.mark.parametrize(("doc", "want"), [
    pytest.param(view([attempt(1, 0, None, None)], phase="WaitingForResources", reason="waiting for gang admission",
                      pending="insufficient quota", queuePosition=2, retriesLeft=1, accounting={"goodput": 0.5}),
                 {"waiting": True, "pending": "insufficient quota", "queuePosition": 2, "retriesLeft": 1,
                  "goodput": 0.5}, id="waiting-with-kueues-message"),
    pytest.param(view([attempt(1, 0, 1, None)], reason="gang evicted by kueue (Preempted, InClusterQueue): x; "
                                                        "waiting for re-admission"),
                 {"waiting": True, "retriesLeft": None, "goodput": None}, id="waiting-for-re-admission"),
    pytest.param(view([attempt(1, 0, 1, None)], evictionsByCause={"Preempted": 2, "NodeFailures": 1}),
                 {"waiting": False, "preemptions": 3}, id="running"),
])
def test_task_row(doc: dict, want: dict) -> None:
    row = task_row(doc)
    assert {k: row[k] for k in want} == want


def test_an_elastic_gangs_running_segments_say_the_size_it_ran_at_and_each_resize_is_a_mark() -> None:
    doc = timeline(view([attempt(1, 0, 1, None)], [eviction(1, "Preempted", 5, 6)]),
                   [ev(0.5, "Admitted", nodes=4, of=4), ev(1, "GangStarted"),
                    ev(5, "Preempted", reason="Preempted", detail="InClusterQueue"), ev(6, "Readmitted"),
                    ev(6, "Resized", **{"from": 4, "to": 2, "of": 4}), ev(10, "Resized", **{"from": 2, "to": 4, "of": 4})],
                   now=T0 + timedelta(seconds=12))
    (lane,) = doc["lanes"]
    running = [(s["start"], s["end"], s["label"]) for s in lane["segments"] if s["kind"] == "running"]
    assert running == [(t(1), t(5), "gang running"), (t(6), t(10), "gang running on 2 of 4 nodes"),
                       (t(10), t(12), "gang running")]
    assert marks(lane, "resized") == [("resized", t(6), "4 → 2 nodes"), ("resized", t(10), "2 → 4 nodes")]


def test_b5_the_summary_names_the_badput_causes_and_the_step_time_for_the_page() -> None:
    from gangrun._core import badput

    doc = timeline(view([attempt(1, 0, 2, None)], accounting={"goodput": 0.5, "stepSeconds": 3.0,
                                                               "badputSeconds": {"belowFullSize": 4.0}}),
                   [ev(0, "Submitted"), ev(2, "GangStarted")], now=T0 + timedelta(seconds=10))
    summary = doc["summary"]
    assert [c["key"] for c in summary["badputCauses"]] == list(badput.KEYS)
    assert {"key": "belowFullSize", "label": "below full size"} in summary["badputCauses"]
    assert summary["stepSeconds"] == 3.0


def test_the_page_script_spells_no_badput_cause_of_its_own() -> None:
    """The page labels badput from the summary's `badputCauses`: a list of its own would drift."""
    from pathlib import Path

    import gangrun._ui

    script = (Path(gangrun._ui.__file__).parent / "static" / "app.js").read_text()
    assert "badputCauses" in script and '"waitingForReadmission"' not in script


def test_every_field_the_page_script_reads_of_a_row_or_the_summary_is_one_the_server_gives() -> None:
    """The page reads task rows (`row.x`, `t.x`) and the timeline's summary (`s.x` in showTask) by name: a
    field renamed here and not there would show a dash, so the names it reads are held to what it gets."""
    import re
    from pathlib import Path

    import gangrun._ui

    script = (Path(gangrun._ui.__file__).parent / "static" / "app.js").read_text()
    show_task = script[script.index("async function showTask"):script.index("function logsPanel")]
    row_fields = set(re.findall(r"\b(?:row|t)\.([A-Za-z]+)", script))
    summary_fields = set(re.findall(r"\bs\.([A-Za-z]+)", show_task))
    doc = timeline(*PREEMPTED_AND_RESUMED, now=T0 + timedelta(seconds=40))
    assert row_fields and row_fields <= set(task_row(PREEMPTED_AND_RESUMED[0])), row_fields
    assert summary_fields and summary_fields <= set(doc["summary"]), summary_fields - set(doc["summary"])


def test_s5_a_final_save_committed_while_waiting_is_drawn_at_the_stop_not_inside_the_wait() -> None:
    doc = timeline(
        view([attempt(1, 0, 2, 30, "Succeeded")], [eviction(1, "Preempted", 10, 20)]),
        [ev(2, "GangStarted"), ev(8, "CheckpointCommitted", step=6),
         ev(10, "Preempted", reason="Preempted", detail="InClusterQueue"),
         ev(11.5, "CheckpointCommitted", step=7), ev(20, "Readmitted"), ev(30, "Succeeded")],
        now=T0 + timedelta(seconds=40))
    (lane,) = doc["lanes"]
    saves = [(m["at"], m["label"]) for m in lane["marks"] if m["kind"] == "checkpoint"]
    assert saves == [(t(8), "step 6"), (t(10), "step 7")]
    final = next(m for m in lane["marks"] if m["kind"] == "checkpoint" and m["step"] == 7)
    assert final["committedAt"] == t(11.5)
    assert final["message"].endswith("the final save of the grace period, committed 1.5 s after the stop")
    (resumed,) = [m for m in lane["marks"] if m["kind"] == "resumed"]
    assert (resumed["at"], resumed["label"]) == (t(20), "resumed from step 7")  # what it loaded, as before
    assert resumed["checkpoint"]["at"] == t(10)  # linked to the mark where it is drawn
