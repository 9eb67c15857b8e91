"""Least privilege, checked: every service account's RBAC in deploy/ grants what its code uses and
nothing more (issue 29 item 6).

The controller's calls are a table (`gangrun._backends.kube.permissions`) it is held to at call time;
here a task's whole life uses every row of it, and the RBAC of every YAML file under deploy/ is compared
with it both ways. Any other service account found there (the Flyte connector's, when deployed) is
compared with what its calls record against the fake API: a grant it never uses fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangrun._backends.kube.backend import VISIBLE_QUEUES
from gangrun._backends.kube.client import (
    CLUSTER_QUEUES,
    CONFIGMAPS,
    EVENTS,
    JOBSETS,
    LOCAL_QUEUES,
    NODES,
    PODS,
    TASKS,
    WORKLOADS,
)
from gangrun._backends.kube.leader import LeaderElector
from gangrun._backends.kube.permissions import (
    CONTROLLER,
    IMPLIED,
    LEADER_ELECTION,
    PRIORITY_BOOST,
    Permission,
    Scoped,
    UndeclaredCall,
)
from gangrun._backends.kube.reconcile import SETTLE
from gangrun._core import kueue
from gangrun._core.priority_boost import BoostPolicy
from tests.kube.test_controller import Cluster

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONTROLLER_SA = ("gangrun-system", "gangrun-controller")
CONNECTOR_SA_NAME = "gangrun-flyte-connector"
NEVER = {"secrets", "*"}  # resources no gangrun service account may be granted
POWERFUL_VERBS = {"*", "escalate", "bind", "impersonate", "deletecollection"}


# -- deploy/ as grants per service account ------------------------------------------------------------

class Grants:
    def __init__(self) -> None:
        self.cluster: set[Permission] = set()  # through ClusterRoleBindings: every namespace
        self.namespaced: dict[str, set[Permission]] = {}  # through RoleBindings: namespace -> grants


def _docs() -> list[dict[str, Any]]:
    return [d for f in sorted(DEPLOY.rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _expand(rules: Iterable[dict[str, Any]]) -> set[Permission]:
    return {Permission(g, r, v) for rule in rules for g in rule.get("apiGroups") or [""]
            for r in rule.get("resources") or [] for v in rule.get("verbs") or []}


def service_accounts(docs: list[dict[str, Any]]) -> dict[tuple[str, str], Grants]:
    """(namespace, name) of every service account a binding in `docs` names -> what it is granted."""
    roles = {(d["kind"], (d["metadata"].get("namespace") or "") if d["kind"] == "Role" else "", d["metadata"]["name"]):
             d.get("rules") or [] for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    out: dict[tuple[str, str], Grants] = {}
    for d in docs:
        if d.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ns = d["metadata"].get("namespace") or ""
        ref = d["roleRef"]
        rules = roles[(ref["kind"], ns if ref["kind"] == "Role" else "", ref["name"])]
        for s in d.get("subjects") or []:
            if s["kind"] != "ServiceAccount":
                continue
            g = out.setdefault((s["namespace"], s["name"]), Grants())
            if d["kind"] == "ClusterRoleBinding":
                g.cluster |= _expand(rules)
            else:
                g.namespaced.setdefault(ns, set()).update(_expand(rules))
    return out


# -- what the code uses ---------------------------------------------------------------------------------

def _eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def controller_uses() -> set[Permission]:
    """Every permission the controller asks for in a task's life with `--priority-boost`: admission, a
    boost, a stale cache, a preemption seen before its Workload, readmission, a node cordoned under the
    gang, a cancel; then its
    informers' watches, from its own run loop."""
    c = Cluster()
    c.ctl.boost = BoostPolicy()
    c.submit(retries=1, failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    c.admit()
    c.settle()
    c.ctl.jobsets.remove(c.js())  # a stale cache: the JobSet is read from the API server
    c.ctl.queue.add(("ml", "train"))
    c.ctl.process_one(timeout=0)
    c.preempt()
    c.ctl.jobsets.upsert(c.js())  # only the JobSet's event arrived: the Workload is listed afresh
    c.ctl.queue.add(("ml", "train"))
    c.ctl.process_one(timeout=0)
    c.readmit()
    c.settle()
    c.api.put(NODES, {"metadata": {"name": "node-1"}, "spec": {"unschedulable": True}})  # cordoned (B9)
    c.settle()
    c.clock.advance(SETTLE.total_seconds())
    c.settle()  # the NodeMaintenance notices are on: the workers on node-1 are evicted
    c.backend.cancel("train")  # stop notices on the pods, then the JobSet deleted
    c.settle()
    for i in range(2):  # the kubelet stops the cancelled gang: each pod's output is kept as it goes
        c.api.remove(PODS, "ml", f"train-1-workers-0-{i}-abcde")
    scoped = c.ctl.api
    assert isinstance(scoped, Scoped)
    stop = threading.Event()
    loop = threading.Thread(target=c.ctl.run, args=(stop,), kwargs={"workers": 1}, daemon=True)
    loop.start()
    watches = {Permission(i.res.group, i.res.plural, "watch") for i in c.ctl.informers}
    kept = {Permission("", "configmaps", "create"), Permission("", "configmaps", "patch")}  # one pod each
    _eventually(lambda: watches | kept <= scoped.used)
    stop.set()
    loop.join(15)
    return set(scoped.used)


def elector_uses() -> set[Permission]:
    c = Cluster()
    elector = LeaderElector(c.api, namespace="gangrun-system", identity="a")
    assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()
    elector.release()
    assert isinstance(elector.api, Scoped)
    return set(elector.api.used)


def connector_uses() -> set[Permission]:
    """What the Flyte connector's create, get and delete ask of the API server in a project namespace."""
    pytest.importorskip("flyte", reason="the flyte extra is not installed")
    import tempfile

    from tests.harness.kube_fake import FakeApi
    from tests.harness.kube_http import kubeconfig, serve
    from tests.with_flyte import connector_calls, gang_tasks

    api = FakeApi()
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    server = serve(api)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            conn = {"kubeconfig": str(kubeconfig(Path(tmp) / "kubeconfig", server)), "namespace": "ml"}
            meta = connector_calls.create(gang_tasks.flaky, conn, connector_calls.execution_metadata())
            connector_calls.get(meta, conn)
            connector_calls.delete(meta, conn)
    finally:
        server.shutdown()
    # The fake records plurals ("<plural>/<subresource>" for a get of one); their groups are the client's.
    groups = {r.plural: r.group for r in (TASKS, JOBSETS, WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES, PODS, EVENTS)}
    groups[f"{VISIBLE_QUEUES.plural}/{kueue.PENDING_WORKLOADS}"] = VISIBLE_QUEUES.group
    verbs = {"replace": "update", "patch-status": "patch", "log": "get"}
    resources = {"patch-status": "/status", "log": "/log"}
    return {Permission(groups.get(p, ""), p + resources.get(v, ""), verbs.get(v, v)) for v, p, _ in api.calls}


# -- the controller -------------------------------------------------------------------------------------

def test_a_task_s_life_uses_every_row_of_the_controller_s_table_and_nothing_else() -> None:
    """The table is no wish list: each row is a call the controller makes (a call outside it raises)."""
    assert controller_uses() == CONTROLLER | PRIORITY_BOOST
    assert elector_uses() == LEADER_ELECTION


def test_a_call_outside_the_table_raises_before_it_reaches_the_api_server() -> None:
    c = Cluster()
    scoped = Scoped(c.api, CONTROLLER)
    c.api.calls.clear()
    with pytest.raises(UndeclaredCall, match="get clusteredtasks.gangrun.dev"):
        scoped.get(TASKS, "ml", "train")
    with pytest.raises(UndeclaredCall, match="delete configmaps.core"):
        scoped.delete(CONFIGMAPS, "ml", "train.gangrun-output")  # the task's kept output goes with the task
    assert c.api.calls == []


def test_the_controller_s_rbac_is_exactly_its_table() -> None:
    """deploy/ grants the controller's service account the table, nothing missing and nothing extra:
    the cluster-wide rows through ClusterRoles, the Lease only in its own namespace."""
    grants = service_accounts(_docs())[CONTROLLER_SA]
    want = CONTROLLER | PRIORITY_BOOST | IMPLIED
    assert {"missing": want - grants.cluster, "extra": grants.cluster - want} == {"missing": set(), "extra": set()}
    assert grants.namespaced == {CONTROLLER_SA[0]: set(LEADER_ELECTION)}


def test_the_priority_boost_role_holds_only_what_the_boost_adds() -> None:
    """Leaving out the boost's ClusterRole (the flag off) takes away exactly the Workload patch."""
    (role,) = [d for d in _docs() if d.get("kind") == "ClusterRole"
               and d["metadata"]["name"] == "gangrun-controller-priority-boost"]
    assert _expand(role["rules"]) == PRIORITY_BOOST


def test_the_implied_finalizers_right_is_needed_by_the_jobsets_owner_reference() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    (ref,) = c.api.obj(JOBSETS, "ml", "train-1")["metadata"]["ownerReferences"]
    assert ref["blockOwnerDeletion"] is True and {Permission(TASKS.group, "clusteredtasks/finalizers",
                                                                       "update")} == IMPLIED


# -- every service account in deploy/ ------------------------------------------------------------------

def test_no_service_account_in_deploy_may_read_secrets_or_hold_wildcards_or_escalate() -> None:
    for sa, grants in service_accounts(_docs()).items():
        every = grants.cluster.union(*grants.namespaced.values())
        assert {p for p in every if p.resource.split("/")[0] in NEVER or p.verb in POWERFUL_VERBS
                or p.group == "*"} == set(), sa


def test_every_service_account_in_deploy_is_granted_only_what_its_code_uses() -> None:
    """Generic over the files: a service account found anywhere under deploy/ must have its use derived
    here, and any grant beyond that use fails."""
    uses: dict[str, Callable[[], set[Permission]]] = {
        CONTROLLER_SA[1]: lambda: controller_uses() | elector_uses() | IMPLIED,
        CONNECTOR_SA_NAME: connector_uses,
    }
    found = service_accounts(_docs())
    assert CONTROLLER_SA in found
    for (ns, name), grants in found.items():
        assert name in uses, f"deploy/ binds roles to {ns}/{name}: derive what it uses in this test"
        used = uses[name]()
        every = grants.cluster.union(*grants.namespaced.values())
        assert every - used == set(), f"{ns}/{name} is granted what it never uses"


def test_the_connector_s_use_is_recorded_from_its_create_get_and_delete() -> None:
    """The connector's RBAC lives beside its Deployment when deployed; what it may be granted is what
    these calls record."""
    used = connector_uses()
    assert Permission(TASKS.group, "clusteredtasks", "create") in used
    assert Permission(TASKS.group, "clusteredtasks", "patch") in used  # delete asks for a cancel
    assert not any(p.resource == "secrets" for p in used)
