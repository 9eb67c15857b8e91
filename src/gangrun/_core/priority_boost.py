"""Checkpoint-aware priority: how much a gang would lose if preempted now, as a bounded priority boost.

Kueue adds the `kueue.x-k8s.io/priority-boost` annotation of a Workload to its priority wherever it
orders or chooses: the queue, the preemption candidates, and whether a candidate may be preempted at
all. Among gangs of one priority it otherwise preempts the most recently admitted, blind to what each
would lose. This module says what the boost of one gang should be; both backends use it (the
Kubernetes controller writes it onto the Workload, the local admission adds it to the priority).

    waiting gang   boost = low + the number of times it was preempted, at most `starved_max`: ahead of
                   newer work of its priority in the queue, so it is not starved
    running gang   boost = a level above every waiting gang's: low + starved_max, stepping up evenly
                   to `high` at each of `steps` its work at risk crosses (the node-seconds since its
                   newest committed checkpoint, or since the gang came up if later)

A waiting gang never outranks a running gang of its own priority (the most it gets equals the least
a running gang has, and Kueue preempts only strictly lower), so the starvation boost reorders the
queue without preempting peers, and two displaced gangs cannot take the room back from each other.

The running value is quantised: one of len(steps) + 1 levels. So a running gang's annotation changes
only when a checkpoint commits (back to the bottom level) or when its unsaved work crosses one of
`steps` (at most len(steps) times between two commits): at most len(steps) + 1 writes per checkpoint
interval, none while the level stays. The default band 0..99 never lets a boosted gang reach a
priority class 100 above its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from gangrun._core.accounting import Accounting
from gangrun._core.eviction import EvictionKind
from gangrun._core.state import TaskState
from gangrun._errors import UsageError

ANNOTATION = "kueue.x-k8s.io/priority-boost"
DEFAULT_STEPS = (30.0, 120.0, 600.0, 3600.0)  # node-seconds of unsaved work


@dataclass(frozen=True, kw_only=True)
class BoostPolicy:
    """The band a cluster admin allows, and where within it the boost steps up."""

    low: int = 0
    high: int = 99
    steps: tuple[float, ...] = DEFAULT_STEPS
    starved_max: int = 3  # the most a waiting gang gets (one per preemption)

    def __post_init__(self) -> None:
        if self.high < self.low:
            raise UsageError(f"--boost-max: must be at least --boost-min ({self.low}), got {self.high}")
        # `not s > 0` and isfinite: a NaN compares false with everything, so it would pass `s <= 0` and the
        # sort, and no gang's work at risk would ever cross it (the boost silently off); inf is never crossed.
        if (not self.steps or any(not (s > 0 and math.isfinite(s)) for s in self.steps)
                or list(self.steps) != sorted(set(self.steps))):
            raise UsageError(f"--boost-steps: must be finite, positive node-seconds in increasing order, got "
                             f"{','.join(str(s) for s in self.steps) or 'none'}")
        if not 0 <= self.starved_max <= self.high - self.low:
            raise UsageError(f"--boost-starved-max: must be from 0 to --boost-max minus --boost-min "
                             f"({self.high - self.low}), got {self.starved_max}")

    def level(self, n: int) -> int:
        """The boost of a running gang at level `n` (0 = low + starved_max, len(steps) = `high`)."""
        n = max(0, min(n, len(self.steps)))
        bottom = self.low + self.starved_max
        return bottom + round((self.high - bottom) * n / len(self.steps))


@dataclass(frozen=True)
class Boost:
    value: int
    next_change_in: float | None = None  # seconds until the value would step up if nothing else happens


def running_boost(policy: BoostPolicy, *, unsaved_seconds: float, nodes: int) -> Boost:
    """The boost of an admitted gang with `unsaved_seconds` of work since its newest checkpoint."""
    nodes = max(1, nodes)
    at_risk = max(0.0, unsaved_seconds) * nodes
    crossed = sum(1 for s in policy.steps if at_risk >= s)
    ahead = policy.steps[crossed] if crossed < len(policy.steps) else None
    return Boost(policy.level(crossed), None if ahead is None else (ahead - at_risk) / nodes)


def waiting_boost(policy: BoostPolicy, *, preemptions: int) -> Boost:
    """The boost of a gang waiting for quota after having been preempted `preemptions` times."""
    return Boost(policy.low + min(max(0, preemptions), policy.starved_max))


def gang_boost(policy: BoostPolicy, *, admitted: bool, unsaved_from: datetime | None, nodes: int,
               preemptions: int, now: datetime) -> Boost:
    """The boost of one gang's Workload now: running (admitted) or waiting for quota."""
    if not admitted:
        return waiting_boost(policy, preemptions=preemptions)
    seconds = (now - unsaved_from).total_seconds() if unsaved_from is not None else 0.0  # not up yet: nothing at risk
    return running_boost(policy, unsaved_seconds=seconds, nodes=nodes)


def task_boost(policy: BoostPolicy, state: TaskState, acct: Accounting, *, admitted: bool, nodes: int,
               now: datetime) -> Boost:
    """`gang_boost` of a task as either backend holds it: its engine state and its accounting."""
    preemptions = sum(1 for e in state.evictions if e.kind is EvictionKind.PREEMPTED)
    return gang_boost(policy, admitted=admitted, unsaved_from=acct.unsaved_since(), nodes=nodes,
                      preemptions=preemptions, now=now)


def parse_annotation(value: object) -> int | None:
    """The boost a Workload carries now; None when absent or not an integer."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None
