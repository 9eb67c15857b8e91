"""The stop notice's causes and messages, as both backends write them (`gangrun._core.lifecycle.stop_notice`
chooses one; the notice itself, `{"cause", "message", "deadline"}`, is gangrun._ckpt.notice's). Besides
these, a Kueue eviction's cause is Kueue's Evicted reason and an ended attempt's is its error code.

A worker failed: while restarts are left the whole gang restarts (cause `Restart`), else it stops (cause
`WorkerFailed`). Either way the surviving ranks learn which worker failed, instead of a stop whose cause
is unknown. A worker lost with its node stops its peers with cause `NodeDisruption`; a node about to go
stops every worker, before it goes, with cause `NodeMaintenance`. `worker_failed`, `node_lost` and
`node_maintenance` give the cause and message of these stops, to `lifecycle.stop_notice` and to the local
backend's JobSet twin, which stops its gang's processes itself.

A worker told `NodeMaintenance` keeps that notice through the restart it brings about (`replaces`): on
Kubernetes the worker on the node going is evicted, and the disruption and failure of its pod would
otherwise tell the others `NodeDisruption` or `Restart` a moment before JobSet stops them.

`PEER_LOST` are the causes that say a peer is gone: a sharded save still waiting for a part when one of
them arrives is given up after a moment, not at the end of the grace period (gangrun._ckpt.shards).

Every worker imports this module (through its stop notice): it imports nothing, and `policy` takes
WORKER_FAILED from here, not the other way round (the lifecycle engine is no worker's business).
"""

from __future__ import annotations

__all__ = ["ABORTED", "ATTEMPT_ENDED", "NODE_DISRUPTION", "NODE_MAINTENANCE", "PEER_LOST", "RESTART", "WORKER_FAILED",
           "node_lost", "node_maintenance", "replaces", "worker_failed"]

ABORTED = "Aborted"  # the user cancelled the task
ATTEMPT_ENDED = "AttemptEnded"  # an attempt ended for a reason with no error code
WORKER_FAILED = "WorkerFailed"  # a worker failed and no restart is left (`policy` gives the same reason)
RESTART = "Restart"  # a peer failed and the whole gang restarts (failurePolicy.maxRestarts)
NODE_DISRUPTION = "NodeDisruption"  # a peer was lost with its node
NODE_MAINTENANCE = "NodeMaintenance"  # a node of the gang is about to go: save now, the gang moves, charged to nothing
PEER_LOST = frozenset({RESTART, WORKER_FAILED, NODE_DISRUPTION})


def worker_failed(failure: str, *, restart_left: bool) -> tuple[str, str]:
    """(cause, message) for the peers of a worker that failed: the gang restarts while a restart is left,
    else it stops. Whoever stops the gang (the local JobSet twin, the Kubernetes controller) says this."""
    if restart_left:
        return RESTART, f"{failure or 'a worker failed'}; the whole gang restarts"
    return WORKER_FAILED, f"{failure or 'a worker failed'}; no restart left: the gang stops"


def node_maintenance(node: str, why: str) -> tuple[str, str]:
    """(cause, message) for every worker of a gang one of whose nodes is about to go (drained, cordoned for
    maintenance, reclaimed): the workers save in the grace period and the gang restarts elsewhere,
    charged to no budget."""
    return NODE_MAINTENANCE, f"node {node} is about to go ({why}); the gang saves and restarts (not counted)"


def node_lost(reason: str, message: str) -> tuple[str, str]:
    """(cause, message) for the peers of a worker lost with its node (a DisruptionTarget `reason`)."""
    return NODE_DISRUPTION, f"worker lost to node disruption ({reason}): {message}; restarting the gang"


def replaces(told: str | None, cause: str) -> bool:
    """Whether a worker already told `told` (None: nothing yet) is told `cause` instead. The same cause is
    not told again (a new deadline for the same stop would only move it later), and a `NodeMaintenance`
    notice stays through the restart it causes (its eviction's `NodeDisruption`, its failure's `Restart`);
    any other stop (a cancel, an eviction by Kueue, an attempt that ends) replaces it."""
    if told == cause:
        return False
    return not (told == NODE_MAINTENANCE and cause in (NODE_DISRUPTION, RESTART))
