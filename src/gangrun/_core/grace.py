"""Whether a gang's grace period fits its final save, judged from the saves it measured.

A stopped gang gets `terminationGracePeriod` (the local stop deadline is the same) between SIGTERM
and SIGKILL to make its final save. A save that does not fit is killed half-written and the work
since the previous checkpoint is lost, so the grace period should cover the slow final saves with a
margin: at least `MARGIN` × the 95th percentile of the final saves the gang made.

    check(final_saves, grace_seconds) → GraceCheck (None until a final save was measured)
    newly_short(before, after, grace_seconds) → the warning to record once, when a check turns short
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gangrun._core.view_types import GraceView

MARGIN = 1.5
CONDITION = "GracePeriodTooShort"  # the status condition and the timeline event of a short grace period
REASON_SHORT = "FinalSaveSlowerThanGrace"
REASON_OK = "FinalSaveFits"


@dataclass(frozen=True, kw_only=True)
class GraceCheck:
    grace_seconds: float
    final_save_p95: float
    saves: int  # how many final saves were measured

    @property
    def needed(self) -> float:
        return MARGIN * self.final_save_p95

    @property
    def short(self) -> bool:
        return self.grace_seconds < self.needed

    @property
    def message(self) -> str:
        p95 = f"the p95 final save ({self.final_save_p95:.1f}s over {self.saves} saves)"
        if self.short:
            return (f"the grace period ({self.grace_seconds:g}s) is shorter than {MARGIN:g} × {p95}: a final save "
                    f"may be killed half-written; set spec.terminationGracePeriod to at least "
                    f"{math.ceil(self.needed)}s")
        return f"the grace period ({self.grace_seconds:g}s) covers {MARGIN:g} × {p95}"

    def for_json(self) -> GraceView:
        return {"gracePeriodSeconds": self.grace_seconds, "finalSaveP95Seconds": round(self.final_save_p95, 3),
                "finalSaves": self.saves, "sufficient": not self.short, "message": self.message}


def p95(values: Sequence[float]) -> float:
    """The 95th percentile by the nearest-rank method (the value itself, for a handful of saves)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def check(final_saves: Sequence[float], grace_seconds: float) -> GraceCheck | None:
    if not final_saves:
        return None
    return GraceCheck(grace_seconds=grace_seconds, final_save_p95=p95(final_saves), saves=len(final_saves))


def newly_short(before: Sequence[float], after: Sequence[float], grace_seconds: float) -> str | None:
    """The warning when the saves measured so far (`after`) first say the grace period is too short."""
    now, was = check(after, grace_seconds), check(before, grace_seconds)
    if now is None or not now.short or (was is not None and was.short):
        return None
    return now.message
