"""Task phases, their order, and the phase info the engine reports (S2)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    QUEUED = "Queued"
    WAITING_FOR_RESOURCES = "WaitingForResources"
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTED = "Aborted"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


_RANK = {
    Phase.QUEUED: 0,
    Phase.WAITING_FOR_RESOURCES: 1,
    Phase.INITIALIZING: 2,
    Phase.RUNNING: 3,
    Phase.SUCCEEDED: 4,
    Phase.FAILED: 4,
    Phase.ABORTED: 4,
}
TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.ABORTED})


@dataclass(frozen=True, kw_only=True)
class PhaseInfo:
    phase: Phase
    version: int
    reason: str

    def advance(self, phase: Phase, reason: str) -> PhaseInfo:
        """The phase info after reporting (`phase`, `reason`) on top of this one.

        Same phase and a new reason bumps the version (else the change would look like a duplicate);
        a new phase starts at version 0. The caller guarantees the phase does not move backwards.
        """
        if phase == self.phase:
            return self if reason == self.reason else PhaseInfo(phase=phase, version=self.version + 1, reason=reason)
        return PhaseInfo(phase=phase, version=0, reason=reason)
