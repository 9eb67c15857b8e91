"""One reconcile as a pure function: objects in, the status to write and the actions out (S2–S9 on k8s)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gangrun import _checkpoint_report
from gangrun._backends.kube import crd
from gangrun._backends.kube.adapter import WorkloadLookup
from gangrun._backends.kube.reconcile import (
    AnnotatePods,
    CreateJobSet,
    DeleteJobSet,
    RecordEvent,
    RequeueAt,
    event_type,
    reconcile,
)
from gangrun._backends.kube.render import CONTAINER
from gangrun._core.pod_template import REPORT_PORT_NAME
from gangrun._core.timeline import EventType
from tests.harness.kube_builders import (
    PREEMPTION_MESSAGE,
    at,
    commit_report,
    disrupted,
    jobset_obj,
    pod_obj,
    started,
    task_obj,
    task_spec,
    terminated,
    workload_obj,
)
from tests.harness.kube_fake import merge_patch

NONE = WorkloadLookup()


class Task:
    """A ClusteredTask whose status is written back after each reconcile, like the shell does."""

    def __init__(self, **spec: Any) -> None:
        self.obj = task_obj(**spec)
        self.spec = task_spec(**spec)

    def step(self, js: dict | None = None, wl: WorkloadLookup = NONE, pods: list | None = None, *, t: float = 0,
             owned: list | None = None) -> tuple[dict | None, list]:
        status, actions = reconcile(self.obj, js, wl, pods or [], now=at(t), owned_jobsets=owned or [])
        if status is not None:
            self.obj["status"] = status
        return status, actions

    @property
    def status(self) -> dict:
        return self.obj["status"]


def kinds(actions: list) -> list[str]:
    return [type(a).__name__ for a in actions if not isinstance(a, RecordEvent)]


def events(actions: list) -> list[EventType]:
    return [a.event.type for a in actions if isinstance(a, RecordEvent)]


def running(task: Task, *, t: float = 10) -> dict:
    """Drive a new task to Running on attempt 1; returns its JobSet."""
    task.step(t=0)
    task.step(jobset_obj(task.spec).suspended().obj(), t=1)
    js = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    wl = WorkloadLookup.found([workload_obj("js-uid").admitted().obj()])
    task.step(js, wl, [pod_obj("train-1", 0), pod_obj("train-1", 1)], t=t)
    assert task.status["phase"] == "Running"
    return js


def test_a_new_task_persists_attempt_1_then_creates_its_suspended_jobset() -> None:
    task = Task()
    status, actions = task.step()
    assert status["phase"] == "Queued" and status["attempt"] == 1 and status["jobSet"] == "train-1"
    assert kinds(actions) == ["CreateJobSet"]
    create = next(a for a in actions if isinstance(a, CreateJobSet))
    assert create.body["spec"]["suspend"] is True
    assert create.body["metadata"]["ownerReferences"][0]["uid"] == "task-uid"
    assert create.body["metadata"]["namespace"] == "ml"
    assert events(actions) == [EventType.SUBMITTED, EventType.GANG_CREATED]


def test_a_task_never_loads_a_checkpoint_it_did_not_write_kube_reconcile() -> None:
    """The JobSet a ClusteredTask creates saves under a root keyed by the task's metadata.uid; one that
    asks for resumeFrom names it on the timeline as its gang of attempt 1 is created."""
    task = Task(checkpoint={"resumeFrom": "train"})
    task.obj["metadata"]["uid"] = "uid-2"
    _, actions = task.step()
    create = next(a for a in actions if isinstance(a, CreateJobSet))
    env = {e["name"]: e.get("value") for e in
           create.body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GANGRUN_CHECKPOINT_PATH"] == "file:///var/lib/gangrun/checkpoints/train/uid-2/attempt-1"
    assert env["GANGRUN_RESUME_FROM"] == "file:///var/lib/gangrun/checkpoints/train"
    created = next(a.event for a in actions if isinstance(a, RecordEvent) and a.event.type is EventType.GANG_CREATED)
    assert "resumes from task train's newest checkpoint" in created.message
    assert created.data == {"resumeFrom": "train"}


def test_nothing_changed_means_no_status_write_and_no_repeated_events() -> None:
    task = Task()
    task.step()
    status, actions = task.step(t=1)  # the JobSet is not in the cache yet
    assert status is None
    assert kinds(actions) == ["CreateJobSet"]  # idempotent: AlreadyExists is fine
    assert events(actions) == []


def test_s3_a_suspended_gang_that_never_started_waits_for_admission() -> None:
    task = Task()
    task.step()
    status, actions = task.step(jobset_obj(task.spec).suspended().obj(), t=1)
    assert status["phase"] == "WaitingForResources"
    assert status["reason"] == "waiting for gang admission: jobset is suspended"
    assert kinds(actions) == []


def test_running_gang_reports_restart_attempt() -> None:
    task = Task()
    running(task)
    assert task.status["reason"] == "running (restart attempt 0)" and task.status["started"] is True
    cond = {c["type"]: c for c in task.status["conditions"]}
    assert cond["Running"]["status"] == "True" and cond["Finished"]["status"] == "False"


def test_s4_preemption_ends_the_attempt_deletes_old_and_creates_next_in_one_reconcile() -> None:
    task = Task(retries=1)
    running(task)
    js = jobset_obj(task.spec).suspended().jobs(suspended=1).obj()
    wl = WorkloadLookup.found([workload_obj("js-uid").admitted().evicted("Preempted", PREEMPTION_MESSAGE)
                               .preempted().obj()])
    status, actions = task.step(js, wl, t=20)
    assert status["attempt"] == 2 and status["userRetriesUsed"] == 1 and status["phase"] == "Queued"
    assert [a.name for a in actions if isinstance(a, (DeleteJobSet, CreateJobSet))] == ["train-1", "train-2"]
    assert status["attempts"][0]["outcome"] == "UserRetry"
    assert "gang evicted by kueue (Preempted, InClusterQueue)" in status["attempts"][0]["reason"]
    assert status["evictions"][0]["reason"] == "Preempted"  # recorded: Kueue overwrites it at readmission
    # The whole story of the step, in order: the eviction, the attempt it ended, the next attempt's gang.
    assert events(actions) == [EventType.PREEMPTED, EventType.ATTEMPT_ENDED, EventType.GANG_CREATED]
    create = next(a for a in actions if isinstance(a, CreateJobSet))
    env = {e["name"]: e.get("value") for e in
           create.body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GANGRUN_PREV_CHECKPOINT_PATH"].endswith("/train/task-uid/attempt-1")


def test_s5_resume_after_preemption_keeps_the_attempt_and_jobset_until_readmission() -> None:
    task = Task(failurePolicy={"resumeAfterPreemption": True})
    running(task)
    js = jobset_obj(task.spec).suspended().obj()
    evicted = workload_obj("js-uid").admitted().evicted("Preempted", PREEMPTION_MESSAGE).preempted()
    status, actions = task.step(js, WorkloadLookup.found([evicted.obj()]), t=20)
    assert status["attempt"] == 1 and status["phase"] == "Running"
    assert status["reason"].endswith("; waiting for re-admission")
    assert kinds(actions) == []
    assert status["eviction"]["reason"] == "Preempted"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Evicted"] == "True"
    back = jobset_obj(task.spec).admitted().jobs(ready=1).obj()
    status, actions = task.step(back, WorkloadLookup.found([evicted.readmitted().obj()]),
                                [pod_obj("train-1", 0), pod_obj("train-1", 1)], t=80)
    assert status["attempt"] == 1 and status["reason"] == "running (restart attempt 0)"
    assert "eviction" not in status or status["eviction"] is None
    assert EventType.READMITTED in events(actions)


def test_s5_a_gang_waiting_for_readmission_is_not_rewritten_on_every_reconcile() -> None:
    # The API server stores the status as the merge patch leaves it: a nested null (the eviction's
    # `readmittedAt`) is dropped. Seen again unchanged, the wait must not be written again: every write
    # is a watch event that queues the task, so the wait would become a loop of status writes.
    task = Task(failurePolicy={"resumeAfterPreemption": True})
    running(task)
    js = jobset_obj(task.spec).suspended().obj()
    evicted = WorkloadLookup.found([workload_obj("js-uid").admitted().evicted("Preempted", PREEMPTION_MESSAGE)
                                    .preempted().obj()])
    status, _ = reconcile(task.obj, js, evicted, now=at(20))
    task.obj["status"] = merge_patch(task.obj["status"], status)
    assert "readmittedAt" not in task.status["eviction"]
    status, _ = task.step(js, evicted, t=21)
    assert status is None


def test_s7_suspended_without_evicted_waits_and_asks_to_be_woken() -> None:
    task = Task()
    running(task)
    js = jobset_obj(task.spec).suspended().obj()
    status, actions = task.step(js, WorkloadLookup.found([workload_obj("js-uid").admitted().obj()]), t=20)
    assert status["attempt"] == 1 and status["phase"] == "Running"
    wake = [a for a in actions if isinstance(a, RequeueAt)]
    assert wake and wake[0].at == at(50)  # the engine's suspend grace, 30s


def test_s4_unreadable_workload_on_a_started_suspended_gang_is_a_system_retry() -> None:
    task = Task()
    running(task)
    js = jobset_obj(task.spec).suspended().obj()
    status, actions = task.step(js, WorkloadLookup.unreadable("403: forbidden"), t=20)
    assert status["attempt"] == 2 and status["systemRetriesUsed"] == 1 and status["userRetriesUsed"] == 0
    assert kinds(actions) == ["DeleteJobSet", "CreateJobSet"]


def test_cancel_annotation_aborts_and_deletes_the_jobset() -> None:
    task = Task()
    running(task)
    task.obj["metadata"]["annotations"] = {crd.CANCEL_ANNOTATION: "now"}
    status, actions = task.step(jobset_obj(task.spec).admitted().obj(), t=30)
    assert status["phase"] == "Aborted"
    assert [a.name for a in actions if isinstance(a, DeleteJobSet)] == ["train-1"]
    assert EventType.ABORTED in events(actions)
    assert task.step(t=31) == (None, [])  # terminal: nothing more to do


def test_jobsets_of_other_attempts_are_garbage_collected() -> None:
    task = Task(retries=1)
    task.step()
    task.obj["status"]["attempt"] = 2
    old = jobset_obj(task.spec, attempt=1).obj()
    current = jobset_obj(task.spec, attempt=2).suspended().obj()
    foreign = jobset_obj(task_spec("other"), attempt=1).obj()
    _, actions = task.step(current, owned=[old, current, foreign], t=5)
    assert [a.name for a in actions if isinstance(a, DeleteJobSet)] == ["train-1"]


def test_a_jobset_of_another_attempt_is_not_taken_for_the_current_one() -> None:
    task = Task()
    task.step()
    stale = jobset_obj(task.spec, attempt=7).completed().obj()
    status, actions = task.step(stale, t=1)
    assert task.status["phase"] == "Queued" and kinds(actions)[0] == "CreateJobSet"


def test_completed_gang_succeeds_and_keeps_its_jobset_for_logs() -> None:
    task = Task()
    running(task)
    status, actions = task.step(jobset_obj(task.spec).admitted().completed().obj(), t=30)
    assert status["phase"] == "Succeeded"
    assert not any(isinstance(a, DeleteJobSet) for a in actions)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Finished"] == "True"


def test_failed_task_deletes_every_owned_jobset() -> None:
    task = Task()
    running(task)
    failed = jobset_obj(task.spec).failed().obj()
    status, actions = task.step(failed, owned=[failed], t=30)
    assert status["phase"] == "Failed"
    assert [a.name for a in actions if isinstance(a, DeleteJobSet)] == ["train-1"]  # once, not twice


def test_a_spec_the_schema_let_through_fails_the_task_naming_the_field() -> None:
    task = Task()
    task.obj["spec"]["nodes"] = 0
    status, actions = task.step()
    assert status["phase"] == "Failed" and status["code"] == "InvalidSpec"
    assert status["message"].startswith("spec.nodes")
    assert kinds(actions) == []


def test_a_spec_no_jobset_can_be_rendered_from_fails_the_task_instead_of_raising_in_every_reconcile() -> None:
    task = Task()
    task.obj["spec"]["priorityClass"] = "p" * 64  # stored before the CRD bounded it
    status, actions = task.step()
    assert status["phase"] == "Failed" and status["code"] == "InvalidSpec"
    assert status["message"].startswith("spec.priorityClass")
    assert kinds(actions) == []


def test_a_task_being_deleted_creates_no_new_attempt_while_its_jobsets_are_collected() -> None:
    # `kubectl delete --cascade=foreground`: the task stays, with a deletionTimestamp, until the garbage
    # collector has deleted its JobSets. A JobSet gone now is that deletion, not a lost gang to replace.
    task = Task()
    running(task)
    task.obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    status, actions = task.step(None, t=60)
    assert status is None and actions == []
    assert task.status["attempt"] == 1 and task.status["systemRetriesUsed"] == 0


def test_max_runtime_deadline_is_a_timer_not_a_poll() -> None:
    task = Task(maxRuntime="1h")
    running(task, t=10)
    _, actions = task.step(jobset_obj(task.spec).admitted().jobs(ready=1).obj(),
                           WorkloadLookup.found([workload_obj("js-uid").admitted().obj()]),
                           [pod_obj("train-1", 0), pod_obj("train-1", 1)], t=20)
    assert [a.at for a in actions if isinstance(a, RequeueAt)] == [at(10 + 3600)]


def test_status_holds_everything_the_view_needs() -> None:
    task = Task()
    status, _ = task.step()
    for key in ("phase", "phaseVersion", "reason", "attempt", "userRetriesUsed", "systemRetriesUsed",
                "restartAttempt", "attempts", "conditions", "observedGeneration"):
        assert key in status


# -- issue 9: stop notice, node disruptions, accounting ----------------------------------------------

PODS = [pod_obj("train-1", 0), pod_obj("train-1", 1)]
PREEMPTED = WorkloadLookup.found([workload_obj("js-uid").admitted().evicted("Preempted", PREEMPTION_MESSAGE)
                                  .preempted().obj()])


def notices(actions: list) -> list[AnnotatePods]:
    return [a for a in actions if isinstance(a, AnnotatePods)]


def test_a_cancel_writes_the_stop_notice_on_every_worker_before_the_jobset_is_deleted() -> None:
    task = Task(terminationGracePeriod="20s")
    js = running(task)
    task.obj["metadata"]["annotations"] = {crd.CANCEL_ANNOTATION: "now"}
    _, actions = task.step(js, pods=PODS, t=30)
    assert kinds(actions) == ["AnnotatePods", "DeleteJobSet"]  # the notice first
    (a,) = notices(actions)
    assert a.names == ("train-1-workers-0-0-abcde", "train-1-workers-0-1-abcde")
    assert json.loads(a.notice) == {"cause": "Aborted", "message": "cancelled by the user",
                                    "deadline": at(50).timestamp()}


def test_a_kueue_eviction_seen_on_the_workload_is_announced_to_the_workers_before_their_pods_go() -> None:
    task = Task(failurePolicy={"resumeAfterPreemption": True}, terminationGracePeriod="20s")
    js = running(task)  # W1: Evicted=True while the JobSet still runs
    _, actions = task.step(js, PREEMPTED, PODS, t=30)
    (a,) = notices(actions)
    notice = json.loads(a.notice)
    assert notice["cause"] == "Preempted" and notice["message"] == PREEMPTION_MESSAGE
    assert notice["deadline"] == at(50).timestamp()
    for pod in PODS:  # the annotation reached them; told once, not on every reconcile
        pod = json.loads(json.dumps(pod))
        pod["metadata"]["annotations"][crd.STOP_NOTICE_ANNOTATION] = a.notice
        assert notices(task.step(js, PREEMPTED, [pod], t=31)[1]) == []


def with_report_port(pod: dict, ip: str) -> dict:
    pod = json.loads(json.dumps(pod))
    pod["status"]["podIP"] = ip
    pod["spec"]["containers"] = [{"name": CONTAINER, "ports": [{"name": REPORT_PORT_NAME, "containerPort": 29510}]}]
    return pod


def test_the_stop_notice_is_pushed_to_each_running_workers_launcher_as_well() -> None:
    """The annotation reaches a worker when the kubelet projects it; the push, in milliseconds."""
    task = Task(failurePolicy={"resumeAfterPreemption": True})
    js = running(task)
    pods = [with_report_port(PODS[0], "10.0.0.7"), with_report_port(PODS[1], "fd00::8"), pod_obj("train-1", 2, phase="Pending")]
    (a,) = notices(task.step(js, PREEMPTED, pods, t=30)[1])
    assert len(a.names) == 3  # the pending one is told by its annotation, which it reads when it starts
    assert a.urls == ("http://10.0.0.7:29510/stop-notice", "http://[fd00::8]:29510/stop-notice")


def test_pods_already_being_deleted_are_told_too_and_their_launchers_pushed() -> None:
    """Kueue's eviction may delete the pods before the controller's notice: the kubelet projects nothing
    then, but the launcher still takes the push, and the worker reads the cause when it asks for it."""
    task = Task()
    js = running(task)
    going = [with_report_port(p, f"10.0.0.{i}") for i, p in enumerate(PODS)]
    for p in going:
        p["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:30Z"
    task.obj["metadata"]["annotations"] = {crd.CANCEL_ANNOTATION: "now"}
    (a,) = notices(task.step(js, pods=going, t=30)[1])
    assert json.loads(a.notice)["cause"] == "Aborted"
    assert a.urls == ("http://10.0.0.0:29510/stop-notice", "http://10.0.0.1:29510/stop-notice")


def test_a_worker_lost_to_a_drain_restarts_the_gang_in_the_attempt_and_its_peers_are_told_why() -> None:
    task = Task(failurePolicy={"maxRestarts": 0})
    running(task)
    failed = jobset_obj(task.spec).admitted().jobs(failed=1).obj()
    status, actions = task.step(failed, pods=[PODS[0], disrupted(PODS[1])], t=30)
    assert status["attempt"] == 1 and status["phase"] == "Running"
    assert status["reason"].startswith("worker lost to node disruption (EvictionByEvictionAPI): Eviction API: evicting")
    assert status["reason"].endswith("; restarting the gang (not counted)")
    (a,) = notices(actions)  # the peer still running learns it before JobSet restarts the gang
    assert a.names == ("train-1-workers-0-0-abcde",) and json.loads(a.notice)["cause"] == "NodeDisruption"
    restarting = (jobset_obj(task.spec).admitted().restarts(1, towards_max=0)
                  .cond("RestartingJobSet", "True", "FailurePolicy_restartOnDisruption", "applying ...").obj())
    status, actions = task.step(restarting, pods=[disrupted(PODS[1])], t=31)
    assert (status["attempt"], status["userRetriesUsed"], status["systemRetriesUsed"]) == (1, 0, 0)
    assert [d["reason"] for d in status["disruptions"]] == ["EvictionByEvictionAPI"]
    (lost,) = [a for a in actions if isinstance(a, RecordEvent) and a.event.type is EventType.DISRUPTED]
    assert event_type(lost.event) == "Warning"
    back = jobset_obj(task.spec).admitted().restarts(1, towards_max=0).jobs(ready=1, active=1).obj()
    status, _ = task.step(back, pods=[pod_obj("train-1", 0, restart=1), pod_obj("train-1", 1, restart=1)], t=40)
    assert status["reason"] == "running (restart attempt 1)" and status["restartAttempt"] == 1
    assert status["accounting"]["workLost"][0]["cause"] == "EvictionByEvictionAPI"


@pytest.mark.parametrize(("max_restarts", "cause", "says"), [
    pytest.param(1, "Restart", "; the whole gang restarts", id="restart-left-says-restart"),
    pytest.param(0, "WorkerFailed", "; no restart left: the gang stops", id="no-restart-left-says-worker-failed"),
])
def test_a_peers_failure_tells_the_surviving_workers_which_worker_failed_not_cause_unknown(
        max_restarts: int, cause: str, says: str) -> None:
    task = Task(failurePolicy={"maxRestarts": max_restarts})
    js = running(task)
    _, actions = task.step(js, pods=[PODS[0], terminated(PODS[1], code=3)], t=30)
    (a,) = notices(actions)
    notice = json.loads(a.notice)
    assert a.names == ("train-1-workers-0-0-abcde",)  # the survivor; the failed worker's pod is done
    assert notice["cause"] == cause, notice
    assert "train-1-workers-0-1-abcde" in notice["message"] and notice["message"].endswith(says), notice


def test_the_status_carries_the_accounting_folded_from_the_timeline() -> None:
    task = Task(failurePolicy={"resumeAfterPreemption": True})
    task.step(t=0)
    task.step(jobset_obj(task.spec).suspended().obj(), t=1)
    js = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    admitted = WorkloadLookup.found([workload_obj("js-uid").admitted().obj()])
    _, actions = task.step(js, admitted, PODS, t=10)
    assert EventType.ADMITTED in events(actions)
    task.step(js, PREEMPTED, PODS, t=40)  # preempted 30s after the gang came up
    suspended = jobset_obj(task.spec).suspended().obj()
    final_save = [terminated(PODS[0], code=143, message=commit_report(step=6, t=at(41)))]  # in the grace period
    _, actions = task.step(suspended, PREEMPTED, final_save, t=45)
    assert EventType.CHECKPOINT in events(actions)
    acct = task.status["accounting"]
    assert acct["queuedSeconds"] == 10.0 and acct["gangUpSeconds"] == 30.0
    assert acct["lastCheckpoint"]["step"] == 6
    (lost,) = acct["workLost"]
    assert lost["cause"] == "Preempted" and lost["since"] == lost["at"]  # the final save lost nothing
    _, actions = task.step(suspended, PREEMPTED, final_save, t=46)
    assert EventType.CHECKPOINT not in events(actions)  # the same commit, read again, is not news


def test_restoring_time_is_not_productive_and_up_time_after_readmission_starts_when_workers_run() -> None:
    """The workers' termination messages correct the stop (first step, state taken, final save); after
    the readmission the gang is up from its containers' startedAt, not from when it was seen."""
    task = Task(failurePolicy={"resumeAfterPreemption": True}, terminationGracePeriod="2s")
    running(task)  # gang up at 10
    task.step(jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj(), PREEMPTED, PODS, t=40)
    suspended = jobset_obj(task.spec).suspended().obj()
    report = commit_report(step=6, t=at(43), taken=at(40.5), final=True, first_step=at(16))
    _, actions = task.step(suspended, PREEMPTED, [terminated(PODS[0], code=143, message=report)], t=45)
    assert {EventType.CHECKPOINT, EventType.FIRST_STEP, EventType.GRACE_TOO_SHORT} <= set(events(actions))
    acct = task.status["accounting"]
    assert acct["restoringSeconds"] == 0.0  # the task's first start: an uninterrupted run makes it too
    assert acct["badputSeconds"]["workLost"] == 0.0 and acct["finalSaveSeconds"] == [2.5]
    grace_cond = next(c for c in task.status["conditions"] if c["type"] == "GracePeriodTooShort")
    assert grace_cond["status"] == "True" and "at least 4s" in grace_cond["message"]
    readmitted = WorkloadLookup.found([workload_obj("js-uid").admitted().obj()])
    back = jobset_obj(task.spec).admitted().obj()
    pending = [pod_obj("train-1", i, phase="Pending") for i in (0, 1)]
    _, actions = task.step(back, readmitted, pending, t=60)
    assert EventType.READMITTED in events(actions) and task.status["accounting"]["upSince"] is None
    up = [started(pod_obj("train-1", i), at(66 + i)) for i in (0, 1)]
    _, actions = task.step(jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj(), readmitted, up, t=90)
    assert EventType.WORKERS_RUNNING in events(actions)
    acct = task.status["accounting"]
    assert acct["upSince"] == at(67).isoformat()  # the newest container start, not the controller's 90
    assert acct["badputSeconds"]["restarting"] == 7.0  # Readmitted at 60 until the workers ran at 67
    _, actions = task.step(jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj(), readmitted, up, t=95)
    assert EventType.WORKERS_RUNNING not in events(actions)  # not news
    # Preempted again; the workers' termination messages say they stepped 5 s after they started.
    task.step(jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj(), PREEMPTED, up, t=100)
    report = commit_report(step=9, t=at(101), taken=at(100.5), final=True, first_step=at(72))
    _, actions = task.step(suspended, PREEMPTED, [terminated(up[0], code=143, message=report)], t=103)
    assert task.status["accounting"]["restoringSeconds"] == 5.0


def test_the_get_view_shows_the_same_accounting_fields_as_the_local_backend() -> None:
    from gangrun._backends.kube.backend import _accounting
    from gangrun._backends.kube.stored import load_state

    task = Task()
    running(task)
    view = _accounting(task.obj, load_state(task.obj, now=at(10)))
    assert set(view) == {"queuedSeconds", "gangUpSeconds", "restoringSeconds", "workLost", "workLostSeconds",
                         "goodput", "stepSeconds", "badputSeconds", "lastCheckpoint", "finalSaveSeconds", "periodicSaveSeconds",
                         "preemptionsByCause", "waitingForReadmissionSeconds", "grace"}


def test_a_preemption_that_ends_the_attempt_tells_the_workers_it_was_a_preemption() -> None:
    task = Task(retries=1)
    running(task)
    suspended = jobset_obj(task.spec).suspended().obj()  # the Workload's Evicted and the suspend seen at once
    _, actions = task.step(suspended, PREEMPTED, PODS, t=30)  # resumeAfterPreemption off: the attempt ends
    (a,) = notices(actions)
    assert json.loads(a.notice)["cause"] == "Preempted"  # Kueue's reason, as the local backend says it
    assert kinds(actions) == ["AnnotatePods", "DeleteJobSet", "CreateJobSet"]


def test_a_first_step_on_the_tasks_first_start_claims_no_checkpoint_load_and_says_when_it_was() -> None:
    from gangrun._backends.kube.seen_events import first_step_events
    from gangrun._core.accounting import Accounting
    from gangrun._core.timeline import Event

    def fold(*evs: tuple[float, EventType]) -> Accounting:
        acct = Accounting()
        for t, kind in evs:
            acct = acct.apply(Event(time=at(t), type=kind, message="", attempt=1))
        return acct

    fresh = fold((0, EventType.SUBMITTED), (0, EventType.GANG_CREATED), (1, EventType.GANG_STARTED))
    fresh_start = {"rank": 0, "loaded": False, "time": at(6)}
    (action,) = first_step_events(fresh, [fresh_start], attempt=1, now=at(40))  # read as the worker exited at 40
    assert isinstance(action, RecordEvent)
    assert action.event.message == ("rank 0 took its first step (nothing to load: a fresh start), "
                                    "5.0 s after the gang came up (the task's first start)")
    restarted = fold((0, EventType.SUBMITTED), (0, EventType.GANG_CREATED), (1, EventType.GANG_STARTED),
                     (10, EventType.RESTARTED))
    loaded = {"rank": 1, "loaded": True, "loadedStep": 5, "time": at(13)}
    (action,) = first_step_events(restarted, [loaded], attempt=1, now=at(40))
    assert isinstance(action, RecordEvent)
    assert action.event.message == "rank 1 took its first step after loading step 5, 3.0 s after the gang came up"


def test_b5_a_worker_killed_loses_the_work_until_its_death_and_the_teardown_is_restarting() -> None:
    """SIGKILLed at 19, the worker's pod says so (finishedAt); JobSet tears the gang down and its next
    round runs at 30. The work lost ends at the death, and 19..30 is restarting, not work lost."""
    task = Task()
    running(task)  # gang up at 10
    up = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    wl = WorkloadLookup.found([workload_obj("js-uid").admitted().obj()])
    killed = terminated(pod_obj("train-1", 1), code=137, t=at(19))
    _, actions = task.step(up, wl, [pod_obj("train-1", 0), killed], t=21)
    assert EventType.WORKER_EXITED in events(actions)
    _, actions = task.step(up, wl, [pod_obj("train-1", 0), killed], t=22)
    assert EventType.WORKER_EXITED not in events(actions)  # read again: not news
    again = jobset_obj(task.spec).admitted().restarts(1).jobs(ready=1, active=1).obj()
    task.step(again, wl, [pod_obj("train-1", i, restart=1) for i in (0, 1)], t=30)
    acct = task.status["accounting"]
    assert [(w["cause"], w["seconds"]) for w in _view(task)["workLost"]] == [("WorkerFailed", 9.0)]
    assert acct["badputSeconds"]["restarting"] == pytest.approx(11.0)  # 19..30: the teardown and the restart


def test_a_worker_exit_during_a_preemption_is_no_worker_failure() -> None:
    task = Task(failurePolicy={"resumeAfterPreemption": True})
    running(task)
    up = jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj()
    exited = terminated(pod_obj("train-1", 1), code=143, t=at(20.5))
    _, actions = task.step(up, PREEMPTED, [pod_obj("train-1", 0), exited], t=21)
    assert EventType.WORKER_EXITED not in events(actions)
    assert [w["cause"] for w in task.status["accounting"]["workLost"]] == ["Preempted"]


def _view(task: Task) -> dict:
    from gangrun._backends.kube.backend import _accounting
    from gangrun._backends.kube.stored import load_state

    return _accounting(task.obj, load_state(task.obj, now=at(30)))


def test_a_worker_lost_to_a_drain_is_charged_to_the_drain_not_to_a_worker_failure() -> None:
    task = Task(failurePolicy={"maxRestarts": 0})
    running(task)
    failed = jobset_obj(task.spec).admitted().jobs(failed=1).obj()
    _, actions = task.step(failed, pods=[PODS[0], disrupted(PODS[1], t=at(29))], t=30)  # it ended at 29
    assert EventType.WORKER_EXITED not in events(actions)
    restarting = (jobset_obj(task.spec).admitted().restarts(1, towards_max=0)
                  .cond("RestartingJobSet", "True", "FailurePolicy_restartOnDisruption", "applying ...").obj())
    task.step(restarting, pods=[disrupted(PODS[1], t=at(29))], t=31)
    assert [w["cause"] for w in task.status["accounting"]["workLost"]] == ["EvictionByEvictionAPI"]


def resume_report(*, uri: str | None, step: int | None, t: float, attempt: int = 1) -> str:
    """A termination message whose worker's load went to spec.checkpoint.resumeFrom `src`."""
    return _checkpoint_report.report([json.dumps({
        "type": "resume_from", "task": "train", "attempt": attempt, "rank": 0, "source": "src", "uri": uri,
        "step": step, "time": at(t).timestamp()})])


def test_a_resume_from_that_found_nothing_is_a_warning_and_the_status_says_so_once() -> None:
    """Issue: a resumeFrom that found nothing was shown as "resumes from" and trained from scratch silently.
    The worker's report reaches the status (found: false) and the timeline as a Warning, once."""
    task = Task(checkpoint={"resumeFrom": "src"})
    running(task)
    pod = terminated(PODS[0], code=1, message=resume_report(uri=None, step=None, t=12))
    _, actions = task.step(jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj(), NONE, [pod], t=20)
    (said,) = [a.event for a in actions if isinstance(a, RecordEvent) and a.event.type is EventType.RESUME_FOUND_NOTHING]
    assert "holds no complete checkpoint" in said.message and event_type(said) == "Warning"
    assert task.status["resumeFromResult"] == {"found": False, "uri": None, "step": None, "at": at(12).isoformat()}
    _, actions = task.step(jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj(), NONE, [pod], t=25)
    assert EventType.RESUME_FOUND_NOTHING not in events(actions)  # the same load, read again, is not news
    assert task.status["resumeFromResult"]["found"] is False


def test_a_resume_from_that_loaded_names_the_checkpoint_and_survives_the_pods() -> None:
    task = Task(checkpoint={"resumeFrom": "src"})
    running(task)
    uri = "s3://b/src/attempt-1/step-30"
    pod = terminated(PODS[0], code=143, message=resume_report(uri=uri, step=30, t=12))
    _, actions = task.step(jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj(), NONE, [pod], t=20)
    assert EventType.RESUMED_FROM in events(actions)
    assert task.status["resumeFromResult"] == {"found": True, "uri": uri, "step": 30, "at": at(12).isoformat()}
    task.step(jobset_obj(task.spec).admitted().jobs(ready=1, active=1).obj(), NONE, [], t=30)  # pods gone
    assert task.status["resumeFromResult"]["uri"] == uri


def test_the_termination_message_keeps_the_newest_resume_and_a_long_uri_stays_under_the_limit() -> None:
    old, new = (json.dumps({"type": "resume_from", "attempt": 1, "rank": 0, "source": "src", "uri": u, "step": s,
                            "time": t}) for u, s, t in (("s3://b/a", 1, 10.0), ("s3://b/" + "x" * 5000, 2, 11.0)))
    message = _checkpoint_report.report([old, new])
    assert len(message.encode()) <= _checkpoint_report.LIMIT
    got = _checkpoint_report.resume(message)
    assert got is not None and got["step"] == 2 and got["uri"] == "(too long to report)"
    assert _checkpoint_report.resume(_checkpoint_report.report([old]))["uri"] == "s3://b/a"
    assert _checkpoint_report.resume("not json") is None
