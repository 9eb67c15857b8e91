"""The SQLite store as the client reads it while no daemon runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangrun._backends.local.store import Store


@pytest.mark.parametrize("dirname", ["plain", "with#hash", "with?query", "with%41percent"])
def test_the_read_only_store_opens_the_file_whatever_its_path(tmp_path: Path, dirname: str) -> None:
    d = tmp_path / dirname
    d.mkdir()
    rw = Store(d / "local.db")
    rw.put_config({"queues": ["default"]})
    rw.close()
    ro = Store(d / "local.db", readonly=True)
    try:
        assert ro.config() == {"queues": ["default"]} and ro.rows() == []
    finally:
        ro.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [dirname]  # no stray database next to it
