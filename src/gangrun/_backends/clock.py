"""The one clock of both backends' shells. The core never reads a clock: the shells pass `now` in.

A `Clock` is any callable returning an aware UTC `datetime`; tests inject their own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


def utc(ts: float) -> datetime:
    """A POSIX timestamp (as the worker SDK writes them) as an aware UTC datetime."""
    return datetime.fromtimestamp(ts, UTC)
