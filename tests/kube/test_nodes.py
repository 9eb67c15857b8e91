"""How many nodes may take a gang's workers, from the nodes' cordons and taints (`nodes.placeable`): what an
elastic gang shrunk onto the nodes left compares to grow back."""

from __future__ import annotations

from typing import Any

import pytest

from gangrun._backends.kube.nodes import placeable
from gangrun._core.maintenance import Toleration

UNREACHABLE = "node.kubernetes.io/unreachable"
# What a worker tolerates: its own pool's taint, and a lost node's NoExecute taint for 30 s (lost_node.py).
WORKER = [Toleration(key="pool", operator="Exists"),
          Toleration(key=UNREACHABLE, operator="Exists", effect="NoExecute")]


def node(*taints: tuple[str, str], cordoned: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "spec": {"unschedulable": cordoned,
                                                "taints": [{"key": k, "effect": e} for k, e in taints]}}


@pytest.mark.parametrize(("case", "n", "want"), [
    ("no taint", node(), 1),
    ("cordoned", node(cordoned=True), 0),
    ("its pool's taint, tolerated", node(("pool", "NoSchedule")), 1),
    ("another pool's taint", node(("gpu", "NoSchedule")), 0),
    ("lost: unreachable NoSchedule and NoExecute (the NoExecute tolerated for a while)",
     node((UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")), 0),
    ("out of service", node(("node.kubernetes.io/out-of-service", "NoExecute")), 0),
    ("PreferNoSchedule keeps no pod off", node(("busy", "PreferNoSchedule")), 1),
    ("a malformed node reads as untainted", {"spec": {"taints": "none"}}, 1),
])
def test_a_node_may_take_a_worker_unless_cordoned_or_tainted_with_what_the_worker_does_not_tolerate(
        case: str, n: dict, want: int) -> None:
    assert placeable([n], WORKER) == want, case


def test_the_count_is_over_every_node() -> None:
    assert placeable([node(), node(cordoned=True), node(("pool", "NoSchedule"))], WORKER) == 2
