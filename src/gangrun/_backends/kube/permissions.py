"""What the controller may ask of the API server, as a table, and a `KubeApi` that holds it to it.

`deploy/rbac.yaml` grants the controller's service account exactly these rows (a test compares the two
both ways), so the RBAC follows the code rather than a hand list:

    CONTROLLER        every namespace (ClusterRole): the calls a reconcile and its informers make
    PRIORITY_BOOST    every namespace, only with --priority-boost (its own ClusterRole)
    LEADER_ELECTION   the controller's own namespace (Role): the Lease
    IMPLIED           asked of no call, but checked by the API server for what a call carries

`Scoped(api, allowed)` is what the controller and the leader elector talk through: a call outside
`allowed` raises `UndeclaredCall` before it reaches the API server, so a new call fails the unit
tests that make it until the table (and with it the RBAC) names it; `used` records what was asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from gangrun._backends.kube.client import (
    CLUSTER_QUEUES,
    CONFIGMAPS,
    EVENTS,
    EVICTION,
    JOBSETS,
    LEASES,
    LOCAL_QUEUES,
    NODES,
    PODS,
    TASKS,
    WORKLOADS,
    KubeApi,
    Resource,
)


class Permission(NamedTuple):
    group: str  # "" for the core API
    resource: str  # "<plural>" or "<plural>/<subresource>"
    verb: str  # an RBAC verb: get, list, watch, create, update, patch, delete


def _on(res: Resource, *verbs: str, sub: str = "") -> frozenset[Permission]:
    resource = f"{res.plural}/{sub}" if sub else res.plural
    return frozenset(Permission(res.group, resource, v) for v in verbs)


CONTROLLER: frozenset[Permission] = (
    _on(TASKS, "list", "watch")  # the tasks it drives, from an informer
    | _on(TASKS, "patch", sub="status")  # it writes only their status, one merge patch a sync
    | _on(JOBSETS, "list", "watch", "create", "delete")  # one JobSet per attempt; old attempts deleted
    | _on(JOBSETS, "get")  # a JobSet missing from the cache is read before it is called deleted
    | _on(WORKLOADS, "list", "watch")  # why Kueue took a gang back (listed afresh when suspended)
    | _on(LOCAL_QUEUES, "list", "watch") | _on(CLUSTER_QUEUES, "list", "watch")  # elastic gangs' free quota
    | _on(PODS, "list", "watch")  # readiness, failures, disruptions, checkpoints (termination messages)
    | _on(PODS, "patch")  # the stop notice annotation, before a gang is stopped
    | _on(NODES, "list", "watch", "get")  # which nodes are about to go (cordoned, tainted): NodeMaintenance
    | _on(PODS, "create", sub=EVICTION)  # ... and their workers moved off them, as kubectl drain does
    | _on(EVENTS, "create")  # the task's timeline
    | _on(PODS, "get", sub="log")  # each ended worker pod's output, read once to be kept (logkeep.py)
    | _on(CONFIGMAPS, "get", "create", "patch")  # ... into its task's <task>.gangrun-output (kept_output.py)
)
PRIORITY_BOOST: frozenset[Permission] = _on(WORKLOADS, "patch")  # the kueue.x-k8s.io/priority-boost annotation
LEADER_ELECTION: frozenset[Permission] = _on(LEASES, "get", "create", "update")
# The JobSets' ownerReference sets blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement
# admission plugin allows only to who may update the owner's finalizers.
IMPLIED: frozenset[Permission] = _on(TASKS, "update", sub="finalizers")


class UndeclaredCall(RuntimeError):
    """A call outside the table: a bug in gangrun (the RBAC would refuse it), never the cluster's doing,
    so it is no `GangrunError`."""


class Scoped:
    """`KubeApi` passing on only the calls `allowed` names. `used`: every permission asked so far."""

    def __init__(self, api: KubeApi, allowed: Iterable[Permission]) -> None:
        self.inner = api
        self.allowed = frozenset(allowed)
        self.used: set[Permission] = set()

    def _ask(self, res: Resource, verb: str, subresource: str | None = None) -> None:
        p = Permission(res.group, f"{res.plural}/{subresource}" if subresource else res.plural, verb)
        if p not in self.allowed:
            raise UndeclaredCall(f"{verb} {p.resource}.{p.group or 'core'} is not in the table of "
                                 "gangrun._backends.kube.permissions (nor in deploy/rbac.yaml)")
        self.used.add(p)

    def get(self, res: Resource, namespace: str | None, name: str, *,
            subresource: str | None = None) -> dict[str, Any]:
        self._ask(res, "get", subresource)
        return self.inner.get(res, namespace, name, subresource=subresource)

    def list(self, res: Resource, namespace: str | None, *, label_selector: str = "",
             field_selector: str = "") -> dict[str, Any]:
        self._ask(res, "list")
        return self.inner.list(res, namespace, label_selector=label_selector, field_selector=field_selector)

    def create(self, res: Resource, namespace: str | None, body: dict[str, Any], *,
               dry_run: bool = False) -> dict[str, Any]:
        self._ask(res, "create")
        return self.inner.create(res, namespace, body, dry_run=dry_run)

    def replace(self, res: Resource, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._ask(res, "update")
        return self.inner.replace(res, namespace, name, body)

    def patch(self, res: Resource, namespace: str | None, name: str, patch: dict[str, Any], *,
              subresource: str | None = None) -> dict[str, Any]:
        self._ask(res, "patch", subresource)
        return self.inner.patch(res, namespace, name, patch, subresource=subresource)

    def delete(self, res: Resource, namespace: str | None, name: str) -> None:
        self._ask(res, "delete")
        self.inner.delete(res, namespace, name)

    def evict(self, namespace: str, pod: str) -> None:
        self._ask(PODS, "create", EVICTION)
        self.inner.evict(namespace, pod)

    def watch(self, res: Resource, namespace: str | None, *, resource_version: str, label_selector: str = "",
              timeout_seconds: int = 300) -> Iterator[dict[str, Any]]:
        self._ask(res, "watch")
        return self.inner.watch(res, namespace, resource_version=resource_version, label_selector=label_selector,
                                timeout_seconds=timeout_seconds)

    def log_lines(self, namespace: str, pod: str, *, container: str | None = None,
                  follow: bool = False) -> Iterator[str]:
        self._ask(PODS, "get", "log")
        return self.inner.log_lines(namespace, pod, container=container, follow=follow)
