"""The framework tests skip where the framework's extra is missing, and fail instead under CI=true,
where `./dev test` installs every extra: a framework path never goes untested unnoticed."""

from __future__ import annotations

import pytest

from .story import require

MISSING = "gangrun_no_such_framework"


def test_without_the_extra_a_framework_test_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require(MISSING)


def test_under_ci_a_missing_framework_fails_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(ModuleNotFoundError):
        require(MISSING)
