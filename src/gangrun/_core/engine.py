"""The lifecycle engine: observation + task state + now → phase info + one action.

Pure: no I/O, no clock reads, no Kubernetes types. Both backends call `decide` after every
observation and carry out the returned action; `cancel` is the one transition a user starts.

The cascade, first match wins (each step is a function below):

    0. terminal task                  → nothing to do
    1. no gang                        → create it (never seen) | system retry (deleted behind our back)
    2. gang Completed                 → succeed
    3. gang Failed                    → the open eviction if there is one (B4), else a user retry
    4. gang being deleted             → system retry
    5. maxRuntime exceeded (S8)       → user retry
    6. new node-disruption restarts   → counted in a row; past maxSystemRetries → fail
    7. gang has started (sticky)      → after_start: eviction (S4–S7) | restart | fatal | running
    8. gang has not started           → before_start: hold (S3) | fatal | scheduled | ready

A worker lost to a node disruption (restartOnDisruption, default on) restarts the gang inside the
attempt and is charged to no budget: the gang does not count the restart toward maxRestarts (JobSet's
RestartJobSetAndIgnoreMaxRestarts, or the local twin), and the engine neither ends the attempt nor
calls the failed worker fatal. What only the engine can do is bound it: more than maxSystemRetries
such restarts in a row (without the gang fully up in between) fail the task.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from gangrun._core.eviction import (
    NO_EVICTION,
    Eviction,
    EvictionKind,
    classify_eviction,
    local_queue_missing,
    pending_message,
)
from gangrun._core.observation import Disruption, Gang, Observation
from gangrun._core.phases import Phase
from gangrun._core.policy import (
    CONTROL_PLANE_STOPPED,
    DELETED_EXTERNALLY,
    GANG_EVICTED,
    MAX_RUNTIME_EXCEEDED,
    MAX_SYSTEM_FAILURES_EXCEEDED,
    QUEUE_NOT_FOUND,
    UNEXPECTED_DELETION,
    WORKER_CANNOT_START,
    WORKER_DISRUPTED,
    WORKER_FAILED,
    Policy,
    RetryKind,
    end_attempt,
    failure_message,
)
from gangrun._core.state import Outcome, TaskState
from gangrun._core.units import format_duration

WAITING_FOR_ADMISSION = "waiting for gang admission"
RELEASED_BEFORE_READY = "released by admission gate before all workers were ready; waiting for re-admission"
WAITING_FOR_READMISSION = "waiting for re-admission"
UNEXPLAINED_SUSPEND = "gang suspended; waiting for kueue to report why"
NOT_COUNTED = "restarting the gang (not counted)"
# An uncounted restart whose disrupted pod was gone before anything observed it.
UNSEEN_DISRUPTION = Disruption(reason="DisruptionTarget", message="a worker was lost to a node disruption")
DETAIL_LIMIT = 200


class ActionKind(StrEnum):
    NONE = "none"
    CREATE_GANG = "create-gang"  # create the gang of `attempt`
    RETRY = "retry"  # delete the gang of `attempt`; the state already holds the next attempt
    FAIL = "fail"  # delete the gang of `attempt`; the task failed
    SUCCEED = "succeed"  # the task succeeded; the gang may stay for its logs
    ABORT = "abort"  # delete the gang of `attempt`; the user cancelled


@dataclass(frozen=True, kw_only=True)
class Action:
    kind: ActionKind = ActionKind.NONE
    attempt: int = 0
    retry: RetryKind | None = None
    code: str = ""
    message: str = ""


NOTHING = Action()


@dataclass(frozen=True, kw_only=True)
class Decision:
    state: TaskState
    action: Action = NOTHING
    wake_at: datetime | None = None  # decide again by then even if nothing is observed


def decide(policy: Policy, state: TaskState, obs: Observation, *, now: datetime) -> Decision:
    """Decide what the task is doing and the one thing to do next. Never raises on odd observations."""
    if state.phase.terminal:
        return Decision(state=state)
    gang = obs.gang
    if gang is None:
        return _gang_missing(policy, state, gone=obs.gang_gone, now=now)
    ev = classify_eviction(obs.workload, obs.workload_read)
    if ev.kind not in NO_EVICTION:  # recorded the first time it shows: readmission overwrites it
        state = state.with_eviction_seen(ev, at=now)
    if not state.gang_seen:
        state = replace(state, gang_seen=True)
    for step in (_completed, _failed, _being_deleted, _out_of_time):
        decision = step(policy, state, gang, now)
        if decision is not None:
            return decision
    state, decision = _disrupted(policy, state, gang, now)
    if decision is not None:
        return decision
    if state.started or gang.has_run:
        decision = _after_start(policy, state, gang, ev, now)
    else:
        decision = _before_start(policy, state, obs, gang, ev, now)
    return _with_deadline(policy, decision)


def cancel(state: TaskState, *, now: datetime, reason: str = "cancelled by the user") -> Decision:
    """The user stops the task: Aborted, whatever it was doing."""
    if state.phase.terminal:
        return Decision(state=state)
    ended = state.with_attempt_ended(Outcome.ABORTED, at=now, code="Aborted", reason=reason)
    ended = ended.with_info(ended.info.advance(Phase.ABORTED, reason))
    return Decision(state=ended, action=Action(kind=ActionKind.ABORT, attempt=state.attempt, message=reason))


# -- steps ------------------------------------------------------------------------------------------


def _gang_missing(policy: Policy, state: TaskState, *, gone: str, now: datetime) -> Decision:
    if not state.gang_seen:
        info = state.info.advance(Phase.QUEUED, state.info.reason if state.phase is Phase.QUEUED else "task submitted")
        return Decision(state=state.with_info(info), action=Action(kind=ActionKind.CREATE_GANG, attempt=state.attempt))
    code = CONTROL_PLANE_STOPPED if gone else DELETED_EXTERNALLY
    message = f"the gang of attempt {state.attempt} {gone or 'was deleted outside gangrun'}"
    return _end(policy, state, RetryKind.SYSTEM, code=code,
                message=message + "; this does not count against the task's retries", now=now)


def _completed(policy: Policy, state: TaskState, gang: Gang, now: datetime) -> Decision | None:
    if not gang.completed:
        return None
    reason = "all workers succeeded"
    done = state.with_attempt_ended(Outcome.SUCCEEDED, at=now, code="", reason=reason)
    done = done.with_info(done.info.advance(Phase.SUCCEEDED, reason))
    return Decision(state=done, action=Action(kind=ActionKind.SUCCEED, attempt=state.attempt))


def _failed(policy: Policy, state: TaskState, gang: Gang, now: datetime) -> Decision | None:
    cond = gang.failed
    if cond is None:
        return None
    if state.eviction is not None:
        # B4: pods killed while Kueue suspends the gang are not the application's fault. The gang is
        # terminal, so it cannot wait for readmission even if the eviction was a preemption.
        ev = state.eviction.as_eviction()
        kind = RetryKind.USER if ev.user_caused and not policy.resume_after_preemption else RetryKind.SYSTEM
        message = ev.summary() + "; the gang failed while it was being evicted"
        return _end_by_eviction(policy, state, ev, kind=kind, message=message, now=now)
    if gang.restarts_exhausted:  # a worker failed with no restart left: say that, not JobSet's wording
        return _worker_failed(policy, state, gang, now, fallback=cond.message)
    detail = cond.message + (f"; {gang.first_failure}" if gang.first_failure else "")
    message = failure_message(cond.reason or WORKER_FAILED, detail, retries_left=policy.retries_left(state))
    return _end(policy, state, RetryKind.USER, code=cond.reason or WORKER_FAILED, message=message, now=now)


def _worker_failed(policy: Policy, state: TaskState, gang: Gang, now: datetime, *, fallback: str) -> Decision:
    """The attempt ends because a worker failed and the gang may not restart again: the worker's failure
    (`fallback` when no worker is known) and the restarts used, or that none are allowed (maxRestarts 0)."""
    detail = gang.first_failure or fallback
    if policy.max_restarts == 0:
        detail += " (no restarts allowed: maxRestarts is 0)"
    else:
        detail += f" (after {gang.restarts_count_towards_max} of {policy.max_restarts} restarts)"
    message = failure_message(WORKER_FAILED, detail, retries_left=policy.retries_left(state))
    return _end(policy, state, RetryKind.USER, code=WORKER_FAILED, message=message, now=now)


def _being_deleted(policy: Policy, state: TaskState, gang: Gang, now: datetime) -> Decision | None:
    if not gang.deleting:
        return None
    message = f"the gang of attempt {state.attempt} is being deleted outside gangrun"
    return _end(policy, state, RetryKind.SYSTEM, code=UNEXPECTED_DELETION,
                message=message + "; this does not count against the task's retries", now=now)


def _out_of_time(policy: Policy, state: TaskState, gang: Gang, now: datetime) -> Decision | None:
    """S8: maxRuntime counts from the attempt's first Running, waits for re-admission included."""
    since = state.running_at
    if policy.max_runtime is None or since is None or now - since < policy.max_runtime:
        return None
    detail = (f"attempt {state.attempt} ran longer than maxRuntime {format_duration(policy.max_runtime)} "
              f"(since {since.isoformat()})")
    message = failure_message(MAX_RUNTIME_EXCEEDED, detail, retries_left=policy.retries_left(state))
    return _end(policy, state, RetryKind.USER, code=MAX_RUNTIME_EXCEEDED, message=message, now=now)


def _disrupted(policy: Policy, state: TaskState, gang: Gang, now: datetime) -> tuple[TaskState, Decision | None]:
    """Record the gang's new uncounted restarts (node disruptions); fail past maxSystemRetries in a row."""
    if not policy.restart_on_disruption:
        return state, None
    state = state.with_disruption(gang.disruption or UNSEEN_DISRUPTION, restarts_not_counted=gang.restarts_not_counted,
                                  restart_attempt=gang.restarts, at=now)
    if state.disruptions_in_a_row <= policy.max_system_retries:
        return state, None
    final = (f"{state.disruptions[-1].describe()}; {state.disruptions_in_a_row} node disruptions in a row exceed "
             f"maxSystemRetries ({policy.max_system_retries})")
    failed = state.with_failed(at=now, attempt_code=WORKER_DISRUPTED, attempt_reason=final,
                               code=MAX_SYSTEM_FAILURES_EXCEEDED, message=final,
                               reason=f"attempt {state.attempt} failed: {final}")
    action = Action(kind=ActionKind.FAIL, attempt=state.attempt, code=MAX_SYSTEM_FAILURES_EXCEEDED, message=final)
    return state, Decision(state=failed, action=action)


def _disruption_reason(policy: Policy, state: TaskState, gang: Gang) -> str:
    """`worker lost to node disruption (...): ...; restarting the gang (not counted)` while the gang
    restarts for one (or is about to); "" otherwise."""
    if not policy.restart_on_disruption:
        return ""
    if gang.disruption is not None and gang.disruption_pending:
        d = gang.disruption
        return f"worker lost to node disruption ({d.reason}): {d.message}" + (
            f" ({d.worker})" if d.worker else "") + f"; {NOT_COUNTED}"
    last = state.disruptions[-1] if state.disruptions else None
    if gang.restarting and last is not None and last.attempt == state.attempt and last.restart_attempt == gang.restarts:
        return f"{last.describe()}; {NOT_COUNTED}"
    return ""


def _after_start(policy: Policy, state: TaskState, gang: Gang, ev: Eviction, now: datetime) -> Decision:
    if gang.suspended:
        return _taken_back(policy, state, gang, ev, now)
    if state.eviction is not None and ev.kind in NO_EVICTION:
        state = state.with_readmitted(at=now)
    if state.eviction is not None and ev.waits_for_readmission and policy.resume_after_preemption:
        # S5: Kueue has taken the gang back and queued its Workload again; the JobSet is suspended
        # next (minutes later when Kueue evicts a thousand gangs at once). It waits from now, and the
        # suspension then changes nothing: one status, not two.
        return _report(state.with_waiting(), Phase.RUNNING, f"{ev.summary()}; {WAITING_FOR_READMISSION}")
    if state.eviction is None:  # B4: failures inside an eviction window are not the application's
        fatal = _fatal(policy, state, gang, now)
        if fatal is not None:
            return fatal
    disrupted = _disruption_reason(policy, state, gang) if state.eviction is None else ""
    if disrupted:
        return _report(state, Phase.RUNNING, disrupted)
    if gang.restarting:
        return _report(state, Phase.RUNNING, gang.resizing or f"restart in progress (attempt {gang.restarts})")
    state = state.with_running(at=now, restart_attempt=gang.restarts)
    return _report(state, Phase.RUNNING, f"running (restart attempt {gang.restarts})")


def _taken_back(policy: Policy, state: TaskState, gang: Gang, ev: Eviction, now: datetime) -> Decision:
    """A started gang is suspended: Kueue took it back (S4–S7)."""
    if ev.kind is EvictionKind.NOT_YET and state.eviction is not None:
        ev = state.eviction.as_eviction()  # already readmitted; the JobSet has not caught up yet
    if ev.kind is EvictionKind.NOT_YET:
        # S7: the JobSet and Workload streams are not ordered; the Workload may say why next time.
        since = state.unexplained_suspend_since or now
        if now - since < policy.suspend_grace:
            waiting = replace(state, unexplained_suspend_since=since)
            return _report(waiting, state.phase, UNEXPLAINED_SUSPEND, wake_at=since + policy.suspend_grace)
        ev = Eviction(kind=EvictionKind.UNKNOWN,
                      message=f"suspended for {format_duration(now - since)} without an eviction reason")
    if ev.waits_for_readmission and policy.resume_after_preemption:
        return _report(state.with_waiting(), Phase.RUNNING, f"{ev.summary()}; {WAITING_FOR_READMISSION}")
    kind = RetryKind.USER if ev.user_caused else RetryKind.SYSTEM
    message = ev.describe(retries_left=policy.retries_left(state))
    return _end_by_eviction(policy, state, ev, kind=kind, message=message, now=now)


def _before_start(policy: Policy, state: TaskState, obs: Observation, gang: Gang, ev: Eviction,
                  now: datetime) -> Decision:
    held_phase = Phase.INITIALIZING if state.phase is Phase.INITIALIZING else Phase.WAITING_FOR_RESOURCES
    if gang.suspended:  # S3: a hold, not a failure
        queue = local_queue_missing(obs.workload)
        if queue is not None:
            message = (f'the queue "{queue}" does not exist; '
                       f"use one of the queues your platform provides")
            return _fail(state, code=QUEUE_NOT_FOUND, message=message, now=now)
        reason = RELEASED_BEFORE_READY if held_phase is Phase.INITIALIZING else WAITING_FOR_ADMISSION
        why = pending_message(obs.workload) or gang.suspended_message  # Kueue's word first: it says why
        if why:
            reason += f": {_cap(why)}"
        return _report(state, held_phase, reason)
    if state.eviction is not None and ev.kind in NO_EVICTION:
        # Readmitted once the Workload says so: a JobSet seen unsuspended before the Workload's news
        # is the same eviction, and closing it then would count it twice (B5).
        state = state.with_readmitted(at=now)
    fatal = _fatal(policy, state, gang, now)
    if fatal is not None:
        return fatal
    disrupted = _disruption_reason(policy, state, gang)
    if disrupted:
        return _report(state, held_phase, disrupted)
    expected = max(gang.expected_workers, 0)
    if gang.scheduled_workers < expected:
        detail = f" ({_cap(gang.unscheduled_detail)})" if gang.unscheduled_detail else ""
        return _report(state, held_phase, f"{gang.scheduled_workers} of {expected} workers scheduled{detail}")
    return _report(state, Phase.INITIALIZING, f"{gang.ready_workers} of {expected} workers ready")


def _fatal(policy: Policy, state: TaskState, gang: Gang, now: datetime) -> Decision | None:
    """A gang that cannot succeed in this attempt: a worker that can never start, or no restarts left."""
    if gang.pending_failure:
        message = failure_message(WORKER_CANNOT_START, gang.pending_failure, retries_left=policy.retries_left(state))
        return _end(policy, state, RetryKind.USER, code=WORKER_CANNOT_START, message=message, now=now)
    if policy.restart_on_disruption and gang.disruption_pending:
        return None  # the gang restarts for it without counting (see _disrupted)
    if gang.jobs_failed > 0 and gang.restarts_count_towards_max >= policy.max_restarts and not gang.restarting:
        return _worker_failed(policy, state, gang, now, fallback="a worker failed")
    return None


# -- results ----------------------------------------------------------------------------------------


def _report(state: TaskState, phase: Phase, reason: str, *, wake_at: datetime | None = None) -> Decision:
    """Report (phase, reason), never moving the phase backwards inside an attempt (S2)."""
    if phase.rank < state.phase.rank:
        phase = state.phase
    return Decision(state=state.with_info(state.info.advance(phase, reason)), wake_at=wake_at)


def _end_by_eviction(policy: Policy, state: TaskState, ev: Eviction, *, kind: RetryKind, message: str,
                     now: datetime) -> Decision:
    state = state.with_eviction_seen(ev, at=now)
    return _end(policy, state, kind, code=GANG_EVICTED, message=message, now=now)


def _end(policy: Policy, state: TaskState, kind: RetryKind, *, code: str, message: str, now: datetime) -> Decision:
    result = end_attempt(policy, state, kind, code=code, message=message, now=now)
    action_kind = ActionKind.RETRY if result.retried else ActionKind.FAIL
    action = Action(kind=action_kind, attempt=state.attempt, retry=kind, code=result.code, message=result.message)
    return Decision(state=result.state, action=action)


def _fail(state: TaskState, *, code: str, message: str, now: datetime) -> Decision:
    """A permanent failure: no retry can fix it."""
    failed = state.with_failed(at=now, attempt_code=code, attempt_reason=message, code=code, message=message,
                               reason=f"{code}: {message}")
    return Decision(state=failed,
                    action=Action(kind=ActionKind.FAIL, attempt=state.attempt, code=code, message=message))


def _with_deadline(policy: Policy, decision: Decision) -> Decision:
    """Wake up at the maxRuntime deadline even if nothing else happens."""
    since = decision.state.running_at
    if decision.action.kind is not ActionKind.NONE or policy.max_runtime is None or since is None:
        return decision
    deadline = since + policy.max_runtime
    wake = deadline if decision.wake_at is None else min(deadline, decision.wake_at)
    return Decision(state=decision.state, action=decision.action, wake_at=wake)


def _cap(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT else text[:DETAIL_LIMIT] + "…"

