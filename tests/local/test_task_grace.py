"""The local stop deadline is checked against the final saves the gang's workers report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gangrun._backends.local.task import LocalTask
from gangrun._core.spec import parse_manifest
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def task(grace: str) -> LocalTask:
    doc = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": "train"},
           "spec": {"nodes": 1, "command": ["true"], "terminationGracePeriod": grace}}
    return LocalTask(name="train", uid="u1", seq=1, doc={"manifest": doc}, spec=parse_manifest(doc), state=TaskState.new(now=T0))


def final_save(seconds: float) -> Event:
    return Event(time=T0 + timedelta(seconds=10), type=EventType.CHECKPOINT, attempt=1, message="",
                 data={"step": 1, "committedAt": T0.isoformat(), "takenAt": T0.isoformat(), "saveSeconds": seconds,
                       "final": True})


def test_a_grace_shorter_than_the_final_save_is_flagged_once_on_the_local_backend() -> None:
    t = task("2s")
    t.record(final_save(3.0))
    t.record(final_save(3.5))
    warnings = [e for e in t.events if e.type is EventType.GRACE_TOO_SHORT]
    assert len(warnings) == 1 and "at least 5s" in warnings[0].message


def test_a_grace_that_covers_the_final_saves_says_nothing() -> None:
    t = task("30s")
    t.record(final_save(3.0))
    assert [e.type for e in t.events] == [EventType.CHECKPOINT]
