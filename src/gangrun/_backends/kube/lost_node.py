"""How long a worker stays bound to a node that stopped answering: gangrun's default tolerations.

When a node stops reporting (a power loss, a kernel panic, a network partition), the node lifecycle
controller taints it `node.kubernetes.io/unreachable` (or `not-ready`) with effect NoExecute, and the
taint eviction controller deletes its pods once their toleration of that taint runs out. Without a
toleration of their own, the API server's DefaultTolerationSeconds admission gives every pod 300 s:
five minutes in which a gang waits on a worker that is gone. gangrun's workers tolerate both taints for
`LOST_NODE_TOLERATION_SECONDS` instead, so a worker on a lost node is marked for deletion (condition
DisruptionTarget, reason DeletionByTaintManager) soon after the node is declared lost: the loss is
then a node disruption (`failurePolicy.restartOnDisruption`, charged to no budget) even when the node
comes back, instead of a worker failure when its kubelet returns to find the container dead.

A podTemplate that tolerates either key itself (any effect, any seconds) keeps its own toleration for it.
"""

from __future__ import annotations

from typing import Any

LOST_NODE_TOLERATION_SECONDS = 30
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"


def with_lost_node_tolerations(tolerations: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """`tolerations` and, for each of the two keys they do not tolerate already, gangrun's short one."""
    out = list(tolerations or [])
    mine = {t.get("key") for t in out if t.get("effect") in (None, "", "NoExecute")}
    for key in (NOT_READY, UNREACHABLE):
        if key not in mine:
            out.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": LOST_NODE_TOLERATION_SECONDS})
    return out
