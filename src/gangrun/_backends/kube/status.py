"""A ClusteredTask's `.status` as the controller writes it: the engine state, the accounting, what the
reconcile adds (an elastic gang's size, what resumeFrom gave) and the conditions kubectl shows.

    status_patch(task, state, *, now, spec, ledger, extra) -> status | None (None: nothing changed)

Running, Evicted and Finished say where the lifecycle is; GracePeriodTooShort, once a final save was
measured, whether the grace period fits it. A condition keeps its lastTransitionTime until its status
turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gangrun._backends.kube import fields
from gangrun._backends.kube.render import jobset_name
from gangrun._backends.kube.stored import load_accounting
from gangrun._core import grace
from gangrun._core.accounting import Accounting
from gangrun._core.conditions import Condition, set_condition
from gangrun._core.phases import Phase
from gangrun._core.spec import TaskSpec
from gangrun._core.state import TaskState


def status_patch(task: dict[str, Any], state: TaskState, *, now: datetime, spec: TaskSpec | None,
                 ledger: Accounting | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The status to write for `task` in `state`, or None when it is the one stored. `spec`: the task's
    (None for one gangrun refuses, which has no grace period to check); `ledger`: the accounting, else
    the stored one; `extra`: further fields."""
    old = s if isinstance(s := task.get("status"), dict) else {}
    name = (task.get("metadata") or {}).get("name", "")
    ledger = ledger if ledger is not None else load_accounting(task)
    extra = extra or {}
    generation = ((extra.get("elastic") or {}).get("generation") or 0)
    checked = _grace_condition(spec, ledger) if spec is not None else None
    new = {**state.for_storage(), **extra, "jobSet": jobset_name(name, state.attempt, generation) if name else "",
           "accounting": ledger.for_storage(),
           "observedGeneration": (task.get("metadata") or {}).get("generation", 0),
           "conditions": _conditions(state, old.get("conditions"), now=now,
                                     extra=[checked] if checked is not None else [])}
    if _without_nulls(new) == _without_nulls(old):
        return None
    return new


def _grace_condition(spec: TaskSpec, ledger: Accounting) -> Condition | None:
    """GracePeriodTooShort, once a final save was measured (True: the grace period does not fit it)."""
    check = grace.check(ledger.final_saves, spec.termination_grace.total_seconds())
    if check is None:
        return None
    return Condition(type=grace.CONDITION, status=str(check.short),
                     reason=grace.REASON_SHORT if check.short else grace.REASON_OK, message=check.message)


def _conditions(state: TaskState, old: Any, *, now: datetime, extra: Sequence[Condition] = ()) -> list[dict[str, Any]]:
    conds = [c for c in fields.conditions({"status": {"conditions": old}})]
    phase = state.phase
    eviction = state.eviction
    waiting = eviction is not None
    wanted = [
        Condition(type="Running", status=str(phase is Phase.RUNNING and not waiting),
                  reason="WaitingForReadmission" if phase is Phase.RUNNING and waiting else phase.value,
                  message=state.info.reason),
        Condition(type="Evicted", status=str(waiting),
                  reason=(eviction.reason or eviction.kind.value) if eviction is not None else "NotEvicted",
                  message=eviction.message if eviction is not None else ""),
        Condition(type="Finished", status=str(phase.terminal), reason=phase.value if phase.terminal else "NotFinished",
                  message=(state.message or state.info.reason) if phase.terminal else ""),
        *extra,
    ]
    for c in wanted:
        set_condition(conds, c, now=now)
    return [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
             "lastTransitionTime": fields.format_time(c.last_transition or now)} for c in conds]


def _without_nulls(v: Any) -> Any:
    # A merge patch deletes keys set to null at every depth of an object (the eviction's unset
    # `readmittedAt` too), so the stored status lacks them: compare with no null anywhere.
    if isinstance(v, dict):
        return {k: _without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_without_nulls(x) for x in v]
    return v
