"""Every change appears once in the timeline: a gang whose workers take their grace period to stop
does not make the next attempt's creation repeat, round after round, until they are gone."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

from gangrun._backends.local import LocalBackend

from .conftest import checkpointed, wait_for


def test_no_event_flood_while_a_failed_gangs_last_worker_takes_its_grace_period(
        backend: LocalBackend, manifest, home: Path) -> None:
    # Rank 1 is SIGKILLed; rank 0 keeps going 4 s after its SIGTERM before it exits; a retry is left.
    backend.submit(manifest("train", nodes=2, steps=200, retries=1, grace="20s", env={"LINGER_SECONDS": "4"}))
    running = wait_for(backend, "train", checkpointed(1), what="rank 0 saved: its SIGTERM handler is installed")
    os.kill(running["gang"]["workers"][1]["pid"], signal.SIGKILL)
    second = wait_for(backend, "train", lambda v: v["attempt"] == 2 and v["gang"]["attempt"] == 2, what="attempt 2's gang")
    backend.cancel("train")
    wait_for(backend, "train", lambda v: v["phase"] == "Aborted" and not any(
        w["running"] for w in v["gang"]["workers"]), what="cancelled", after_end=True)
    events = backend.events("train")
    created = Counter(e.attempt for e in events if e.type.value == "GangCreated")
    assert created == {1: 1, 2: 1}, [(e.type.value, e.attempt, e.message) for e in events]
    ended = [e for e in events if e.type.value == "AttemptEnded"]
    assert len(ended) == 1 and ended[0].attempt == 1
    exits = [e for e in events if e.type.value == "WorkerExited"]
    assert [e.data["rank"] for e in exits] == [1]
    # attempt 2's gang is created once attempt 1's last worker is gone, after its 4 s
    gang2 = next(e for e in events if e.type.value == "GangCreated" and e.attempt == 2)
    assert (gang2.time - ended[0].time).total_seconds() >= 3
    assert second["gang"]["attempt"] == 2
    assert "still changing" not in (home / "daemon.log").read_text()
    counts = Counter((e.type.value, e.attempt, e.message) for e in events)
    assert all(n == 1 for (t, _, _), n in counts.items() if t != "CheckpointCommitted"), counts
