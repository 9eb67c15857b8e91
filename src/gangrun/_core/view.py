"""The task as users see it: the `gangrun get -o json` document, the same on both backends.

Its keys are defined once, in `gangrun._core.view_types`; this module fills them from the state.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from gangrun._core import grace
from gangrun._core.accounting import Accounting
from gangrun._core.policy import Policy
from gangrun._core.spec import TaskSpec
from gangrun._core.state import TaskState
from gangrun._core.view_types import AccountingView, SpecFacts, StateView


def eviction_accounting(state: TaskState, *, now: datetime) -> tuple[dict[str, int], float]:
    """Stops by cause (B5): evictions by Kueue's Evicted reason, node disruptions by their own reason
    (EvictionByEvictionAPI, TerminationByKubelet, ...); and the seconds spent waiting for re-admission."""
    counts = Counter(e.reason or e.kind.value for e in state.evictions)
    counts.update(d.reason for d in state.disruptions)
    return dict(counts), round(state.waiting_for_readmission(now=now).total_seconds(), 3)


def accounting_view(acct: Accounting, *, grace_seconds: float, now: datetime, preemptions: dict[str, int],
                    waited: float) -> AccountingView:
    """`accounting` of `get -o json`: the figures folded from the timeline, the preemptions by cause,
    and whether the grace period fits the final saves measured so far (None before the first)."""
    check = grace.check(acct.final_saves, grace_seconds)
    return {**acct.view(now=now), "preemptionsByCause": preemptions, "waitingForReadmissionSeconds": waited,
            "grace": check.for_json() if check is not None else None}


def spec_view(spec: TaskSpec | None, *, default_priority_class: str = "") -> SpecFacts:
    """What the view shows of the task's spec, with the spec's own defaults; all None for a spec that is
    not valid (such a task is Failed with InvalidSpec, which says why)."""
    if spec is None:
        return {"queue": None, "priorityClass": None, "nodes": None, "minNodes": None, "nprocPerNode": None,
                "worldSize": None, "resumeFrom": None}
    return {"queue": spec.queue, "priorityClass": spec.priority_class or default_priority_class,
            "nodes": spec.nodes, "minNodes": spec.least_nodes, "nprocPerNode": spec.nproc_per_node,
            "worldSize": spec.world_size, "resumeFrom": spec.resume_from or None}


def state_view(name: str, state: TaskState, *, now: datetime, policy: Policy | None = None) -> StateView:
    """What the state says, the same on both backends; with the task's `policy`, the view also says how
    many retries are left. Each backend's view is this, then its facts (`gangrun._core.view_types`)."""
    counts, waited = eviction_accounting(state, now=now)
    view: StateView = {
        "name": name,
        "phase": state.phase.value,
        "phaseVersion": state.info.version,
        "reason": state.info.reason,
        "attempt": state.attempt,
        "userRetriesUsed": state.user_retries_used,
        "systemRetriesUsed": state.system_retries_used,
        "restartAttempt": state.restart_attempt,
        "attempts": [a.for_storage() for a in state.attempts],
        "evictionsByCause": counts,
        "waitingForReadmissionSeconds": waited,
        # Each time Kueue took the gang back, with its readmission (the timeline's waits, B5), as stored.
        "evictions": [e.for_json() for e in state.evictions],
    }
    if policy is not None:
        view["retries"], view["maxSystemRetries"] = policy.retries, policy.max_system_retries
        view["retriesLeft"] = policy.retries_left(state)
    if state.eviction is not None:
        view["eviction"] = {"reason": state.eviction.reason, "detail": state.eviction.detail,
                            "message": state.eviction.message, "at": state.eviction.at.isoformat()}
    if state.code:
        view["code"], view["message"] = state.code, state.message
    return view
