"""Fixtures for gangrun.flyte: the real Flyte SDK in local mode, a private gangrun home per test.

The Flyte SDK is the optional `flyte` extra: these tests skip where it is missing, except under
CI=true, where a missing flyte is a failure (CI installs the extra), so the plugin never goes
untested unnoticed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangrun._backends.local import LocalBackend
from tests.local.conftest import no_process_left_behind  # noqa: F401  (autouse: no daemon or worker outlives a test)


def require_flyte() -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        import flyte  # noqa: F401  (CI installs the flyte extra: a missing one fails here)
    else:
        pytest.importorskip("flyte", reason="the flyte extra is not installed: pip install -e '.[flyte]'")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The local backend's state for this test: what a Flyte run submits goes there ($GANGRUN_HOME)."""
    home = tmp_path / "home"
    monkeypatch.setenv("GANGRUN_HOME", str(home))
    yield home
    LocalBackend(home).down()
