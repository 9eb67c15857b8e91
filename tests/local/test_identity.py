"""A task never loads what it did not write: checkpoints, logs and events are keyed by the task's
identity, so a task deleted and re-created under the same name starts clean; another task's checkpoint
is loaded only when the manifest asks for it with `spec.checkpoint.resumeFrom`. Real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

import gangrun
from gangrun._backends.local import LocalBackend
from gangrun._errors import SpecError, UsageError

from .conftest import event_types, phase, wait_for
from .test_scenarios import resumed_from


def commits(b: LocalBackend, name: str) -> list[int]:
    return [e.data.get("step") for e in b.events(name) if e.type.value == "CheckpointCommitted"]


def test_a_task_never_loads_a_checkpoint_it_did_not_write_local(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", nodes=1, steps=5, step_seconds=0.05))
    old = wait_for(backend, "train", phase("Succeeded"))
    assert commits(backend, "train") == [1, 2, 3, 4, 5]
    assert backend.delete("train") is True
    assert Path(old["checkpointRoot"]).is_dir(), "delete keeps the checkpoints by default"
    assert not Path(old["logs"]).exists(), "delete removes the logs"

    backend.submit(manifest("train", nodes=1, steps=3, step_seconds=0.05))
    new = wait_for(backend, "train", phase("Succeeded"))
    assert new["uid"] != old["uid"] and new["checkpointRoot"] != old["checkpointRoot"]
    lines = list(backend.logs("train", rank=0))
    assert resumed_from(lines) == [(1, 0, 0, "None")], lines  # trains from step 0
    assert "done attempt=1 step=5" not in lines and "done attempt=1 step=3" in lines  # its own log only
    assert commits(backend, "train") == [1, 2, 3]  # its own commits only
    assert event_types(backend, "train").count("Submitted") == 1
    assert event_types(backend, "train").count("Succeeded") == 1


def test_resume_from_a_deleted_task_loads_its_newest_checkpoint_as_previous_and_purge_removes_it_local(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", nodes=1, steps=5, step_seconds=0.05))
    first = wait_for(backend, "train", phase("Succeeded"))
    backend.delete("train")

    backend.submit(manifest("train", nodes=1, steps=8, step_seconds=0.05, extra={"checkpoint": {"resumeFrom": "train"}}))
    second = wait_for(backend, "train", phase("Succeeded"))
    assert second["resumeFrom"] == "train"
    lines = list(backend.logs("train", rank=0))
    assert resumed_from(lines) == [(1, 0, 5, "previous")], lines
    assert any("loaded checkpoint from spec.checkpoint.resumeFrom" in line and first["uid"] in line
               for line in lines), lines
    created = next(e for e in backend.events("train") if e.type.value == "GangCreated")
    assert "resumes from task train's newest checkpoint" in created.message and created.data["resumeFrom"] == "train"
    assert commits(backend, "train") == [6, 7, 8]
    resumed = [e for e in backend.events("train") if e.type.value == "ResumedFrom"]
    assert len(resumed) == 1 and resumed[0].data["step"] == 5 and first["uid"] in resumed[0].data["uri"]
    assert second["resumeFromResult"] == {"found": True, "uri": resumed[0].data["uri"], "step": 5,
                                          "at": resumed[0].data["at"]}

    backend.delete("train", purge=True)
    assert not Path(second["checkpointRoot"]).exists() and not Path(second["logs"]).exists()
    assert Path(first["checkpointRoot"]).is_dir(), "purge removes the deleted task's own checkpoints only"


def test_purge_of_a_deleted_name_removes_the_checkpoints_its_tasks_kept_wherever_they_are_local(
        backend: LocalBackend, manifest, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    backend.submit(manifest("src", nodes=1, steps=2, step_seconds=0.05, extra={"checkpoint": {"uri": str(elsewhere)}}))
    first = wait_for(backend, "src", phase("Succeeded"))
    backend.delete("src")
    backend.submit(manifest("src", nodes=1, steps=2, step_seconds=0.05))
    second = wait_for(backend, "src", phase("Succeeded"))
    backend.delete("src")
    assert Path(first["checkpointRoot"]).is_dir() and Path(second["checkpointRoot"]).is_dir()

    removed = gangrun.purge_checkpoints("src", backend)
    assert first["checkpointRoot"] in removed and len(removed) == 2, removed
    assert not Path(first["checkpointRoot"]).exists() and not Path(second["checkpointRoot"]).exists()
    with pytest.raises(UsageError, match='unknown task "src"'):
        gangrun.purge_checkpoints("src", backend)  # nothing is left to purge


def test_purge_is_refused_while_a_task_resumes_from_those_checkpoints_unless_forced_local(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("src", nodes=1, steps=2, step_seconds=0.05))
    src = wait_for(backend, "src", phase("Succeeded"))
    backend.submit(manifest("end", nodes=1, steps=300, step_seconds=0.1, extra={"checkpoint": {"resumeFrom": "src"}}))
    wait_for(backend, "end", phase("Running"))
    refused = r"--purge: end has not ended and resumes from the checkpoints of src \(spec\.checkpoint\.resumeFrom\)"
    with pytest.raises(UsageError, match=refused):
        backend.delete("src", purge=True)
    assert backend.get("src")["phase"] == "Succeeded", "a refused purge deletes nothing"
    backend.delete("src")
    with pytest.raises(UsageError, match=refused):
        gangrun.purge_checkpoints("src", backend)
    assert Path(src["checkpointRoot"]).is_dir()
    assert gangrun.purge_checkpoints("src", backend, force=True) == [str(Path(src["checkpointRoot"]).parent)]
    assert not Path(src["checkpointRoot"]).exists()
    backend.cancel("end")


@pytest.mark.parametrize(("resume_from", "message"), [
    pytest.param("srcc", 'spec.checkpoint.resumeFrom: no task named "srcc" here, and no checkpoints of a deleted '
                         "task of that name under ", id="a-typo-of-a-task-name"),
    pytest.param("/nowhere/ckpt", "spec.checkpoint.resumeFrom: /nowhere/ckpt does not exist", id="a-missing-folder"),
    pytest.param("file:///nowhere/ckpt", "spec.checkpoint.resumeFrom: file:///nowhere/ckpt does not exist",
                 id="a-missing-file-uri"),
])
def test_a_resume_from_that_can_be_known_to_find_nothing_is_refused_at_submit_local(
        backend: LocalBackend, manifest, resume_from: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        backend.submit(manifest("end", nodes=1, steps=1, extra={"checkpoint": {"resumeFrom": resume_from}}))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert backend.list() == []


def test_a_resume_from_naming_a_task_that_exists_or_left_checkpoints_is_accepted_local(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("mid", nodes=1, steps=1, step_seconds=0.05))
    backend.submit(manifest("end", nodes=1, steps=1, step_seconds=0.05, extra={"checkpoint": {"resumeFrom": "mid"}}))
    wait_for(backend, "end", phase("Succeeded"))
    wait_for(backend, "mid", phase("Succeeded"))
    backend.delete("mid")  # its checkpoints are kept: a name still found
    backend.submit(manifest("last", nodes=1, steps=1, step_seconds=0.05, extra={"checkpoint": {"resumeFrom": "mid"}}))
    wait_for(backend, "last", phase("Succeeded"))


def test_a_resume_that_finds_nothing_is_a_warning_on_the_timeline_and_in_the_status_local(
        backend: LocalBackend, manifest) -> None:
    import sys

    from gangrun.cli.output import describe

    # A chain: `end` resumes from `mid`, which exists (so submit accepts it) but never saved anything.
    backend.submit(manifest("mid", nodes=1, command=[sys.executable, "-c", "pass"]))
    backend.submit(manifest("end", nodes=1, steps=2, step_seconds=0.05, extra={"checkpoint": {"resumeFrom": "mid"}}))
    done = wait_for(backend, "end", phase("Succeeded"))
    events = backend.events("end")
    warned = [e for e in events if e.type.value == "ResumeFromFoundNothing"]
    assert len(warned) == 1 and "ResumedFrom" not in [e.type.value for e in events]
    assert warned[0].message.startswith("warning: spec.checkpoint.resumeFrom ") and "starts from scratch" in warned[0].message
    assert done["resumeFromResult"] == {"found": False, "uri": None, "step": None, "at": warned[0].data["at"]}
    assert "Resumes from:   mid (WARNING: it held no complete checkpoint; the task started from scratch)" in describe(
        done, events)
