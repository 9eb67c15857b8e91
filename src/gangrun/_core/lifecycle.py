"""One lifecycle step of one task, the same on every backend: decide, events, what to do to the gang.

    step(spec, before, obs, *, now, cancelled=False) -> Step

A backend observes its twins or its objects (an `Observation`), calls `step`, and turns the step's
`Gang` intents into its own actions (a process group, a JobSet). Everything else a reconcile decides
lives here once:

* decide with the engine, and decide again after a RETRY so that the next attempt's CREATE comes in
  the same step (its gang does not exist yet; the state stored holds the new attempt);
* a cancel instead of a decision when the user asked for one;
* the timeline events of each transition (`transition_events`);
* the stop notice's cause, message and deadline for every stop gangrun makes (`stop_notice`): an
  attempt that ends, a cancel, a Kueue eviction, a node about to go, a worker lost with its node, a
  worker that failed;
* the accounting fold, with its grace-period warning (`fold`);
* which existing gangs are garbage (`garbage`): the rule is asked of attempt numbers, and each backend
  maps its own objects (a process group, owned JobSets) to them and back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from gangrun._core import grace, stop_causes
from gangrun._core.accounting import Accounting
from gangrun._core.engine import ActionKind, Decision, cancel, decide
from gangrun._core.observation import Gang, Observation
from gangrun._core.phases import Phase
from gangrun._core.policy import GANG_EVICTED
from gangrun._core.spec import TaskSpec
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event, EventType, transition_events

CANCELLED = "cancelled by the user"


@dataclass(frozen=True)
class Notice:
    """The stop notice the workers read at SIGTERM: why they stop, and by when they must be gone."""

    cause: str
    message: str
    deadline: datetime


@dataclass(frozen=True)
class CreateGang:
    """Create the gang of `attempt` (suspended, for Kueue to admit)."""

    attempt: int


@dataclass(frozen=True)
class DeleteGang:
    """Stop every worker of `attempt`'s gang for good, telling them `notice`."""

    attempt: int
    notice: Notice


GangIntent = CreateGang | DeleteGang


@dataclass(frozen=True)
class Part:
    """One decision of a step: the events it adds and what it asks of the gang (None: nothing)."""

    decision: Decision
    events: tuple[Event, ...]
    gang: GangIntent | None


@dataclass(frozen=True)
class Step:
    before: TaskState
    parts: tuple[Part, ...]
    # The notice for the gang running now, from the first decision: its workers are told before any
    # delete (an eviction, a node disruption and a worker's failure stop them with no delete at all).
    notice: Notice | None

    @property
    def state(self) -> TaskState:
        return self.parts[-1].decision.state

    @property
    def decided(self) -> Decision:
        """The first decision: the one about what was observed (a second one only creates a gang)."""
        return self.parts[0].decision

    @property
    def wake_at(self) -> datetime | None:
        return self.parts[-1].decision.wake_at

    @property
    def changed(self) -> bool:
        return self.state != self.before


def step(spec: TaskSpec, before: TaskState, obs: Observation, *, now: datetime, cancelled: bool = False) -> Step:
    """Decide one step for a task with `spec` in state `before`, from what its backend observed."""
    policy = spec.policy()
    if cancelled and not before.phase.terminal:
        decisions = [cancel(before, now=now, reason=CANCELLED)]
    else:
        decisions = [decide(policy, before, obs, now=now)]
        if decisions[-1].action.kind is ActionKind.RETRY:
            # The next attempt's gang does not exist yet: decide again so its CREATE is in this step.
            decisions.append(decide(policy, decisions[-1].state, Observation(), now=now))
    parts = []
    state = before
    for d in decisions:
        events = transition_events(state, d.state, d.action, now=now, resume_from=spec.resume_from)
        parts.append(Part(decision=d, events=tuple(events), gang=_gang(spec, d, now=now)))
        state = d.state
    return Step(before=before, parts=tuple(parts), notice=stop_notice(spec, decisions[0], obs.gang, now=now))


def _gang(spec: TaskSpec, d: Decision, *, now: datetime) -> GangIntent | None:
    kind, attempt = d.action.kind, d.action.attempt
    if kind is ActionKind.CREATE_GANG:
        return CreateGang(attempt)
    if kind in (ActionKind.RETRY, ActionKind.FAIL, ActionKind.ABORT):
        notice = stop_notice(spec, d, None, now=now)
        assert notice is not None, "an attempt that ends always has a notice"
        return DeleteGang(attempt, notice)
    return None  # NONE, or SUCCEED: the gang stays for its logs


def stop_notice(spec: TaskSpec, d: Decision, gang: Gang | None, *, now: datetime) -> Notice | None:
    """The notice of the stop decision `d` starts, or None when the gang goes on.

    The causes (gangrun._core.stop_causes): Aborted for a cancel; Kueue's Evicted reason when an
    eviction ends the attempt or takes the gang back; the code of the error that ends the attempt;
    NodeMaintenance for every worker when a node of the gang is about to go (with restartOnDisruption:
    the restart that follows is a disruption's, charged to nothing); NodeDisruption for the peers of a
    worker lost with its node; Restart or WorkerFailed for the
    peers of a worker that failed, as the failure policy restarts the gang or stops it.
    """
    deadline = now + spec.termination_grace
    kind = d.action.kind
    if kind is ActionKind.ABORT:
        return Notice(stop_causes.ABORTED, d.action.message or d.state.info.reason, deadline)
    if kind in (ActionKind.RETRY, ActionKind.FAIL):
        message = d.action.message or d.state.info.reason
        last = d.state.evictions[-1] if d.state.evictions else None
        if d.action.code == GANG_EVICTED and last is not None and last.attempt == d.action.attempt:
            return Notice(last.reason or last.kind.value, message, deadline)  # Kueue's word
        return Notice(d.action.code or stop_causes.ATTEMPT_ENDED, message, deadline)
    if kind is not ActionKind.NONE:
        return None
    ev = d.state.eviction
    if ev is not None:  # Kueue takes the gang back; the workers go once it suspends the gang
        return Notice(ev.reason or ev.kind.value, ev.message, ev.at + spec.termination_grace)
    if gang is not None and gang.maintenance is not None and spec.failure_policy.restart_on_disruption \
            and not gang.completed and gang.failed is None and not gang.suspended:
        # A node of the gang is about to go: every worker saves now, and the gang restarts elsewhere.
        return Notice(*stop_causes.node_maintenance(gang.maintenance.node, gang.maintenance.why), deadline)
    if gang is not None and gang.disruption is not None and gang.disruption_pending \
            and spec.failure_policy.restart_on_disruption:
        return Notice(*stop_causes.node_lost(gang.disruption.reason, gang.disruption.message), deadline)
    if gang is not None and gang.first_failure and not gang.completed:
        # A worker of this round failed: the gang restarts whole, or stops with no restart left, and its
        # peers learn which worker failed before they go.
        left = gang.restarts_count_towards_max < spec.failure_policy.max_restarts
        return Notice(*stop_causes.worker_failed(gang.first_failure, restart_left=left), deadline)
    return None


def fold(ledger: Accounting, events: Iterable[Event], *, grace_seconds: float) -> tuple[Accounting, list[Event]]:
    """The accounting with `events` applied, one by one as the timeline records them, and the
    GracePeriodTooShort warnings to record after them: one the first time a final save is measured
    longer than the grace period allows."""
    warnings: list[Event] = []
    for event in events:
        before = ledger
        ledger = ledger.apply(event)
        if ledger.final_saves != before.final_saves:
            warning = grace.newly_short(before.final_saves, ledger.final_saves, grace_seconds)
            if warning:
                warnings.append(Event(time=event.time, type=EventType.GRACE_TOO_SHORT, attempt=event.attempt,
                                      message=warning))
    return ledger, warnings


def garbage(state: TaskState, attempts: Iterable[int], *, already: Collection[int] = ()) -> list[int]:
    """Of the attempts whose gangs exist, those whose gang must go, each once and in the order given:
    every attempt but the current one (an ended attempt's gang not deleted yet, after a crash between
    the write and the action, say), and the current one too once the task failed or was aborted (a
    succeeded task's gang stays for its logs). Attempts in `already` are being deleted: not asked again."""
    keep = None if state.phase in (Phase.FAILED, Phase.ABORTED) else state.attempt
    out: list[int] = []
    for attempt in attempts:
        if attempt != keep and attempt not in already and attempt not in out:
            out.append(attempt)
    return out
