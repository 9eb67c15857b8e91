"""B10 on Kubernetes, as pure reconciles: a failed worker's launcher keeps its pod and the controller
restarts the whole gang in place (counted towards maxRestarts, a new round for every launcher, the order
repeated until each has it), falls back to recreating the pods when one cannot be restarted, and fails
the gang when no restart is left."""

from __future__ import annotations

import json
from typing import Any

from gangrun._backends.kube import adapter, in_place
from gangrun._backends.kube.adapter import WorkloadLookup
from gangrun._backends.kube.in_place import InPlace, OrderRestart
from gangrun._backends.kube.reconcile import AnnotatePods, DeleteJobSet, RecordEvent, RequeueAt, reconcile
from gangrun._core.timeline import EventType
from tests.harness.kube_builders import at, jobset_obj, pod_obj, task_spec, terminated, workload_obj
from tests.kube.test_reconcile import PREEMPTED, Task, events, running, with_report_port

WL = WorkloadLookup.found([workload_obj("js-uid").admitted().obj()])
IPS = ("10.0.0.1", "10.0.0.2")


def pods(*, ready: tuple[bool, bool] = (True, True)) -> list[dict[str, Any]]:
    return [with_report_port(pod_obj("train-1", i, ready=ready[i]), IPS[i]) for i in (0, 1)]


def name(i: int) -> str:
    return str(pod_obj("train-1", i)["metadata"]["name"])


def said(restart: int, failed: int | None = None, at_: float | None = None) -> str:
    return json.dumps({"restart": restart, "failed": failed, "at": at_})


def step(task: Task, ps: list, rounds: dict[str, str], *, t: float) -> list:
    js = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    status, actions = reconcile(task.obj, js, WL, ps, now=at(t), rounds=rounds)
    if status is not None:
        task.obj["status"] = status
    return actions


def orders(actions: list) -> list[OrderRestart]:
    return [a for a in actions if isinstance(a, OrderRestart)]


def test_b10_a_failed_worker_restarts_the_gang_in_place_counted_towards_max_restarts() -> None:
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    running(task)
    failed_at = at(20).timestamp()
    actions = step(task, pods(ready=(True, False)), {name(1): said(0, 1, failed_at)}, t=21)
    (order,) = orders(actions)
    assert order.urls == ("http://10.0.0.1:29510/restart", "http://10.0.0.2:29510/restart")  # every launcher
    body = json.loads(order.body)
    assert body["restart"] == 1 and body["notice"]["cause"] == "Restart"
    assert name(1) in body["notice"]["message"] and "exited with code 1" in body["notice"]["message"]
    assert not [a for a in actions if isinstance(a, AnnotatePods)], "the order carries the notice: no pod writes"
    assert EventType.WORKER_EXITED in events(actions)  # the gang stopped then: the restart is restarting, not work
    restarting = next(a.event for a in actions if isinstance(a, RecordEvent) and a.event.type is EventType.RESTARTING)
    assert restarting.data == {"inPlace": True, "restart": 1} and "in place" in restarting.message
    assert any(isinstance(a, RequeueAt) for a in actions)  # looks again whether every launcher has it
    assert task.status["inPlace"]["restarts"] == 1 and task.status["phase"] == "Running"
    assert "restart in progress" in task.status["reason"]
    # both launchers say they run round 1: the restart is done, and counted as JobSet would count it
    actions = step(task, pods(), {name(0): said(1), name(1): said(1)}, t=23)
    assert not orders(actions) and task.status["inPlace"]["confirmed"] is True
    assert task.status["restartAttempt"] == 1 and EventType.RESTARTED in events(actions)
    assert task.status["attempt"] == 1  # no retry


def test_b10_the_order_is_given_again_to_a_launcher_that_has_not_taken_it() -> None:
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    running(task)
    step(task, pods(ready=(True, False)), {name(1): said(0, 1)}, t=21)
    actions = step(task, pods(), {name(0): said(0), name(1): said(1)}, t=22)  # rank 0's push was lost
    (again,) = orders(actions)
    assert again.urls == ("http://10.0.0.1:29510/restart",) and json.loads(again.body)["restart"] == 1
    assert task.status["inPlace"]["restarts"] == 1, "the same restart: not counted twice"
    assert any(isinstance(a, RequeueAt) for a in actions)


def test_b10_with_no_restart_left_the_gang_fails_as_jobset_would_fail_it() -> None:
    task = Task(failurePolicy={"maxRestarts": 1, "restartStrategy": "InPlace"})
    running(task)
    step(task, pods(ready=(True, False)), {name(1): said(0, 1)}, t=21)
    step(task, pods(), {name(0): said(1), name(1): said(1)}, t=22)
    actions = step(task, pods(ready=(False, True)), {name(0): said(1, 137)}, t=30)
    assert not orders(actions)
    assert any(isinstance(a, DeleteJobSet) for a in actions)  # the attempt ends
    assert task.status["phase"] == "Failed" and "exited with code 137" in task.status["message"]
    (told,) = [a for a in actions if isinstance(a, AnnotatePods)]
    notice = json.loads(told.notice)  # the attempt ends: its code is the cause, the failure the message
    assert notice["cause"] == "MaxRetriesExceeded" and "exited with code 137" in notice["message"]


def test_b10_a_gang_with_a_pod_that_cannot_restart_in_place_is_recreated_and_says_why() -> None:
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    running(task)
    done = terminated(pod_obj("train-1", 0, phase="Succeeded", ready=False), code=0)
    actions = step(task, [done, with_report_port(pod_obj("train-1", 1, ready=False), IPS[1])],
                   {name(1): said(0, 1)}, t=21)
    (leave,) = orders(actions)
    assert leave.recreate and leave.urls == ("http://10.0.0.2:29510/restart",)  # its Job fails: JobSet restarts
    event = next(a.event for a in actions if isinstance(a, RecordEvent) and a.event.type is EventType.RESTARTING)
    assert event.data == {"inPlace": False} and f"pod {name(0)} has ended (Succeeded)" in event.message
    assert task.status["inPlace"]["restarts"] == 0, "not an in-place restart: JobSet counts it"
    # The failed launcher has not left by the next sync: told again, the recreate not announced again
    # (whether or not that sync writes the status for another reason).
    ps = [done, with_report_port(pod_obj("train-1", 1, ready=False), IPS[1])]
    js = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    again = in_place.decide(task.spec, InPlace.load(task.obj, 1), adapter.observe(js, WL, ps).gang, ps,
                            {name(1): in_place.Round(restart=0, failed=1)}, running=True, now=at(22))
    assert orders(again.actions) == [leave] and EventType.RESTARTING not in events(again.actions)


def test_b10_a_failure_inside_an_eviction_restarts_nothing() -> None:
    task = Task(failurePolicy={"maxRestarts": 2, "resumeAfterPreemption": True, "restartStrategy": "InPlace"})
    running(task)
    js = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    task.obj["status"] = reconcile(task.obj, js, PREEMPTED, pods(), now=at(20))[0]  # Kueue takes the gang back
    assert task.status["evictions"]
    _, actions = reconcile(task.obj, js, PREEMPTED, pods(ready=(True, False)), now=at(21),
                           rounds={name(1): said(0, 143)})
    assert not orders(actions)


def test_b10_recreate_asks_no_launcher_and_orders_nothing() -> None:
    spec = task_spec(failurePolicy={"restartStrategy": "Recreate"})
    assert in_place.targets(spec, InPlace(attempt=1), pods(ready=(False, False))) == {}
    task = Task(failurePolicy={"restartStrategy": "Recreate", "maxRestarts": 2})
    running(task)
    assert not orders(step(task, pods(ready=(True, False)), {name(1): said(0, 1)}, t=21))
    pod = jobset_obj(task.spec).obj()["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "readinessProbe" not in pod["containers"][0]


def test_b10_the_launchers_asked_are_the_not_ready_ones_and_all_while_an_order_is_unconfirmed() -> None:
    spec = task_spec(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    ps = pods(ready=(True, False)) + [pod_obj("train-1", 2, phase="Pending", ready=False)]
    assert in_place.targets(spec, InPlace(attempt=1), ps) == {name(1): "http://10.0.0.2:29510/round"}
    unconfirmed = InPlace(attempt=1, restarts=1, ordered=1, confirmed=False)
    assert sorted(in_place.targets(spec, unconfirmed, ps)) == [name(0), name(1)]


def test_b10_in_place_restarts_are_kept_per_attempt() -> None:
    stored = InPlace(attempt=2, restarts=3, ordered=3, confirmed=True, failure="f", at=at(5)).for_storage()
    task = {"status": stored}
    assert InPlace.load(task, 2) == InPlace(attempt=2, restarts=3, ordered=3, confirmed=True, failure="f", at=at(5))
    assert InPlace.load(task, 3) == InPlace(attempt=3)
    assert InPlace().for_storage() == {}


def test_b10_a_worker_that_fails_again_during_the_restart_is_a_second_restart_until_none_is_left() -> None:
    """A restart storm: the same worker fails in round 1 before every launcher said it has the order; the
    gang restarts again (round 2), and a third failure with maxRestarts 2 fails it."""
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    running(task)
    step(task, pods(ready=(True, False)), {name(1): said(0, 1)}, t=21)
    actions = step(task, pods(ready=(True, False)), {name(0): said(0), name(1): said(1, 1)}, t=22)
    assert [json.loads(o.body)["restart"] for o in orders(actions)] == [2]
    assert task.status["inPlace"]["restarts"] == 2
    actions = step(task, pods(ready=(True, False)), {name(0): said(2), name(1): said(2, 1)}, t=24)
    assert not orders(actions) and task.status["phase"] == "Failed"


def test_b10_a_preemption_while_the_gang_restarts_in_place_orders_nothing_more() -> None:
    task = Task(failurePolicy={"maxRestarts": 2, "resumeAfterPreemption": True, "restartStrategy": "InPlace"})
    running(task)
    step(task, pods(ready=(True, False)), {name(1): said(0, 1)}, t=21)
    js = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    status, actions = reconcile(task.obj, js, PREEMPTED, pods(ready=(True, False)), now=at(22),
                                rounds={name(0): said(1), name(1): said(1, 143)})
    assert not [o for o in orders(actions) if json.loads(o.body)["restart"] > 1]
    assert status is not None and status["evictions"] and status["inPlace"]["restarts"] == 1


def test_b10_after_jobset_recreates_the_gang_its_new_pods_failures_restart_it_in_place_again() -> None:
    """One restart in place, then one by recreate (JobSet's restart 1): the new pods' launchers run JobSet's
    round 1, which is below the gang's count (2); their failure is still news, and the next order names
    round 3."""
    task = Task(failurePolicy={"maxRestarts": 3, "restartStrategy": "InPlace"})
    running(task)
    step(task, pods(ready=(True, False)), {name(1): said(0, 1)}, t=21)
    step(task, pods(), {name(0): said(1), name(1): said(1)}, t=22)
    again = jobset_obj(task.spec).admitted().restarts(1).jobs(ready=1, active=1).obj()
    new = [with_report_port(pod_obj("train-1", i, restart=1, ready=i == 0), IPS[i]) for i in (0, 1)]
    status, actions = reconcile(task.obj, again, WL, new, now=at(40), rounds={name(1): said(1, 2)})
    assert [json.loads(o.body)["restart"] for o in orders(actions)] == [3]
    assert status is not None and status["inPlace"]["restarts"] == 2 and status["inPlace"]["jobsetRound"] == 1
