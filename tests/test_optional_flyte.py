"""The Flyte plugin's tests skip where the `flyte` extra is not installed, and fail instead under CI=true.

The extra brings the Flyte SDK and what it depends on (protobuf, Flyte's IDL, cloudpickle): these tests
hide them from a pytest run of tests/with_flyte (optional_extra.py) and check what that run reports. A
test module that imports one of them before it asks for Flyte errors at collection instead of skipping.
"""

from __future__ import annotations

from tests.harness.optional_extra import pytest_without

FLYTE_EXTRA = ["flyte", "flyteidl2", "google.protobuf", "cloudpickle"]


def test_without_the_flyte_extra_the_flyte_tests_skip_and_none_errors_at_collection() -> None:
    r, took = pytest_without(FLYTE_EXTRA, "tests/with_flyte", ci=False)
    assert r.returncode in (0, 5), f"exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"  # 5: all skipped
    assert "skipped" in r.stdout and "error" not in r.stdout.lower(), r.stdout[-3000:]
    assert "passed" not in r.stdout and "failed" not in r.stdout, r.stdout[-3000:]
    assert "the flyte extra is not installed" in r.stdout, r.stdout[-3000:]
    assert took < 60, f"skipping took {took:.0f}s: something waited"


def test_under_ci_a_missing_flyte_extra_fails_the_flyte_tests() -> None:
    r, _ = pytest_without(FLYTE_EXTRA, "tests/with_flyte", ci=True)
    assert r.returncode != 0, r.stdout[-3000:]
    assert "No module named 'flyte'" in r.stdout, r.stdout[-3000:]
