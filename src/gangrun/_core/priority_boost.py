"""Checkpoint-aware priority: how much a gang would lose if preempted now, as a bounded priority boost.

Kueue adds the `kueue.x-k8s.io/priority-boost` annotation of a Workload to its priority wherever it
orders or chooses: the queue, the preemption candidates, and whether a candidate may be preempted at
all. Among gangs of one priority it otherwise preempts the most recently admitted, blind to what each
would lose. This module says what the boost of one gang should be; both backends use it (the
Kubernetes controller writes it onto the Workload, the local admission adds it to the priority).

    running gang   boost = the level reached by its work at risk: the node-seconds since its newest
                   committed checkpoint's state was taken (or since the gang came up, if later),
                   stepping up at each of `steps`
    waiting gang   boost = one level per time it was preempted, at most `starved_levels`, so newer
                   work of the same priority cannot keep it waiting forever
    admitted gang  never less than it had while waiting (no ping-pong between two displaced gangs)

Each gang can so be preempted by waiting work of its own priority at most `starved_levels` times.

The value is quantised: it takes one of len(steps) + 1 levels, spread evenly over the band
[low, high]. So a running gang's annotation changes only when a checkpoint commits (back to `low`) or
when its unsaved work crosses one of `steps` (at most len(steps) times between two commits): at most
len(steps) + 1 writes per checkpoint interval, and none at all while the level stays. The default
band 0..99 never lets a boosted gang reach a priority class 100 above its own.
"""

from __future__ import annotations

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
    starved_levels: int = 2  # the most levels a waiting gang gets for having been preempted

    def __post_init__(self) -> None:
        if self.high < self.low:
            raise UsageError(f"--boost-max: must be at least --boost-min ({self.low}), got {self.high}")
        if not self.steps or any(s <= 0 for s in self.steps) or list(self.steps) != sorted(set(self.steps)):
            raise UsageError(f"--boost-steps: must be positive node-seconds in increasing order, got "
                             f"{','.join(str(s) for s in self.steps) or 'none'}")
        if not 0 <= self.starved_levels <= len(self.steps):
            raise UsageError(f"--boost-starved-levels: must be from 0 to {len(self.steps)}, got {self.starved_levels}")

    def level(self, n: int) -> int:
        """The boost of level `n` (0 = `low`, len(steps) = `high`)."""
        n = max(0, min(n, len(self.steps)))
        return self.low + round((self.high - self.low) * n / len(self.steps))


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
    return Boost(policy.level(min(max(0, preemptions), policy.starved_levels)))


def gang_boost(policy: BoostPolicy, *, admitted: bool, unsaved_from: datetime | None, nodes: int,
               preemptions: int, now: datetime) -> Boost:
    """The boost of one gang's Workload now: running (admitted) or waiting for quota.

    An admitted gang keeps at least the boost it waited with: otherwise the gang it just displaced
    (now waiting, with one more preemption) would outrank it at once and take the room back."""
    floor = waiting_boost(policy, preemptions=preemptions)
    if not admitted:
        return floor
    seconds = (now - unsaved_from).total_seconds() if unsaved_from is not None else 0.0  # not up yet: nothing at risk
    r = running_boost(policy, unsaved_seconds=seconds, nodes=nodes)
    return Boost(max(r.value, floor.value), r.next_change_in)


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
