"""Kubernetes-style status conditions as plain values, and pure helpers over lists of them.

The helpers follow Kueue's `pkg/workload` habit: they take `now`, change the list in memory and
return whether anything changed; they never talk to an API.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from gangrun._core.times import time_in, time_out

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"

MAX_MESSAGE_LENGTH = 32768  # metav1.Condition's limit


@dataclass(frozen=True, kw_only=True)
class Condition:
    type: str
    status: str = TRUE
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None

    @property
    def is_true(self) -> bool:
        return self.status == TRUE

    def for_json(self) -> dict[str, str | None]:
        """As Kubernetes spells a condition (the local twins store theirs so)."""
        return {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message,
                "lastTransitionTime": time_out(self.last_transition)}

    @classmethod
    def from_json(cls, d: dict[str, str | None]) -> Condition:
        return cls(type=str(d["type"]), status=str(d["status"]), reason=d.get("reason") or "",
                   message=d.get("message") or "", last_transition=time_in(d.get("lastTransitionTime")))


def find_condition(conditions: list[Condition] | tuple[Condition, ...], type_: str) -> Condition | None:
    """Return the condition of `type_`, or None. A list with duplicates yields the last one."""
    found = None
    for cond in conditions:
        if cond.type == type_:
            found = cond
    return found


def is_condition_true(conditions: list[Condition] | tuple[Condition, ...], type_: str) -> bool:
    cond = find_condition(conditions, type_)
    return cond is not None and cond.is_true


def set_condition(conditions: list[Condition], new: Condition, *, now: datetime) -> bool:
    """Set `new` in place. `last_transition` moves only when the status flips.

    Returns whether any change was done.
    """
    new = replace(new, message=new.message[:MAX_MESSAGE_LENGTH])
    for i, old in enumerate(conditions):
        if old.type != new.type:
            continue
        if (old.status, old.reason, old.message) == (new.status, new.reason, new.message):
            return False
        since = now if old.status != new.status else old.last_transition
        conditions[i] = replace(new, last_transition=since)
        return True
    conditions.append(replace(new, last_transition=now))
    return True


def remove_condition(conditions: list[Condition], type_: str) -> bool:
    """Remove every condition of `type_`. Returns whether any change was done."""
    kept = [c for c in conditions if c.type != type_]
    changed = len(kept) != len(conditions)
    conditions[:] = kept
    return changed
