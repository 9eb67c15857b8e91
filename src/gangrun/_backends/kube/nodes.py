"""Nodes as the controller reads them: a worker pod's node, its taints and cordon, the pod's tolerations,
what the node informer keeps of a Node, whether a node is about to go (B9), and how many nodes may take
a gang's workers (an elastic gang shrunk onto the nodes left grows back once more may). What a taint or
a cordon means is `gangrun._core.maintenance`'s."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gangrun._backends.kube.fields import as_list, as_str, get
from gangrun._core import maintenance
from gangrun._core.maintenance import Taint, Toleration

Nodes = Mapping[str, Any]  # node name -> Node object (as the controller's node informer keeps it)


def node_name(pod: Any) -> str:
    return as_str(get(pod, "spec", "nodeName"))


def taints(node: Any) -> list[Taint]:
    return [Taint(key=as_str(t.get("key")), value=as_str(t.get("value")), effect=as_str(t.get("effect")))
            for t in as_list(get(node, "spec", "taints")) if isinstance(t, dict) and as_str(t.get("key"))]


def tolerations(pod: Any) -> list[Toleration]:
    return [Toleration(key=as_str(t.get("key")), operator=as_str(t.get("operator")) or "Equal",
                       value=as_str(t.get("value")), effect=as_str(t.get("effect")))
            for t in as_list(get(pod, "spec", "tolerations")) if isinstance(t, dict)]


def node_kept(node: dict[str, Any]) -> dict[str, Any]:
    """What the controller caches of a Node: its name and version, its cordon and its taints (not its
    images, addresses and conditions, most of a Node object)."""
    md, spec = get(node, "metadata"), get(node, "spec")
    md, spec = md if isinstance(md, dict) else {}, spec if isinstance(spec, dict) else {}
    return {"kind": node.get("kind") or "Node",
            "metadata": {k: md[k] for k in ("name", "uid", "resourceVersion") if k in md},
            "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec}}


def node_about_to_go(node: Any) -> bool:
    """Whether a node says it is about to go to a pod that tolerates nothing (which pods to look at again)."""
    return bool(maintenance.about_to_go(taints(node), unschedulable=get(node, "spec", "unschedulable") is True))


def about_to_go(pod: Any, nodes: Nodes) -> str:
    """Why the node of `pod` is about to go for it ("" when it is not, or is unknown): `_core.maintenance`."""
    node = nodes.get(node_name(pod)) if node_name(pod) else None
    if not isinstance(node, dict):
        return ""
    return maintenance.about_to_go(taints(node), unschedulable=get(node, "spec", "unschedulable") is True,
                                   tolerations=tolerations(pod))


def placeable(nodes: Iterable[Any], tolerations: Sequence[Toleration]) -> int:
    """How many of `nodes` a pod with `tolerations` may be placed on, as far as their cordons and taints say:
    not cordoned, every NoSchedule and NoExecute taint tolerated (a lost node is tainted unreachable or
    not-ready, NoSchedule too, which a worker never tolerates). Their free resources and labels are not
    read (the controller keeps neither): a count to compare with itself, not the size a gang fits."""
    def fits(node: Any) -> bool:
        return get(node, "spec", "unschedulable") is not True and all(
            any(t.tolerates(taint) for t in tolerations)
            for taint in taints(node) if taint.effect in (maintenance.NO_SCHEDULE, maintenance.NO_EXECUTE))
    return sum(1 for node in nodes if fits(node))
