"""The local tests' `wait_for` helper: a task that has already ended fails the wait at once, with its reason."""

from __future__ import annotations

import sys
import time

import pytest

from .conftest import checkpointed, wait_for


def test_wait_for_fails_at_once_with_the_reason_of_a_task_that_already_ended(backend, manifest) -> None:
    backend.submit(manifest("broken", nodes=1, command=[sys.executable, "-c", "raise SystemExit(3)"]))
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"broken: ended Failed \(.+\) before step 5 saved") as err:
        wait_for(backend, "broken", checkpointed(5), what="step 5 saved", timeout=90)
    assert time.monotonic() - started < 30, "the wait did not run out its 90 s timeout"
    assert "exit" in str(err.value).lower() or "3" in str(err.value), err.value
