"""Which nodes are about to go (B9): the one place that names the taints that say so.

A worker's node is about to go, and its gang stops with cause `NodeMaintenance` (a final save, then a
restart elsewhere, charged to no budget), when the node

* is cordoned: `spec.unschedulable` (`kubectl cordon`, the first step of `kubectl drain`), which
  Kubernetes also marks with the taint `node.kubernetes.io/unschedulable:NoSchedule`;
* carries one of `NOTICE_TAINTS`, whatever its effect: a cloud's or a tool's notice that the node is
  being reclaimed or maintained;
* carries any other `NoExecute` taint, but for `NODE_FAILED_TAINTS`: the node lifecycle controller's
  marks of a node that already failed (a node lost, not a notice; its workers are gone with it and
  come back as a node disruption).

A worker whose pod tolerates the taint (Kubernetes' matching: key, operator, value, effect; a
toleration with `tolerationSeconds` tolerates too) is not affected: a pod template that tolerates
`node.kubernetes.io/unschedulable` rides out a cordon. Other `NoSchedule` taints (a GPU node's, a
team's) and `PreferNoSchedule` ones say nothing about the node going.

Pure: taints and tolerations come as values; the Kubernetes adapter reads them from Node and Pod objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NO_EXECUTE = "NoExecute"
NO_SCHEDULE = "NoSchedule"

# key -> what it says, for the stop notice's message. Each is put on a node before it goes.
NOTICE_TAINTS: Mapping[str, str] = {
    UNSCHEDULABLE: "cordoned",
    "node.kubernetes.io/out-of-service": "out of service",
    "cloud.google.com/impending-node-termination": "GKE: the node is about to be terminated",
    "aws-node-termination-handler/spot-itn": "AWS: spot interruption notice",
    "aws-node-termination-handler/scheduled-maintenance": "AWS: scheduled maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination": "AWS: Auto Scaling group termination",
    "ToBeDeletedByClusterAutoscaler": "cluster autoscaler: scaling the node down",
    "karpenter.sh/disrupted": "Karpenter: disrupting the node",
}
# NoExecute marks of a node that failed: not a notice (the pods tolerate them 300 s by default anyway).
NODE_FAILED_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""

    def __str__(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""  # "" with operator Exists: every key
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: str = ""  # "": every effect

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' rule (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and bool(self.key) and self.value == taint.value


def notice_of(taint: Taint) -> str:
    """What `taint` says of its node's going ("" when it says nothing)."""
    said = NOTICE_TAINTS.get(taint.key)
    if said is not None:
        return said
    if taint.effect == NO_EXECUTE and taint.key not in NODE_FAILED_TAINTS:
        return "NoExecute taint"
    return ""


def about_to_go(taints: Iterable[Taint], *, unschedulable: bool = False,
                tolerations: Iterable[Toleration] = ()) -> str:
    """Why a node with `taints` (cordoned when `unschedulable`) is about to go for a pod with `tolerations`,
    naming the taint, e.g. `cordoned: taint node.kubernetes.io/unschedulable:NoSchedule`; "" when it is not
    (or the pod tolerates every taint that says so)."""
    taints = list(taints)
    if unschedulable and not any(t.key == UNSCHEDULABLE for t in taints):
        taints.insert(0, Taint(UNSCHEDULABLE, effect=NO_SCHEDULE))  # cordoned a moment before the taint is set
    tolerations = list(tolerations)
    for taint in taints:
        said = notice_of(taint)
        if said and not any(t.tolerates(taint) for t in tolerations):
            return f"{said}: taint {taint}"
    return ""
