"""`logs --round R` (`round=`) on the local backend: each whole-gang restart round's output, kept in its
own files for as long as the task is, read alone or all rounds oldest first."""

from __future__ import annotations

import pytest

from gangrun._backends.local import LocalBackend
from gangrun._errors import UsageError

from .conftest import phase, wait_for


def test_each_round_s_output_is_kept_and_read_alone_or_in_order(backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=6, max_restarts=1, env={"CRASH_AT_STEP": "3", "CRASH_RANK": "1"}))
    assert wait_for(backend, "train", phase("Succeeded"))["restartAttempt"] == 1
    rounds = [list(backend.logs("train", rank=1, round=r)) for r in (0, 1)]
    starts = [[line for line in lines if line.startswith("start ")] for lines in rounds]
    assert starts[0][0].startswith("start attempt=1 restart=0 rank=1") and len(starts[0]) == 1
    assert starts[1][0].startswith("start attempt=1 restart=1 rank=1") and len(starts[1]) == 1
    assert not any("restart=1" in line for line in rounds[0])
    assert list(backend.logs("train", rank=1)) == rounds[0] + rounds[1]  # every round, oldest first
    both = list(backend.logs("train", round=0))
    assert {line.split("]")[0] for line in both} == {"[rank 0", "[rank 1"}
    with pytest.raises(UsageError, match=r"no output of round 2 \(rounds: 0, 1\)"):
        list(backend.logs("train", round=2))
    with pytest.raises(UsageError, match="use one or the other"):
        list(backend.logs("train", round=0, follow=True))
