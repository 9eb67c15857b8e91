"""The torch tests skip where torch is not installed, at once, and fail instead under CI=true.

torch is the optional `torch` extra. These tests hide the installed torch from a pytest run of
tests/torch_sdk (optional_extra.py) and check what that run reports.
"""

from __future__ import annotations

from tests.harness.optional_extra import pytest_without


def test_without_torch_the_torch_tests_skip_at_once() -> None:
    r, took = pytest_without(["torch"], "tests/torch_sdk", ci=False)
    assert r.returncode in (0, 5), f"exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"  # 5: all skipped
    assert "skipped" in r.stdout and "passed" not in r.stdout and "failed" not in r.stdout, r.stdout[-3000:]
    assert "could not import 'torch'" in r.stdout, r.stdout[-3000:]
    assert took < 60, f"skipping took {took:.0f}s: something waited"


def test_under_ci_a_missing_torch_fails_the_torch_tests() -> None:
    r, _ = pytest_without(["torch"], "tests/torch_sdk", ci=True)
    assert r.returncode != 0, r.stdout[-3000:]
    assert "No module named 'torch'" in r.stdout, r.stdout[-3000:]
