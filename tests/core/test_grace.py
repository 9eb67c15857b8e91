"""The grace period is checked against the final saves a gang measured (1.5 × their p95)."""

from __future__ import annotations

import pytest

from gangrun._core import grace


@pytest.mark.parametrize(("finals", "grace_seconds", "short"), [
    pytest.param([], 5.0, None, id="nothing-measured-says-nothing"),
    pytest.param([2.0], 5.0, False, id="a-grace-of-2.5-saves-fits"),
    pytest.param([4.0], 5.0, True, id="a-grace-of-1.25-saves-is-short"),
    pytest.param([3.0], 4.5, False, id="exactly-1.5-fits"),
    pytest.param([1.0] * 19 + [9.0], 5.0, False, id="one-slow-save-in-20-is-the-p95-tail-not-the-p95"),
    pytest.param([1.0] * 18 + [9.0, 9.0], 5.0, True, id="two-slow-saves-in-20-reach-the-p95"),
])
def test_a_grace_shorter_than_the_final_save_is_flagged(finals: list[float], grace_seconds: float,
                                                         short: bool | None) -> None:
    check = grace.check(finals, grace_seconds)
    assert (None if check is None else check.short) is short
    if check is not None and check.short:
        assert "spec.terminationGracePeriod" in check.message and check.for_json()["sufficient"] is False


def test_the_warning_is_given_once_when_the_check_first_turns_short() -> None:
    assert grace.newly_short([], [4.0], 5.0) is not None
    assert grace.newly_short([4.0], [4.0, 4.5], 5.0) is None  # already said
    assert grace.newly_short([1.0], [1.0, 1.2], 5.0) is None  # fits
