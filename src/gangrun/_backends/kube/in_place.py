"""In-place gang restarts: the controller's side (`failurePolicy.restartStrategy: InPlace`).

A failed worker's launcher keeps its pod (`gangrun._worker.in_place`): the pod turns NotReady, and the
controller asks its launcher (GET /round on the report port, `targets` says whose) which round failed
and how. `decide` then restarts the whole gang in its pods: it orders round N+1 (N: the gang's restarts
so far, JobSet's and in-place ones) from every launcher, with the stop notice of cause `Restart`, and
counts the restart in `status.inPlace` as JobSet would count it: towards `maxRestarts`, a new rendezvous,
every rank resuming from one checkpoint. Until every launcher says it has the order, each sync asks all
of them and orders again those that have not (an order is idempotent), a second later at the latest.

A pod deleted under the gang is made again alone: its launcher leaves with `LOST_EXIT`, which its Job
ignores, and the Job makes a new pod for that index. Seeing it go (or its replacement say `replaced` first,
when the controller missed the deletion), the controller restarts the gang in place in the pods it has and
records the index in `status.inPlace.lost`; the replacement's launcher, told that round when it comes up,
joins it (uncounted). When no pod of the gang runs a round (a readmitted gang's pods all replace the ones its
suspension ended) the replacements are told to start the gang's round.

The gang is recreated instead (JobSet's own restart, counted by JobSet) when a pod of it cannot be
restarted in place: one that completed, or failed or is going for another reason (a drain's pod fails
its Job). The failed launchers are told to leave (`recreate`), which fails their Jobs; the event says
why. With no restart left the gang fails as JobSet would fail it, and its attempt ends.

    InPlace.load(task, attempt)         this attempt's in-place restarts (status.inPlace)
    targets(spec, ip, pods) -> {pod name: url}   the launchers to ask this sync
    decide(spec, ip, gang, pods, rounds, running=..., now=..., since=...) -> Decided   the gang as the
                                        engine sees it, what to push, what to record, and whether to look
                                        again soon
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gangrun._backends.kube import adapter
from gangrun._backends.kube.render import report_url
from gangrun._core import jobset, stop_causes
from gangrun._core import worker_env as wenv
from gangrun._core.actions import RecordEvent, RequeueAt
from gangrun._core.conditions import TRUE, Condition
from gangrun._core.observation import Gang
from gangrun._core.spec import IN_PLACE, TaskSpec
from gangrun._core.timeline import Event, EventType

STATUS_KEY = "inPlace"
IN_PLACE_RESTART = "InPlaceRestart"  # the reason of the gang's RestartingJobSet while it restarts in place
CONFIRM = timedelta(seconds=1)  # from an order to the next look at whether every launcher has it
CONFIRM_LIMIT = timedelta(seconds=30)  # the launchers' own wait for an order (`render.IN_PLACE_WAIT`)
LIVE = ("Pending", "Running")


@dataclass(frozen=True)
class InPlace:
    attempt: int = 0
    restarts: int = 0  # in-place restarts of this attempt so far (each counted towards maxRestarts)
    ordered: int = -1  # the round the newest order named (-1: none yet)
    jobset_round: int = 0  # JobSet's own restarts then: a JobSet restart since made new pods, told nothing
    confirmed: bool = True  # every launcher said it has that order
    failure: str = ""  # what the newest order restarts for
    at: datetime | None = None  # when it was given
    recreating: int = -1  # JobSet's round whose recreate instead was announced (-1: none): announced once
    lost: tuple[tuple[int, str], ...] = ()  # (index, name) of the pods lost under the gang that orders covered

    @classmethod
    def load(cls, task: dict[str, Any], attempt: int) -> InPlace:
        status = task.get("status")
        doc = status.get(STATUS_KEY) if isinstance(status, dict) else None
        if not isinstance(doc, dict) or doc.get("attempt") != attempt:
            return cls(attempt=attempt)
        try:
            at = datetime.fromisoformat(doc["at"]) if isinstance(doc.get("at"), str) else None
        except ValueError:
            at = None
        return cls(attempt=attempt, restarts=_whole(doc.get("restarts")), ordered=_whole(doc.get("ordered"), -1),
                   jobset_round=_whole(doc.get("jobsetRound")), confirmed=doc.get("confirmed") is not False,
                   failure=str(doc.get("failure") or ""), at=at, recreating=_whole(doc.get("recreating"), -1),
                   lost=tuple((i, n) for i, n in _pairs(doc.get("lost"))))

    def for_storage(self) -> dict[str, Any]:
        if self.ordered < 0 and self.recreating < 0:
            return {}
        return {STATUS_KEY: {"attempt": self.attempt, "restarts": self.restarts, "ordered": self.ordered,
                             "jobsetRound": self.jobset_round, "confirmed": self.confirmed, "failure": self.failure,
                             "at": self.at.isoformat() if self.at is not None else None,
                             "recreating": self.recreating, "lost": [list(x) for x in self.lost]}}


def _whole(v: Any, default: int = 0) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default


def _pairs(v: Any) -> list[tuple[int, str]]:
    return [(x[0], x[1]) for x in v if isinstance(x, list) and len(x) == 2 and _whole(x[0], -1) >= 0
            and isinstance(x[1], str)] if isinstance(v, list) else []


@dataclass(frozen=True)
class Round:
    """What a launcher said on GET /round."""

    restart: int
    failed: int | None = None  # the exit code of the worker that failed in this round, waiting for an order
    at: datetime | None = None  # when it failed
    replaced: bool = False  # a pod the Job made for one lost under the gang, waiting for the round to join

    @classmethod
    def parse(cls, text: str) -> Round | None:
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if not isinstance(doc, dict) or not isinstance(restart := doc.get("restart"), int):
            return None
        failed, at = doc.get("failed"), doc.get("at")
        return cls(restart=restart, failed=failed if isinstance(failed, int) else None,
                   at=datetime.fromtimestamp(at, UTC) if isinstance(at, int | float) else None,
                   replaced=doc.get("replaced") is True)


@dataclass(frozen=True)
class OrderRestart:
    """POST the order `body` to these launchers (`wenv.RESTART_PATH`)."""

    urls: tuple[str, ...]
    body: str
    recreate: bool = False  # the gang is recreated instead: the failed launchers leave


@dataclass(frozen=True)
class Decided:
    gang: Gang | None
    state: InPlace
    actions: list[OrderRestart | RecordEvent | RequeueAt]


def _name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not (pod.get("metadata") or {}).get(
        "deletionTimestamp")


def targets(spec: TaskSpec, ip: InPlace, pods: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The launchers to ask for their round this sync: the running pods that are not Ready (a failed worker
    waits there), and every running pod while an order is not confirmed."""
    if spec.failure_policy.restart_strategy != IN_PLACE:
        return {}
    out = {}
    for pod in pods:
        asked = _running(pod) and (not ip.confirmed or not adapter.pod_ready(pod))
        if asked and (url := report_url(pod, wenv.ROUND_PATH)):
            out[_name(pod)] = url
    return out


def decide(spec: TaskSpec, ip: InPlace, gang: Gang | None, pods: Sequence[dict[str, Any]],
           rounds: Mapping[str, Round], *, running: bool, now: datetime, since: datetime | None = None) -> Decided:
    """`gang`: the JobSet's, as the adapter reads it; `pods`: its pods of JobSet's current round; `rounds`:
    what the launchers of `targets` said (those that answered); `running`: the attempt runs and nothing
    else stops its gang (no eviction, no notice), so a failure is the gang's own; `since`: when Kueue last
    readmitted it (a pod deleted before then went with the suspension, not under the gang). Returns the gang with
    this attempt's in-place restarts in its counts (and a failure with no restart left as JobSet's
    Failed), and what to do."""
    if gang is None or spec.failure_policy.restart_strategy != IN_PLACE:
        return Decided(gang, ip, [])
    d = gang.disruption  # its round as JobSet counts it, in the gang's count from here on
    seen = replace(gang, restarts=gang.restarts + ip.restarts,
                   restarts_count_towards_max=gang.restarts_count_towards_max + ip.restarts,
                   disruption=replace(d, restart_attempt=d.restart_attempt + ip.restarts) if d is not None else None)
    current = seen.restarts
    # The round the launchers of these pods run: the newest order's, or, in pods JobSet made since, its own.
    told = ip.ordered >= 0 and ip.jobset_round == gang.restarts
    launchers_round = ip.ordered if told else gang.restarts
    urls = {_name(p): u for p in pods if _running(p) and (u := report_url(p, wenv.RESTART_PATH))}
    actions: list[OrderRestart | RecordEvent | RequeueAt] = []
    if not ip.confirmed:
        ip, actions = _confirm(spec, ip, rounds, urls, now=now) if told else (replace(ip, confirmed=True), [])
        if not ip.confirmed:
            seen = _restarting(seen, ip.failure)
    indexes = {_name(p): _index(p) for p in pods}
    lost = _lost(pods, since)  # index -> name of a pod deleted under the gang: its Job makes it again alone
    covered = {i for i, _ in ip.lost} if told else set()  # their replacements join the gang's round
    handled = {n for _, n in ip.lost}
    replaced = {n: r for n, r in rounds.items() if r.replaced and n in urls}
    if replaced and not any(_running(p) and _name(p) not in replaced for p in pods):
        # no pod runs a round (a readmitted gang's pods all replace the ones its suspension ended, or a
        # one-node gang's): they start the gang's round
        go = OrderRestart(tuple(sorted(urls[n] for n in replaced)), _order(launchers_round, spec, ip.failure, now))
        return Decided(seen, replace(ip, lost=()), [*actions, go])
    joining = sorted(urls[n] for n, r in replaced.items() if indexes.get(n) in covered and r.restart < launchers_round)
    if joining:  # the round its gang restarted in for the loss
        actions.append(OrderRestart(tuple(joining), _order(launchers_round, spec, ip.failure, ip.at or now)))
    causes = sorted((r.at or now, n, f"worker {n} exited with code {r.failed}") for n, r in rounds.items()
                    if r.failed is not None and r.restart >= launchers_round)
    causes += [(now, n, f"pod {n} replaced one lost under the gang") for n, r in replaced.items()
               if indexes.get(n) not in covered]
    new = {i: n for i, n in lost.items() if n not in handled}
    causes += [(now, n, f"pod {n} was deleted; only it is made again") for n in new.values()]
    names = {_name(p) for p in pods}
    ip = replace(ip, lost=tuple(x for x in ip.lost if x[1] in names or not _rejoined(pods, x[0])))
    if not causes or not running or gang.suspended or gang.restarting or gang.disruption_pending:
        return Decided(seen, ip, actions)
    at, name, failure = min(causes)
    seen = replace(seen, first_failure=failure, first_failure_at=at)
    if seen.restarts_count_towards_max >= spec.failure_policy.max_restarts:  # no restart left: JobSet's failure
        failed_condition = Condition(type=jobset.FAILED, status=TRUE, reason=jobset.REACHED_MAX_RESTARTS,
                                     message=jobset.reached_max_restarts_message(name))
        return Decided(replace(seen, jobs_failed=max(seen.jobs_failed, 1),
                               conditions=(*seen.conditions, failed_condition)), ip, actions)
    stuck = _not_restartable(pods)
    if stuck:
        leave = tuple(sorted(urls[n] for n, r in rounds.items() if r.failed is not None and n in urls))
        event = Event(time=now, type=EventType.RESTARTING, attempt=ip.attempt, data={"inPlace": False},
                      message=f"{failure}; the gang restarts by recreating its pods: {stuck}")
        go = OrderRestart(leave, json.dumps({"restart": current + 1, "recreate": True}), recreate=True)
        announce = [] if ip.recreating == gang.restarts else [RecordEvent(event)]  # a launcher slow to leave
        return Decided(seen, replace(ip, recreating=gang.restarts), [*actions, go, *announce])
    n = current + 1
    covering = sorted({*ip.lost, *new.items()})
    remade = sorted({i for i, _ in covering} | {i for r in replaced if (i := indexes.get(r)) is not None})
    ip = replace(ip, restarts=ip.restarts + 1, ordered=n, jobset_round=gang.restarts, confirmed=False,
                 failure=failure, at=now, lost=tuple(covering))
    alone = f"; pods made again: index {', '.join(map(str, remade))}" if remade else ""
    event = Event(time=now, type=EventType.RESTARTING, attempt=ip.attempt,
                  data={"inPlace": True, "restart": n, **({"remade": remade} if remade else {})},
                  message=f"{failure}; the gang restarts in place (restart {n}){alone}")
    seen = replace(seen, restarts=n, restarts_count_towards_max=seen.restarts_count_towards_max + 1)
    order = OrderRestart(tuple(sorted(urls.values())), _order(n, spec, failure, now))
    return Decided(_restarting(seen, failure), ip, [order, RecordEvent(event), RequeueAt(now + CONFIRM)])


def _confirm(spec: TaskSpec, ip: InPlace, rounds: Mapping[str, Round], urls: Mapping[str, str], *,
             now: datetime) -> tuple[InPlace, list[OrderRestart | RecordEvent | RequeueAt]]:
    """After an order: confirmed once every launcher says it has it (or `CONFIRM_LIMIT` after it: one that
    never answers cannot be told anything); until then the order again for those that have not, and a
    look a second later."""
    behind = sorted(urls[n] for n, r in rounds.items() if r.restart < ip.ordered and n in urls)
    if (not behind and all(n in rounds for n in urls)) or (ip.at is not None and now - ip.at >= CONFIRM_LIMIT):
        return replace(ip, confirmed=True), []
    again: list[OrderRestart | RecordEvent | RequeueAt] = [RequeueAt(now + CONFIRM)]
    if behind:
        again.insert(0, OrderRestart(tuple(behind), _order(ip.ordered, spec, ip.failure, now)))
    return ip, again


def _order(restart: int, spec: TaskSpec, failure: str, now: datetime) -> str:
    cause, message = stop_causes.worker_failed(failure, restart_left=True)
    deadline = round((now + spec.termination_grace).timestamp(), 3)
    return json.dumps({"restart": restart, "notice": {"cause": cause, "message": message, "deadline": deadline}},
                      sort_keys=True)


def _restarting(gang: Gang, failure: str) -> Gang:
    cond = Condition(type=jobset.RESTARTING, status=TRUE, reason=IN_PLACE_RESTART,
                     message=f"restarting in place: {failure}")
    return replace(gang, conditions=(*(c for c in gang.conditions if c.type != jobset.RESTARTING), cond))


def _index(pod: dict[str, Any]) -> int | None:
    v = ((pod.get("metadata") or {}).get("annotations") or {}).get(jobset.JOB_COMPLETION_INDEX_KEY)
    return int(v) if isinstance(v, str) and v.isdigit() else None


def _disrupted(pod: dict[str, Any]) -> bool:
    return any(isinstance(c, dict) and c.get("type") == jobset.DISRUPTION_TARGET and c.get("status") == TRUE
               for c in (pod.get("status") or {}).get("conditions") or ())


def _lost_exit(pod: dict[str, Any]) -> bool:
    """Its launcher left as one whose pod was deleted (`wenv.LOST_EXIT`): the Job ignores it and remakes the pod."""
    return any(((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == wenv.LOST_EXIT
               for cs in (pod.get("status") or {}).get("containerStatuses") or () if isinstance(cs, dict))


def _lost(pods: Sequence[dict[str, Any]], since: datetime | None = None) -> dict[int, str]:
    """The pods deleted under the gang (after `since`) that their Job makes again alone (index -> name):
    going, or gone with the launcher's LOST_EXIT, without DisruptionTarget (a disruption fails the Job:
    JobSet recreates the gang)."""
    out = {}
    for pod in pods:
        md, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase")
        going = bool(md.get("deletionTimestamp")) or (phase == "Failed" and _lost_exit(pod))
        if not going or _disrupted(pod) or (i := _index(pod)) is None:
            continue
        if since is None or (when := _deleted_at(pod)) is None or when >= since:
            out[i] = _name(pod)
    return out


def _deleted_at(pod: dict[str, Any]) -> datetime | None:
    """When its deletion was asked for (the deletionTimestamp is that plus the grace period)."""
    md = pod.get("metadata") or {}
    try:
        at = datetime.fromisoformat(str(md["deletionTimestamp"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    return at - timedelta(seconds=_whole(md.get("deletionGracePeriodSeconds")))


def _rejoined(pods: Sequence[dict[str, Any]], index: int) -> bool:
    """A pod of `index` runs the gang's round again: it is running, Ready, and not going."""
    return any(_index(p) == index and _running(p) and adapter.pod_ready(p) for p in pods)


def _not_restartable(pods: Sequence[dict[str, Any]]) -> str:
    """Why the gang cannot restart in its pods ("" when it can): a pod that ended or is going for a reason
    its Job does not remake it alone for (it completed, failed, or was disrupted)."""
    lost = set(_lost(pods).values())
    for pod in pods:
        md, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase")
        if _name(pod) in lost:
            continue
        if md.get("deletionTimestamp"):
            return f"pod {_name(pod)} is being deleted"
        if phase not in LIVE:
            return f"pod {_name(pod)} has ended ({phase})"
    return ""
