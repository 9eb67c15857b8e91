"""Elastic gangs: the size a gang runs at, as pure functions of what fits (both backends use them).

A gang with `minNodes < nodes` may run on fewer nodes than it asks for:

- **start on what fits**: admitted at its full size when that fits (preempting lower priority as
  Kueue's rules allow); otherwise at the largest size n, minNodes <= n < nodes, that fits without
  preempting anyone; otherwise it waits;
- **shrink instead of waiting**: a preempted gang that resumes after preemption is readmitted by the
  same rule, so it goes on at what fits now instead of waiting for its full size;
- **grow back**: a gang running small grows to the largest size that the free quota allows once no
  pending gang of equal or higher priority needs that quota, at most once per `resizeCooldown`.

`fits(n)` answers whether n nodes fit; the callers know their quota (the local ClusterQueue, or a
Kueue ClusterQueue's free nominal quota).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

RESIZE = "Resize"  # the stop notice's cause when a gang is stopped to run at another size
GROWN = "quota is free that no waiting gang of equal or higher priority needs"
READMITTED_SMALLER = "readmitted at what fits now"
READMITTED_FULL = "readmitted at its full size"


def largest_size(*, least: int, most: int, fits: Callable[[int], bool]) -> int | None:
    """The largest n with least <= n <= most and fits(n), or None. Fitting is monotone in n (a smaller
    gang asks for less), so the search halves the range instead of trying every size."""
    if most < least or not fits(least):
        return None
    lo, hi = least, most  # fits(lo) holds; the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def start_size(*, least: int, most: int, fits: Callable[[int], bool]) -> int:
    """The size a gang asks for when it (re)starts: `most` when that fits, or when no smaller size down to
    `least` does (then it waits, or preempts, as Kueue decides); otherwise the largest that fits."""
    if fits(most):
        return most
    return largest_size(least=least, most=most - 1, fits=fits) or most


def cooldown_over(resized_at: datetime | None, cooldown: timedelta, now: datetime) -> bool:
    return resized_at is None or now >= resized_at + cooldown


def resize_why(old: int, new: int, *, full: int, readmitted: bool) -> str:
    """Why a gang of the local backend went from `old` to `new` nodes. Only a running gang grows for free
    quota; its nodes are never lost, so it never shrinks while it keeps its quota: a shrink is always its
    queue taking it back and readmitting it on what fits (even when the gang was not suspended yet:
    preempted 1 s into a grow). On Kubernetes a gang also shrinks onto the nodes left (kube/elastic.py)."""
    if new > old and not readmitted:
        return GROWN
    return READMITTED_FULL if new >= full else READMITTED_SMALLER


def resize_message(old: int, new: int, why: str) -> str:
    verb = "growing" if new > old else "shrinking"
    return f"{verb} the gang from {old} to {new} nodes: {why}"
