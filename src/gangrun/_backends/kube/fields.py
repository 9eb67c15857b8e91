"""Total readers of Kubernetes API objects as plain dicts: a missing, null or wrongly typed field reads as
empty (None, 0, [], "") and never raises, because one odd object must not stop the controller from
driving every other task."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gangrun._core.conditions import Condition


def get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def as_int(v: Any, default: int = 0) -> int:
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return default


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def as_str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def parse_time(v: Any) -> datetime | None:
    """An API timestamp (`Time` or `MicroTime`), or None for anything else."""
    if not isinstance(v, str) or not v:
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None


def format_time(t: datetime) -> str:
    """An API `Time` (UTC, whole seconds), as `parse_time` reads it back."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(obj: Any) -> tuple[Condition, ...]:
    """`status.conditions` as values; entries that are not mappings with a string `type` are skipped."""
    raw = get(obj, "status", "conditions")
    if not isinstance(raw, list):
        return ()
    out = []
    for c in raw:
        if isinstance(c, dict) and isinstance(c.get("type"), str):
            out.append(Condition(type=c["type"], status=as_str(c.get("status")), reason=as_str(c.get("reason")),
                                 message=as_str(c.get("message")),
                                 last_transition=parse_time(c.get("lastTransitionTime"))))
    return tuple(out)


def labels(obj: Any) -> dict[str, str]:
    raw = get(obj, "metadata", "labels")
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(raw, dict) else {}


def resource_version(obj: Any) -> int | None:
    """`metadata.resourceVersion` as the etcd revision it is, or None when it is not a number."""
    v = get(obj, "metadata", "resourceVersion")
    return int(v) if isinstance(v, str) and v.isdigit() else None
