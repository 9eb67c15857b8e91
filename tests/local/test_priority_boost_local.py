"""Checkpoint-aware preemption on the local backend, with real worker processes and real checkpoints.

Two `low` gangs fill the quota: `saved` (admitted first, commits a checkpoint every step) and
`unsaved` (admitted after it, never commits). A `high` task then needs the room of one. The boost's
steps are scaled to seconds (1, 2, 4, 8 node-seconds) so that `unsaved` is past them within the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gangrun._backends.local import LocalBackend
from gangrun._core.spec import TaskSpec

from .conftest import checkpointed, phase, wait_for

STEPS = [1.0, 2.0, 4.0, 8.0]


def preempted(v: dict) -> bool:
    return sum((v["accounting"].get("preemptionsByCause") or {}).values()) > 0


def victim(b: LocalBackend, manifest: Callable[..., TaskSpec], *, boost: bool) -> str:
    b.up(cpu="2", priority_boost=boost, boost_steps=STEPS)
    b.submit(manifest("saved", nodes=1, steps=500, step_seconds=0.2, priority="low", resume=True))
    wait_for(b, "saved", checkpointed(1), what="saved committing")
    b.submit(manifest("unsaved", nodes=1, steps=500, step_seconds=0.2, priority="low", resume=True,
                      env={"CHECKPOINT_EVERY": "0"}))
    wait_for(b, "unsaved", phase("Running"))
    time.sleep(5.0)  # `unsaved` has 5 node-seconds at risk; `saved` at most one step's worth
    b.submit(manifest("urgent", nodes=1, steps=2, step_seconds=0.2, priority="high"))
    wait_for(b, "urgent", phase("Succeeded"))
    hit = [n for n in ("saved", "unsaved") if preempted(b.get(n))]
    assert len(hit) == 1, hit  # the room of one
    for n in ("saved", "unsaved"):
        b.cancel(n)
    return hit[0]


def test_the_gang_that_just_checkpointed_is_preempted_first(backend: LocalBackend, manifest) -> None:
    assert victim(backend, manifest, boost=True) == "saved"


def test_without_boosting_the_most_recently_admitted_gang_is_preempted(backend: LocalBackend, manifest) -> None:
    assert victim(backend, manifest, boost=False) == "unsaved"


def test_boosting_is_on_by_default_locally(backend: LocalBackend) -> None:
    assert backend.status()["priorityBoost"] is True
