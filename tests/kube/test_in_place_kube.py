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
from gangrun._core import worker_env as wenv
from gangrun._core.timeline import EventType
from tests.harness.kube_builders import at, disrupted, jobset_obj, pod_obj, task_spec, terminated, workload_obj
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


# -- a pod deleted under the gang: made again alone, the others restarted in place -----------------------


def deleting(pod: dict[str, Any]) -> dict[str, Any]:
    pod = json.loads(json.dumps(pod))
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    return pod


def replacement(i: int, *, ready: bool = False) -> dict[str, Any]:
    """The pod the Job made for index `i`'s lost one (a new name); NotReady while its launcher waits."""
    pod = with_report_port(pod_obj("train-1", i, ready=ready), IPS[i])
    pod["metadata"]["name"] = name(i).replace("abcde", "fghij")
    return pod


def replaced(restart: int) -> str:
    return json.dumps({"restart": restart, "failed": None, "at": None, "replaced": True})


def test_b10_a_pod_deleted_under_the_gang_is_made_again_alone_and_the_others_restart_in_place() -> None:
    """`kubectl delete pod` on rank 0: its launcher leaves with LOST_EXIT, which the Job ignores, so the Job
    makes that pod again alone. The controller restarts the gang in place at once (counted towards
    maxRestarts, as the failure it is): rank 1 in its own pod, the new rank 0 told to join round 1 when its
    launcher comes up. Nothing counts twice: the lost pod still going, its replacement joining."""
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    running(task)
    gone = deleting(pods()[0])
    actions = step(task, [gone, pods()[1]], {}, t=21)
    (order,) = orders(actions)
    assert order.urls == ("http://10.0.0.2:29510/restart",) and json.loads(order.body)["restart"] == 1
    event = next(a.event for a in actions if isinstance(a, RecordEvent) and a.event.type is EventType.RESTARTING)
    assert event.data == {"inPlace": True, "restart": 1, "remade": [0]}, event
    assert f"pod {name(0)} was deleted" in event.message and "index 0" in event.message
    assert task.status["inPlace"]["restarts"] == 1 and task.status["inPlace"]["lost"] == [[0, name(0)]]
    # rank 1 took the order; the lost pod is still going: nothing more
    assert not orders(step(task, [gone, pods()[1]], {name(1): said(1)}, t=22))
    # the replacement's launcher waits: told round 1, not counted
    new = replacement(0)
    actions = step(task, [new, pods()[1]], {new["metadata"]["name"]: replaced(0)}, t=25)
    (join,) = orders(actions)
    assert join.urls == ("http://10.0.0.1:29510/restart",) and json.loads(join.body)["restart"] == 1
    assert EventType.RESTARTING not in events(actions) and task.status["inPlace"]["restarts"] == 1
    # it runs round 1; the lost pod's last state still read (kept for its checkpoint report): not a new loss
    assert not orders(step(task, [gone, replacement(0, ready=True), pods()[1]], {}, t=26))
    assert task.status["inPlace"]["restarts"] == 1
    # gone for good: the loss is over
    step(task, [replacement(0, ready=True), pods()[1]], {}, t=27)
    assert task.status["inPlace"]["lost"] == [] and task.status["restartAttempt"] == 1
    assert task.status["attempt"] == 1 and task.status["phase"] == "Running"


def test_b10_a_replacement_whose_loss_no_order_covered_restarts_the_gang() -> None:
    """The controller missed the deletion (it was down): the new pod's launcher saying `replaced` is the news."""
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    running(task)
    new = replacement(0)
    actions = step(task, [new, pods()[1]], {new["metadata"]["name"]: replaced(0)}, t=21)
    (order,) = orders(actions)
    assert order.urls == ("http://10.0.0.1:29510/restart", "http://10.0.0.2:29510/restart")
    assert json.loads(order.body)["restart"] == 1 and task.status["inPlace"]["restarts"] == 1


def test_b10_a_readmitted_gang_whose_pods_all_replace_suspended_ones_starts_its_round_uncounted() -> None:
    """Kueue's suspension ended every pod with LOST_EXIT; on readmission the Job's new pods all say `replaced`:
    no restart, they are told to start their own round together."""
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    running(task)
    new = [replacement(0), replacement(1)]
    actions = step(task, new, {p["metadata"]["name"]: replaced(0) for p in new}, t=21)
    (order,) = orders(actions)
    assert len(order.urls) == 2 and json.loads(order.body)["restart"] == 0
    assert EventType.RESTARTING not in events(actions) and not task.status.get("inPlace", {}).get("restarts")


def test_b10_a_pod_disrupted_or_deleted_during_an_eviction_is_not_made_again_alone() -> None:
    """A drain's pod (DisruptionTarget) fails its Job: JobSet recreates the gang, uncounted, as without
    InPlace. A pod deleted while Kueue takes the gang back is the suspension's: no restart either."""
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    running(task)
    drained = deleting(disrupted(pods()[0], failed=False))
    assert not orders(step(task, [drained, pods()[1]], {}, t=21))
    assert not task.status.get("inPlace", {}).get("restarts")
    task = Task(failurePolicy={"maxRestarts": 2, "resumeAfterPreemption": True, "restartStrategy": "InPlace"})
    running(task)
    js = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    task.obj["status"] = reconcile(task.obj, js, PREEMPTED, pods(), now=at(20))[0]
    _, actions = reconcile(task.obj, js, PREEMPTED, [deleting(pods()[0]), pods()[1]], now=at(21))
    assert not orders(actions)


def test_b10_an_in_place_gang_s_job_ignores_a_lost_pod_and_fails_at_any_other_failure() -> None:
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    job = jobset_obj(task.spec).obj()["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job.get("backoffLimit"), job["backoffLimitPerIndex"], job["maxFailedIndexes"]) == (None, 0, 0)
    rules = job["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob"  # a disruption first: JobSet's uncounted restart, as before
    assert rules[1] == {"action": "Ignore", "onExitCodes": {"containerName": "worker", "operator": "In",
                                                            "values": [wenv.LOST_EXIT]}}
    env = {e["name"]: e for e in job["template"]["spec"]["containers"][0]["env"]}
    assert env[wenv.REPLACED]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-index-ignored-failure-count']")
    recreate = jobset_obj(task_spec(failurePolicy={"restartStrategy": "Recreate"})).obj()
    job = recreate["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["backoffLimit"] == 0 and "backoffLimitPerIndex" not in job


def test_b10_a_pod_deleted_before_the_gang_s_readmission_went_with_the_suspension() -> None:
    """The Job keeps a suspended gang's ended pods (LOST_EXIT) until it has made their replacements: after
    readmission they are not losses under the gang, and the replacements start the gang's round uncounted."""
    spec = task_spec(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    old = deleting(terminated(pods()[0], code=wenv.LOST_EXIT))
    old["status"]["phase"] = "Failed"
    old["metadata"].update(deletionTimestamp=at(15).isoformat(), deletionGracePeriodSeconds=20)  # asked at 0:00:-5
    ps = [old, replacement(0), replacement(1)]
    ps[2]["metadata"]["name"] = "other"
    js = jobset_obj(spec).admitted().jobs(ready=0, active=2).obj()
    gang = adapter.observe(js, WL, ps).gang
    said_ = {ps[1]["metadata"]["name"]: in_place.Round(restart=0, replaced=True),
             "other": in_place.Round(restart=0, replaced=True)}
    d = in_place.decide(spec, InPlace(attempt=1), gang, ps, said_, running=True, now=at(30), since=at(10))
    (order,) = orders(d.actions)
    assert len(order.urls) == 2 and json.loads(order.body)["restart"] == 0 and d.state.restarts == 0
    # the same pod deleted after the readmission is a loss under the gang
    d = in_place.decide(spec, InPlace(attempt=1), gang, [old, replacement(1, ready=True)], {}, running=True,
                        now=at(30), since=at(-10))
    assert d.state.restarts == 1 and d.state.lost == ((0, name(0)),)


def test_b10_a_pod_deleted_before_the_gang_was_first_up_restarts_it_in_place_too() -> None:
    """A worker trains for a second before its peer's pod is Ready: a loss then is still the gang's."""
    task = Task(failurePolicy={"maxRestarts": 2, "restartStrategy": "InPlace"})
    task.step(t=0)
    task.step(jobset_obj(task.spec).suspended().obj(), t=1)
    js = jobset_obj(task.spec).admitted().jobs(ready=0, active=1).obj()
    ps = [deleting(pods()[0]), with_report_port(pod_obj("train-1", 1, ready=False), IPS[1])]
    status, actions = reconcile(task.obj, js, WL, ps, now=at(5), rounds={name(1): said(0)})
    assert status is not None and not status.get("started") and status["inPlace"]["restarts"] == 1, status
    assert [json.loads(o.body)["restart"] for o in orders(actions)] == [1]
