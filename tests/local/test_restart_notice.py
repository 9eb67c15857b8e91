"""A worker's failure stops its peers with a stop notice that says which worker failed (the local gang twin,
pure: the effects it asks the shell to carry out), never a stop of unknown cause."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gangrun._backends.local.gang import GangTwin, Signal, WriteNotice

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=20)


@pytest.mark.parametrize(("max_restarts", "cause", "says"), [
    pytest.param(1, "Restart", "worker rank 1 (node 1) exited with code 3; the whole gang restarts",
                 id="restart-left-says-restart"),
    pytest.param(0, "WorkerFailed", "worker rank 1 (node 1) exited with code 3; no restart left: the gang stops",
                 id="no-restart-left-says-worker-failed"),
])
def test_a_workers_failure_tells_its_peers_which_worker_failed(max_restarts: int, cause: str, says: str) -> None:
    g = GangTwin(task="train", attempt=1, nodes=2, nproc=1, max_restarts=max_restarts)
    g.resume(now=NOW)
    g.round_started(29500, {0: (100, 1), 1: (101, 1)}, cannot_start="", grace=GRACE, now=NOW)
    effects = g.exited(1, 3, grace=GRACE, now=NOW)
    (notice,) = [e for e in effects if isinstance(e, WriteNotice)]
    assert (notice.cause, notice.message, notice.deadline) == (cause, says, NOW + GRACE)
    (term,) = [e for e in effects if isinstance(e, Signal)]
    assert term.pgids == (100,)  # the survivor gets SIGTERM after the notice
    assert effects.index(notice) < effects.index(term)
