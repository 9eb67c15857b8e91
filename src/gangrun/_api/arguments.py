"""The Python API's own arguments (not the manifest's): each checked once, at the call, with one error
that names the argument, instead of a TypeError or ValueError from deep inside."""

from __future__ import annotations

import math
from typing import Any

from gangrun._errors import UsageError


def _shown(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:40] + "…" + r[-10:]


def seconds(v: Any, name: str) -> float | None:
    """A timeout in seconds: None (no limit) or a number that is not NaN. Infinity means no limit."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise UsageError(f"{name}: must be a number of seconds or None, got {_shown(v)}")
    if math.isnan(v):
        raise UsageError(f"{name}: must be a number of seconds or None, got NaN")
    return float(v)


def index(v: Any, name: str, *, first: int, none_means: str) -> int | None:
    """A rank (`first` 0) or an attempt (`first` 1): a whole number, or None (`none_means` says what for)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise UsageError(f"{name}: must be a whole number (or None for {none_means}), got {_shown(v)}")
    if v < first:
        raise UsageError(f"{name}: must be >= {first}, got {v}")
    return v


def task_name(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise UsageError(f"name: must be a task's name like train, got {_shown(v)}")
    return v
