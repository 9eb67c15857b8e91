"""Timestamps as stored: ISO 8601 text in JSON, `datetime` (aware) in memory. The one (de)serialiser."""

from __future__ import annotations

from datetime import datetime


def time_out(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def time_in(s: str | None) -> datetime | None:
    """An ISO timestamp written by `time_out` (or by Kubernetes, ending in `Z`); None for none."""
    return datetime.fromisoformat(s.replace("Z", "+00:00")) if s else None
