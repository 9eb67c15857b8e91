"""deploy/rbac.yaml grants the controller every call the code makes, and no reconcile hits a 403."""

from __future__ import annotations

from pathlib import Path

import yaml

from gangrun._backends.kube.client import JOBSETS, TASKS
from gangrun._backends.kube.leader import LeaderElector
from gangrun._core.priority_boost import BoostPolicy
from tests.kube.test_controller import Cluster

ROOT = Path(__file__).resolve().parents[2]
# FakeApi's verbs → the RBAC (resource suffix, verb) they need.
VERBS = {"get": ("", "get"), "list": ("", "list"), "watch": ("", "watch"), "create": ("", "create"),
         "replace": ("", "update"), "patch": ("", "patch"), "delete": ("", "delete"),
         "patch-status": ("/status", "patch"), "log": ("/log", "get"), "evict": ("/eviction", "create")}


def _grants(kind: str, name: str) -> set[tuple[str, str]]:
    """(resource, verb) pairs a Role or ClusterRole of deploy/rbac.yaml grants."""
    docs = yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text())
    role = next(d for d in docs if d and d["kind"] == kind and d["metadata"]["name"] == name)
    return {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_controller_role_grants_every_call_a_task_s_life_makes() -> None:
    c = Cluster()
    c.submit(retries=1, failurePolicy={"resumeAfterPreemption": True})
    c.api.calls.clear()  # what the user's backend did is not the controller's business
    c.settle()
    c.admit()
    c.settle()
    c.preempt(deactivate=True)
    c.settle()
    c.admit(2)
    c.settle()
    c.complete(2)
    c.settle()
    assert c.ctl.keeper is not None
    c.ctl.keeper.wait()  # each ended pod's output, kept by a pool of threads of its own
    assert {("configmaps", "create"), ("pods/log", "get")} <= {(p + VERBS[v][0], VERBS[v][1]) for v, p, _ in c.api.calls}
    calls = {(plural + VERBS[verb][0], VERBS[verb][1]) for verb, plural, _ in c.api.calls}
    calls |= {(i.res.plural, "watch") for i in c.ctl.informers}  # settle() relists; the real loop watches too
    assert calls - _grants("ClusterRole", "gangrun-controller") == set()


def test_the_controller_may_block_deletion_of_the_task_that_owns_its_jobsets() -> None:
    # With OwnerReferencesPermissionEnforcement on, `blockOwnerDeletion: true` needs `update` on the
    # owner's finalizers; without it every JobSet create is refused.
    c = Cluster()
    c.submit()
    c.settle()
    (ref,) = c.api.obj(JOBSETS, "ml", "train-1")["metadata"]["ownerReferences"]
    assert ref["blockOwnerDeletion"] is True
    assert (f"{TASKS.plural}/finalizers", "update") in _grants("ClusterRole", "gangrun-controller")


def test_the_leader_election_role_grants_what_the_elector_calls() -> None:
    c = Cluster()
    elector = LeaderElector(c.api, namespace="gangrun-system", identity="a")
    assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()
    elector.release()
    calls = {(plural, VERBS[verb][1]) for verb, plural, _ in c.api.calls if plural == "leases"}
    assert calls - _grants("Role", "gangrun-leader-election") == set()


def test_the_priority_boost_role_grants_what_the_boosting_controller_adds() -> None:
    """With `--priority-boost` the controller also patches Workloads: its own ClusterRole plus the
    priority-boost one cover every call, and the base role alone does not (the extra role is needed)."""
    c = Cluster()
    c.ctl.boost = BoostPolicy()
    c.submit(failurePolicy={"resumeAfterPreemption": True})
    c.api.calls.clear()
    c.settle()
    c.admit()
    c.settle()
    c.preempt()
    c.settle()
    calls = {(plural + VERBS[verb][0], VERBS[verb][1]) for verb, plural, _ in c.api.calls}
    calls |= {(i.res.plural, "watch") for i in c.ctl.informers}
    base = _grants("ClusterRole", "gangrun-controller")
    assert ("workloads", "patch") in calls - base
    assert calls - base - _grants("ClusterRole", "gangrun-controller-priority-boost") == set()
