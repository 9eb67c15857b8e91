"""`resume_from` (spec.checkpoint.resumeFrom): another task's checkpoint is loaded only when asked for,
as "previous", after every save of the task's own; any level of the layout may be named."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import gangrun
from gangrun import Checkpoint


def saves(root: Path, attempt: int, steps: list[int]) -> None:
    ck = Checkpoint.for_path(str(root), attempt=attempt)
    for s in steps:
        ck.save(f"step-{s}".encode(), step=s)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """<base>/train/<id>/...: two deleted tasks named train, the second one's checkpoints newer."""
    saves(tmp_path / "train" / "old-id", 1, [1, 2])
    saves(tmp_path / "train" / "old-id", 2, [3])
    time.sleep(0.01)
    saves(tmp_path / "train" / "new-id", 1, [7, 8])
    return tmp_path


def loads(resume_from: str, tmp_path: Path) -> tuple[Checkpoint, bytes | None]:
    ck = Checkpoint.for_path(str(tmp_path / "other" / "mine"), attempt=1, resume_from=resume_from)
    path = ck.load()
    return ck, (path.read_bytes() if path else None)


@pytest.mark.parametrize(("where", "want"), [
    pytest.param("train", b"step-8", id="a-task-name-folder-loads-the-newest-task-of-that-name"),
    pytest.param("train/old-id", b"step-3", id="a-task-root-loads-its-newest-attempt"),
    pytest.param("train/old-id/attempt-1", b"step-2", id="an-attempt-folder-loads-its-newest-save"),
    pytest.param("train/old-id/attempt-1/ckpt-000001", b"step-1", id="one-checkpoint-loads-that-checkpoint"),
])
def test_resume_from_loads_the_checkpoint_it_names_as_previous(base: Path, where: str, want: bytes, capsys) -> None:
    ck, data = loads(str(base / where), base)
    assert data == want and ck.loaded_from == "previous"
    assert ck.loaded_uri is not None and ck.loaded_uri.startswith(str(base / where))
    assert f"gangrun: loaded checkpoint from spec.checkpoint.resumeFrom {base / where}" in capsys.readouterr().err


def test_a_tasks_own_checkpoint_wins_over_resume_from(base: Path) -> None:
    saves(base / "other" / "mine", 1, [1])
    ck, data = loads(str(base / "train"), base)
    assert data == b"step-1" and ck.loaded_from == "own"


def test_resume_from_with_nothing_there_starts_fresh_and_says_where_it_looked(base: Path, capsys) -> None:
    ck, data = loads(str(base / "nothing"), base)
    assert data is None and ck.loaded_from is None
    assert f"nor at resumeFrom {base / 'nothing'}" in capsys.readouterr().err


def test_the_worker_gets_resume_from_from_its_environment(base: Path) -> None:
    root = base / "other" / "mine"
    env = {"GANGRUN_TASK": "other", "GANGRUN_ATTEMPT": "1", "GANGRUN_CHECKPOINT_PATH": f"{root}/attempt-1",
           "GANGRUN_RESUME_FROM": str(base / "train")}
    ctx = gangrun.Context.from_env(env, install_stop_handler=False)
    assert ctx.checkpoint.resume_from == str(base / "train")
    assert ctx.checkpoint.load().read_bytes() == b"step-8" and ctx.checkpoint.loaded_from == "previous"


@pytest.mark.parametrize(("where", "own", "want"), [
    pytest.param("train", False, [("train", 8)], id="found-reports-what-it-loaded"),
    pytest.param("nothing", False, [("nothing", None)], id="nothing-there-reports-a-miss"),
    pytest.param("train", True, [], id="the-tasks-own-checkpoint-reports-nothing-of-resume-from"),
])
def test_rank_0_reports_what_resume_from_gave_its_load_to_the_events_file(
        base: Path, where: str, own: bool, want: list) -> None:
    import json

    if own:
        saves(base / "other" / "mine", 1, [1])
    events_file = base / "events.jsonl"
    for rank in (0, 1):  # every rank loads; only rank 0 reports
        ck = Checkpoint.for_path(str(base / "other" / "mine"), attempt=1, resume_from=str(base / where), rank=rank,
                                 events_file=str(events_file))
        ck.load()
    lines = [json.loads(x) for x in events_file.read_text().splitlines()] if events_file.exists() else []
    reports = [d for d in lines if d["type"] == "resume_from"]
    assert [(Path(d["source"]).name, d["step"]) for d in reports] == want
    assert all(d["rank"] == 0 and (d["uri"] is None) == (d["step"] is None) for d in reports)
