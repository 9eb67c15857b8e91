"""The causes of badput (B5): the one definition of what a task's unproductive time is called.

`accounting.badputSeconds` has one key per cause, in this order; the CRD's status schema and the
web page's badput line are built from `CAUSES` (the page reads them from the timeline's summary), so
a cause added here shows everywhere and a cause spelled anywhere else is a bug.

With the productive time they make up the task's life (the badput identity):

    goodput × life + Σ badputSeconds = life
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    key: str  # the key in `badputSeconds`
    label: str  # what the web page calls it
    meaning: str  # one line, for the schema's description


QUEUED = "queued"
WAITING = "waitingForReadmission"
RESTORING = "restoring"
RESTARTING = "restarting"
WORK_LOST = "workLost"
BELOW_FULL_SIZE = "belowFullSize"

CAUSES = (
    Cause(QUEUED, "queued", "waiting for quota, from the gang's creation to its admission"),
    Cause(WAITING, "waiting for re-admission", "from a preemption to the readmission"),
    Cause(RESTORING, "restoring", "gang up before the first step after a load, at every start after a stop"),
    Cause(RESTARTING, "restarting", "from a stop, an admission or a readmission until the workers run"),
    Cause(WORK_LOST, "work lost", "gang-up time since the newest checkpoint, thrown away by a stop"),
    Cause(BELOW_FULL_SIZE, "below full size", "the unused share of the time an elastic gang ran on fewer nodes"),
)
KEYS = tuple(c.key for c in CAUSES)


def for_json() -> list[dict[str, str]]:
    """The causes as the web page reads them: key and label, in order."""
    return [{"key": c.key, "label": c.label} for c in CAUSES]


def by_cause(*, queued: float, waiting: float, restoring: float, restarting: float, lost: float,
             below: float) -> dict[str, float]:
    """`badputSeconds`: every cause, rounded to the millisecond, in the order of `CAUSES`."""
    seconds = {QUEUED: queued, WAITING: waiting, RESTORING: restoring, RESTARTING: restarting, WORK_LOST: lost,
               BELOW_FULL_SIZE: below}
    return {k: round(seconds[k], 3) for k in KEYS}
