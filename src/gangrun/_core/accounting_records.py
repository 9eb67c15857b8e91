"""The records an `Accounting` keeps of a task's past (B5), and their stored forms.

A checkpoint mark (the newest commit), a stop's work lost, and the newest period the gang was up: plain
frozen values, written to and read from JSON here so that the fold in `gangrun._core.accounting` reads
as a list of transitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gangrun._core.times import time_in, time_out
from gangrun._core.view_types import CheckpointView


@dataclass(frozen=True, kw_only=True)
class CheckpointMark:
    attempt: int
    step: int | None
    at: datetime  # when it was committed
    uri: str = ""
    taken_at: datetime | None = None  # when its state was taken (save() was called); None from older workers

    @property
    def taken(self) -> datetime:
        return self.taken_at or self.at

    def for_json(self) -> CheckpointView:
        out: CheckpointView = {"attempt": self.attempt, "step": self.step, "at": self.at.isoformat(), "uri": self.uri}
        if self.taken_at is not None:
            out["takenAt"] = self.taken_at.isoformat()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckpointMark:
        return cls(attempt=int(d["attempt"]), step=d.get("step"), at=datetime.fromisoformat(d["at"]),
                   uri=d.get("uri") or "", taken_at=time_in(d.get("takenAt")))


@dataclass(frozen=True, kw_only=True)
class WorkLost:
    """One stop that threw work away: `seconds` of gang-up time since `since` (checkpoint or first step),
    at `size` of the gang's full size (an elastic gang running small loses less)."""

    attempt: int
    cause: str
    at: datetime
    since: datetime
    size: float = 1.0

    @property
    def seconds(self) -> float:
        return max(0.0, (self.at - self.since).total_seconds()) * self.size

    def for_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "cause": self.cause, "at": self.at.isoformat(),
                "since": self.since.isoformat(), "size": self.size}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkLost:
        return cls(attempt=int(d["attempt"]), cause=str(d["cause"]), at=datetime.fromisoformat(d["at"]),
                   since=datetime.fromisoformat(d["since"]), size=float(d.get("size", 1.0)))


@dataclass(frozen=True, kw_only=True)
class UpPeriod:
    """The newest period the gang was up, once it ended: a late report may still correct it."""

    attempt: int
    start: datetime
    end: datetime
    stepped: datetime | None = None
    size: float = 1.0

    def for_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "start": self.start.isoformat(), "end": self.end.isoformat(),
                "stepped": time_out(self.stepped), "size": self.size}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> UpPeriod:
        return cls(attempt=int(d["attempt"]), start=datetime.fromisoformat(d["start"]),
                   end=datetime.fromisoformat(d["end"]), stepped=time_in(d.get("stepped")),
                   size=float(d.get("size", 1.0)))


def loss_since(p: UpPeriod, ck: CheckpointMark | None) -> datetime:
    """Work of `p` is lost from its first step, or from when the newest checkpoint's state was taken."""
    since = p.stepped or p.start
    if ck is not None and ck.attempt == p.attempt and ck.taken > since:
        since = ck.taken
    return min(since, p.end)
