"""Kueue-like admission for the one local ClusterQueue, as a pure function.

Inputs: the quota, the gangs holding quota and the gangs waiting for it. Output: which waiting gangs
get quota now and which admitted gangs must be preempted, and for whom. No clock, no I/O: the daemon
feeds it values and carries out the plan (tests/local/test_admission.py is its table).

Semantics copied from Kueue (ClusterQueue `queueingStrategy: BestEffortFIFO`,
`preemption.withinClusterQueue: LowerPriority`):

- Every "priority" below is the effective priority: the Workload's priority plus its boost
  (`kueue.x-k8s.io/priority-boost`; locally `gangrun._core.priority_boost` computes it), as Kueue
  compares them when its `PriorityBoost` gate is on.
- Waiting gangs are considered by priority (higher first), then submission order.
- All or nothing: a gang gets quota for all its nodes × per-node resources, or none.
- A gang that does not fit may preempt admitted gangs of strictly lower priority. Kueue's candidate
  order: gangs already being evicted first (their quota is on its way back), then lowest priority,
  then the most recently admitted. It takes candidates until the gang fits, then drops every victim
  that turns out not to be needed, so the set is minimal ("the fewest").
- A gang waiting for its victims to stop keeps the room it needs: lower entries cannot take it in the
  meantime (Kueue reserves it within the scheduling cycle and re-runs the same order next cycle).
- A gang that cannot fit even after every allowed preemption is skipped; smaller ones behind it may
  still be admitted (BestEffortFIFO).

Elastic gangs (`spec.minNodes`, `gangrun._core.elastic`): a pending elastic gang that does not fit at
its full size, even by preempting, is admitted at the largest smaller size that fits without
preempting anyone. After the queue is served, an admitted elastic gang running small grows into the
quota that is still free, unless a gang of equal or higher priority is left waiting for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from gangrun._core import elastic
from gangrun._core.spec import TaskSpec
from gangrun._core.units import format_bytes
from gangrun._errors import SpecError

if TYPE_CHECKING:  # config.py builds on Resources, defined here
    from gangrun._backends.local.config import Config

RESOURCE_NAMES = ("cpu", "memory", "gpu")


@dataclass(frozen=True)
class Resources:
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    gpu: Decimal = Decimal(0)

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory, self.gpu - other.gpu)

    def scaled(self, n: int) -> Resources:
        return Resources(self.cpu * n, self.memory * n, self.gpu * n)

    def fits_in(self, room: Resources) -> bool:
        return all(getattr(self, r) <= getattr(room, r) for r in RESOURCE_NAMES)

    def first_exceeding(self, room: Resources) -> str | None:
        """The first resource of which this asks more than `room` has, or None."""
        return next((r for r in RESOURCE_NAMES if getattr(self, r) > getattr(room, r)), None)

    def for_json(self) -> dict[str, str]:
        return {r: str(getattr(self, r)) for r in RESOURCE_NAMES}

    @classmethod
    def from_json(cls, d: dict[str, str]) -> Resources:
        return cls(*(Decimal(str(d.get(r, "0"))) for r in RESOURCE_NAMES))


ZERO = Resources()


def gang_request(spec: TaskSpec) -> tuple[Resources, Resources]:
    """(per node, whole gang): what submit checks against the quota is what the Workload asks for."""
    per_node = Resources(cpu=spec.resources.cpu, memory=spec.resources.memory, gpu=Decimal(spec.resources.gpu))
    return per_node, per_node.scaled(spec.nodes)


def check_submit(spec: TaskSpec, config: Config) -> None:
    """Refuse at submit what could never be admitted: an unknown queue or priority class, a gang larger
    than the whole quota. Raises SpecError naming the field."""
    if spec.queue not in config.queues:
        raise SpecError("spec.queue", f'unknown queue "{spec.queue}"; the local control plane has: '
                                      f"{', '.join(config.queues)}")
    pc = spec.priority_class or config.default_priority_class
    if pc not in config.priority_classes:
        known = ", ".join(f"{k} ({v})" for k, v in sorted(config.priority_classes.items(), key=lambda kv: kv[1]))
        raise SpecError("spec.priorityClass", f'unknown priority class "{pc}"; known: {known}')
    big = too_big(spec, config.quota)
    if big is not None:
        raise SpecError(f"spec.resources.{big[0]}",
                        f"{big[1]}; lower it or raise the quota with `gangrun local up --{big[0]} ...`")


def too_big(spec: TaskSpec, quota: Resources) -> tuple[str, str] | None:
    """(resource, why) when the gang asks for more than the whole quota: it could never be admitted."""
    per, need = gang_request(spec)
    res = need.first_exceeding(quota)
    if res is None:
        return None
    show = format_bytes if res == "memory" else str
    return res, (f"the gang needs {show(getattr(need, res))} {res} ({spec.nodes} nodes × "
                 f"{show(getattr(per, res))}) but the whole local quota is {show(getattr(quota, res))}")


@dataclass(frozen=True, kw_only=True)
class Request:
    """One gang's claim on the queue: a pending Workload, or an admitted one (with `admitted_at`)."""

    name: str
    priority: int
    order: int  # submission order: the FIFO tie-break among equal priorities
    resources: Resources
    admitted_at: float = 0.0  # when quota was reserved; newer victims go first
    evicting: bool = False  # Evicted=True already, quota not released yet
    # Elastic gangs only: one node's share, the size it asks for (pending) or holds (admitted), and the
    # range it may run in. `may_grow`: admitted, running small, its resize cooldown is over.
    per_node: Resources | None = None
    nodes: int = 0
    least_nodes: int = 0
    full_nodes: int = 0
    may_grow: bool = False

    def at(self, nodes: int) -> Resources:
        assert self.per_node is not None, "only an elastic request has a size"
        return self.per_node.scaled(nodes)
    boost: int = 0  # the priority boost (checkpoint-aware preemption); 0 = none

    @property
    def effective(self) -> int:
        return self.priority + self.boost


@dataclass(frozen=True, kw_only=True)
class Plan:
    admit: tuple[str, ...] = ()
    preempt: tuple[tuple[str, str], ...] = ()  # (victim, preemptor)
    waiting: tuple[str, ...] = ()  # preemptors whose victims are still stopping
    waiting_reasons: dict[str, str] = field(default_factory=dict)  # every pending gang not admitted: why
    sizes: dict[str, int] = field(default_factory=dict)  # elastic gangs admitted below their full size
    grow: tuple[tuple[str, int], ...] = ()  # (admitted elastic gang, the larger size it grows to)


def plan(quota: Resources, admitted: list[Request], pending: list[Request]) -> Plan:
    """Admissions and preemptions for one scheduling cycle. Pure; see the module docstring."""
    free = quota
    for a in admitted:
        free = free - a.resources
    returning = ZERO  # quota of gangs already being evicted: it comes back without new preemptions
    for a in admitted:
        if a.evicting:
            returning = returning + a.resources
    candidates = sorted((a for a in admitted if not a.evicting), key=lambda a: (a.effective, -a.admitted_at, a.name))
    admit: list[str] = []
    preempt: list[tuple[str, str]] = []
    waiting: list[str] = []
    reasons: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for w in sorted(pending, key=lambda p: (-p.effective, p.order, p.name)):
        if w.resources.fits_in(free):
            admit.append(w.name)
            free = free - w.resources
            continue
        smaller = _smaller_size(w, free)
        if not w.resources.fits_in(quota):
            if smaller is not None:
                admit.append(w.name)
                sizes[w.name], free = smaller, free - w.at(smaller)
                continue
            reasons[w.name] = f"the gang needs {_show(w.resources)}, more than the whole quota ({_show(quota)})"
            continue
        if w.resources.fits_in(free + returning):
            # Kueue: "WaitingForPreemptedWorkloads" — the room is already on its way back.
            free, returning = free + returning - w.resources, ZERO
            waiting.append(w.name)
            reasons[w.name] = "waiting for preempted gangs to stop and give their quota back"
            continue
        victims = _victims(w, free + returning, [c for c in candidates if c.effective < w.effective])
        if victims is None and smaller is not None:  # elastic: start on what fits now
            admit.append(w.name)
            sizes[w.name], free = smaller, free - w.at(smaller)
            continue
        if victims is None:
            # Inadmissible for now; BestEffortFIFO lets smaller gangs behind it try.
            reasons[w.name] = (f"waiting for quota: the gang needs {_show(w.resources)} and the gangs running "
                               f"have the same or a higher priority")
            continue
        for v in victims:
            preempt.append((v.name, w.name))
            candidates.remove(v)
            free = free + v.resources
        free, returning = free + returning - w.resources, ZERO
        waiting.append(w.name)
        reasons[w.name] = f"preempting {len(victims)} lower-priority gang(s); waiting for them to stop"
    left = [p.priority for p in pending if p.name in reasons and p.name not in waiting]
    grow = _grow(candidates, free, needed_from=max(left, default=None))
    return Plan(admit=tuple(admit), preempt=tuple(preempt), waiting=tuple(waiting), waiting_reasons=reasons,
                sizes=sizes, grow=grow)


def _smaller_size(w: Request, free: Resources) -> int | None:
    """Elastic: the largest size below the full one that fits in `free` without preempting, or None."""
    if w.per_node is None or w.least_nodes >= w.nodes:
        return None
    return elastic.largest_size(least=w.least_nodes, most=w.nodes - 1, fits=lambda n: w.at(n).fits_in(free))


def _grow(admitted: list[Request], free: Resources, *, needed_from: int | None) -> tuple[tuple[str, int], ...]:
    """Elastic gangs running small take the free quota, higher priority first, unless a gang of equal or
    higher priority is left waiting (`needed_from`: the highest priority left waiting)."""
    grow: list[tuple[str, int]] = []
    for a in sorted(admitted, key=lambda a: (-a.priority, a.admitted_at, a.name)):
        per_node = a.per_node
        if not a.may_grow or per_node is None or (needed_from is not None and needed_from >= a.priority):
            continue
        more = elastic.largest_size(least=1, most=a.full_nodes - a.nodes, fits=_fits_more(per_node, free))
        if more is not None:
            grow.append((a.name, a.nodes + more))
            free = free - per_node.scaled(more)
    return tuple(grow)


def _fits_more(per_node: Resources, room: Resources) -> Callable[[int], bool]:
    return lambda k: per_node.scaled(k).fits_in(room)


def _show(r: Resources) -> str:
    parts = [f"{r.cpu} cpu", f"{format_bytes(r.memory)} memory"]
    if r.gpu:
        parts.append(f"{r.gpu} gpu")
    return ", ".join(parts)


def _victims(w: Request, room: Resources, candidates: list[Request]) -> list[Request] | None:
    """The fewest candidates (in Kueue's order) whose quota makes `w` fit, or None if none can."""
    chosen: list[Request] = []
    for c in candidates:
        chosen.append(c)
        room = room + c.resources
        if w.resources.fits_in(room):
            break
    else:
        return None
    # Kueue's minimal-set pass: walk back from the second-to-last victim and drop any not needed.
    for v in list(reversed(chosen[:-1])):
        if w.resources.fits_in(room - v.resources):
            chosen.remove(v)
            room = room - v.resources
    return chosen
