"""What a Kueue ClusterQueue has free, read from its spec and status: the edge of elastic sizing.

    capacity(cluster_queue, pending=...) -> Capacity | None

Free nominal quota, per flavor and resource, is `spec.resourceGroups[].flavors[].resources[].nominalQuota`
less what the queue's workloads hold (`status.flavorsReservation`, or `status.flavorsUsage` when that
says more). Borrowing from a cohort is not counted: a gang sized into borrowed quota would be the first
one reclaimed. A gang of n nodes fits when, in every resource group that covers what a node requests,
one flavor has n times that request free (Kueue gives a pod set one flavor per group); a request for a
resource no group covers never fits, as Kueue never admits it.

Total: a malformed ClusterQueue reads as nothing free, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gangrun._core.spec import TaskSpec
from gangrun._core.units import parse_quantity

PODS = "pods"  # Kueue counts a pod set's pods as this resource when a group covers it


@dataclass(frozen=True)
class Group:
    covered: frozenset[str]
    flavors: tuple[tuple[str, Mapping[str, Decimal]], ...]  # (flavor, resource -> free nominal quota), in order


@dataclass(frozen=True)
class Capacity:
    """The free nominal quota of one ClusterQueue, and whether another workload waits for it."""

    groups: tuple[Group, ...] = ()
    contended: bool = False  # a pending workload of equal or higher priority (not the gang's own) needs quota

    def fits(self, per_node: Mapping[str, Decimal], nodes: int, *, held: int = 0) -> bool:
        """Whether `nodes` nodes of `per_node` fit, when the gang already holds `held` nodes' worth
        (its running JobSet, which a resize replaces: its quota comes back first)."""
        want = {r: q * (nodes - held) for r, q in per_node.items() if q > 0}
        if not want:
            return True
        left = set(want)
        for g in self.groups:
            asked = {r: q for r, q in want.items() if r in g.covered}
            if not asked:
                continue
            left -= set(asked)
            if not any(all(free.get(r, Decimal(0)) >= q for r, q in asked.items()) for _, free in g.flavors):
                return False
        return not (left - {PODS})


def per_node(spec: TaskSpec) -> dict[str, Decimal]:
    """What one node of the gang asks Kueue for: its worker's requests and one pod."""
    r = spec.resources
    out = {"cpu": r.cpu, "memory": r.memory, PODS: Decimal(1)}
    if r.gpu:
        out[spec.gpu_resource] = Decimal(r.gpu)
    return out


def capacity(cq: Any, *, contended: bool = False) -> Capacity | None:
    """The Capacity of a ClusterQueue object; None when it is not one (unknown: elasticity stands still)."""
    if not isinstance(cq, dict) or not isinstance(cq.get("spec"), dict):
        return None
    status = s if isinstance(s := cq.get("status"), dict) else {}
    held = _usage(status.get("flavorsReservation"))
    used = _usage(status.get("flavorsUsage"))
    groups = []
    for g in _list(cq["spec"].get("resourceGroups")):
        if not isinstance(g, dict):
            continue
        covered = frozenset(r for r in _list(g.get("coveredResources")) if isinstance(r, str))
        flavors = []
        for f in _list(g.get("flavors")):
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                continue
            name = f["name"]
            free = {}
            for r in _list(f.get("resources")):
                if isinstance(r, dict) and isinstance(r.get("name"), str):
                    taken = max(held.get((name, r["name"]), Decimal(0)), used.get((name, r["name"]), Decimal(0)))
                    free[r["name"]] = _quantity(r.get("nominalQuota")) - taken
            flavors.append((name, free))
        groups.append(Group(covered=covered, flavors=tuple(flavors)))
    return Capacity(groups=tuple(groups), contended=contended)


def _usage(raw: Any) -> dict[tuple[str, str], Decimal]:
    out: dict[tuple[str, str], Decimal] = {}
    for f in _list(raw):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            continue
        for r in _list(f.get("resources")):
            if isinstance(r, dict) and isinstance(r.get("name"), str):
                out[(f["name"], r["name"])] = _quantity(r.get("total"))
    return out


def _quantity(v: Any) -> Decimal:
    try:
        return parse_quantity(v)
    except ValueError:
        return Decimal(0)


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []
