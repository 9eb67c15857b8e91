"""B9: which nodes are about to go (`gangrun._core.maintenance`, the one place naming the taints) and the
stop notice a gang gets for one (`lifecycle.stop_notice`), the same for both backends."""

from __future__ import annotations

import pytest

from gangrun._core import lifecycle, maintenance, stop_causes
from gangrun._core.maintenance import Taint, Toleration
from gangrun._core.observation import observed
from gangrun._core.phases import Phase
from tests.core.test_lifecycle import RUNNING, spec
from tests.harness.builders import at, make_gang, make_workload

CORDON = Taint("node.kubernetes.io/unschedulable", effect="NoSchedule")
NOT_READY = Taint("node.kubernetes.io/not-ready", effect="NoExecute")
GPU = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(("taints", "unschedulable", "tolerations", "why"), [
    pytest.param([], False, [], "", id="a-plain-node-stays"),
    pytest.param([], True, [], "cordoned: taint node.kubernetes.io/unschedulable:NoSchedule",
                 id="cordoned-before-its-taint-is-set"),
    pytest.param([CORDON], True, [], "cordoned: taint node.kubernetes.io/unschedulable:NoSchedule",
                 id="cordoned"),
    pytest.param([Taint("node.kubernetes.io/out-of-service", "nodeshutdown", "NoExecute")], False, [],
                 "out of service: taint node.kubernetes.io/out-of-service=nodeshutdown:NoExecute", id="out-of-service"),
    pytest.param([Taint("cloud.google.com/impending-node-termination", effect="NoSchedule")], False, [],
                 "GKE: the node is about to be terminated: taint cloud.google.com/impending-node-termination:NoSchedule",
                 id="gke-termination-notice"),
    pytest.param([Taint("aws-node-termination-handler/spot-itn", "1", "NoSchedule")], False, [],
                 "AWS: spot interruption notice: taint aws-node-termination-handler/spot-itn=1:NoSchedule",
                 id="aws-spot-interruption"),
    pytest.param([Taint("aws-node-termination-handler/rebalance-recommendation", "1", "NoSchedule")], False, [], "",
                 id="a-rebalance-recommendation-is-no-notice"),
    pytest.param([Taint("example.com/draining", effect="NoExecute")], False, [],
                 "NoExecute taint: taint example.com/draining:NoExecute", id="any-noexecute-taint"),
    pytest.param([NOT_READY], False, [], "", id="a-failed-node-is-a-disruption-not-a-notice"),
    pytest.param([GPU], False, [], "", id="other-noschedule-taints-say-nothing"),
    pytest.param([CORDON], True, [Toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule")], "",
                 id="a-pod-tolerating-the-cordon-rides-it-out"),
    pytest.param([Taint("example.com/draining", "yes", "NoExecute")], False,
                 [Toleration("example.com/draining", "Equal", "no")], "NoExecute taint: taint example.com/draining=yes:NoExecute",
                 id="a-toleration-of-another-value-does-not-tolerate"),
    pytest.param([Taint("example.com/draining", "yes", "NoExecute")], False, [Toleration(operator="Exists")], "",
                 id="tolerating-everything"),
    pytest.param([GPU, CORDON], True, [Toleration("nvidia.com/gpu", "Exists")],
                 "cordoned: taint node.kubernetes.io/unschedulable:NoSchedule", id="the-notice-among-other-taints"),
])
def test_b9_which_taints_say_a_node_is_about_to_go(taints, unschedulable, tolerations, why) -> None:
    assert maintenance.about_to_go(taints, unschedulable=unschedulable, tolerations=tolerations) == why


NOTICE = stop_causes.node_maintenance("node-1", "cordoned: taint node.kubernetes.io/unschedulable:NoSchedule")


@pytest.mark.parametrize(("gang", "fields", "cause"), [
    pytest.param(make_gang().ready().node_going().obj(), {}, stop_causes.NODE_MAINTENANCE, id="a-node-about-to-go"),
    pytest.param(make_gang().ready().node_going().disrupted().obj(), {}, stop_causes.NODE_MAINTENANCE,
                 id="its-own-eviction-does-not-turn-it-into-a-disruption"),
    pytest.param(make_gang().ready().node_going().obj(), {"failurePolicy": {"restartOnDisruption": False}}, None,
                 id="without-restart-on-disruption-gangrun-leaves-it-to-the-cluster"),
    pytest.param(make_gang().ready().node_going().completed().obj(), {}, None, id="a-completed-gang-is-not-moved"),
    pytest.param(make_gang().ready().node_going().failed().obj(), {"retries": 1}, "FailedJobs",
                 id="a-failed-gang-ends-its-attempt-instead"),
])
def test_b9_a_gang_on_a_node_about_to_go_is_told_node_maintenance(gang, fields, cause) -> None:
    s = lifecycle.step(spec(**fields), RUNNING, observed(gang), now=at(10))
    got = s.notice.cause if s.notice is not None else None
    assert got == cause, s.notice
    if cause == stop_causes.NODE_MAINTENANCE:
        assert s.notice == lifecycle.Notice(*NOTICE, at(30))  # the grace period of the spec: 20 s
        assert s.notice.message == ("node node-1 is about to go (cordoned: taint node.kubernetes.io/unschedulable:"
                                    "NoSchedule); the gang saves and restarts (not counted)")
        assert [p.gang for p in s.parts] == [None] and s.state.attempt == 1  # no retry: the attempt goes on


def test_b9_a_kueue_eviction_outranks_a_node_about_to_go() -> None:
    gang = make_gang().ready().node_going().obj()
    s = lifecycle.step(spec(failurePolicy={"resumeAfterPreemption": True}), RUNNING,
                       observed(gang, make_workload().preemption().obj()), now=at(10))
    assert s.notice is not None and s.notice.cause != stop_causes.NODE_MAINTENANCE


@pytest.mark.parametrize(("told", "cause", "replaced"), [
    (None, stop_causes.NODE_MAINTENANCE, True),
    (stop_causes.NODE_MAINTENANCE, stop_causes.NODE_MAINTENANCE, False),
    (stop_causes.NODE_MAINTENANCE, stop_causes.NODE_DISRUPTION, False),
    (stop_causes.NODE_MAINTENANCE, stop_causes.RESTART, False),
    (stop_causes.NODE_MAINTENANCE, stop_causes.ABORTED, True),
    (stop_causes.NODE_MAINTENANCE, "Preempted", True),
    (stop_causes.NODE_DISRUPTION, stop_causes.NODE_MAINTENANCE, True),
])
def test_b9_a_worker_told_node_maintenance_keeps_it_through_the_restart_it_causes(told, cause, replaced) -> None:
    assert stop_causes.replaces(told, cause) is replaced


def test_b9_the_restart_for_a_node_about_to_go_is_a_disruption_charged_to_no_budget() -> None:
    """The gang restarts as for a node disruption: `restarts` goes up, not `restarts_count_towards_max`,
    no retry is used, as the local twin's drain does."""
    before = make_gang().ready().node_going().disrupted().obj()
    s = lifecycle.step(spec(retries=0, failurePolicy={"maxRestarts": 0}), RUNNING, observed(before), now=at(10))
    restarted = make_gang().disrupted(restart_attempt=0).restarting_for_disruption().obj()
    s2 = lifecycle.step(spec(retries=0, failurePolicy={"maxRestarts": 0}), s.state, observed(restarted), now=at(12))
    assert s2.state.phase is not Phase.FAILED and s2.state.attempt == 1
    assert (s2.state.user_retries_used, s2.state.system_retries_used) == (0, 0)
    assert restarted.restarts_not_counted == 1 and len(s2.state.disruptions) == 1
