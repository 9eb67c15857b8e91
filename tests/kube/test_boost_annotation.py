"""`gangrun controller --priority-boost`: each gang's Workload carries its checkpoint-aware boost,
written only when the value changes."""

from __future__ import annotations

from gangrun._backends.kube.client import PODS, WORKLOADS
from gangrun._backends.kube.live_reports import LiveReports
from gangrun._core.priority_boost import ANNOTATION, BoostPolicy
from tests.harness.kube_builders import commit_report, pod_obj
from tests.kube.test_controller import Cluster


def boosted() -> Cluster:
    c = Cluster()
    c.ctl.boost = BoostPolicy()
    return c


def annotation(c: Cluster, attempt: int = 1) -> str | None:
    wl = c.api.obj(WORKLOADS, "ml", f"jobset-train-{attempt}")
    return (wl["metadata"].get("annotations") or {}).get(ANNOTATION)


def workload_patches(c: Cluster) -> int:
    return sum(1 for verb, plural, _ in c.api.calls if (verb, plural) == ("patch", "workloads"))


def resync(c: Cluster) -> None:
    c.ctl.queue.add(("ml", "train"))  # what the delayed requeue at the next step does in the real loop
    c.settle()


def test_a_running_gang_s_boost_steps_up_with_its_unsaved_work_one_patch_per_step() -> None:
    c = boosted()
    c.submit(nodes=2)
    c.settle()
    c.admit()
    c.settle()
    assert annotation(c) == "3"  # just came up: nothing to lose, the bottom running level
    assert workload_patches(c) == 1
    for _ in range(5):  # syncs that change nothing write nothing
        resync(c)
    assert workload_patches(c) == 1
    c.clock.advance(20)  # 2 nodes × 20 s = 40 node-seconds: past the first step (30)
    resync(c)
    assert annotation(c) == "27"
    assert workload_patches(c) == 2
    c.clock.advance(40)  # 120 node-seconds
    resync(c)
    assert annotation(c) == "51"


def test_the_controller_comes_back_when_the_boost_would_step_up() -> None:
    c = boosted()
    delays: list[float] = []
    add_after = c.ctl.queue.add_after
    c.ctl.queue.add_after = lambda key, delay: (delays.append(delay), add_after(key, delay))  # type: ignore[method-assign]
    c.submit(nodes=2)
    c.settle()
    c.admit()
    c.settle()
    assert 15.0 in delays  # 2 nodes reach the first step (30 node-seconds) 15 s after gang up


def test_a_preempted_gang_waits_with_a_starvation_boost() -> None:
    c = boosted()
    c.submit(failurePolicy={"resumeAfterPreemption": True})
    c.settle()
    c.admit()
    c.settle()
    c.preempt()
    c.settle()
    assert annotation(c) == "1"  # preempted once, waiting: ahead of fresh work, below any running peer


def test_boosting_is_off_unless_enabled() -> None:
    c = Cluster()
    c.submit()
    c.settle()
    c.admit()
    c.settle()
    c.clock.advance(600)
    resync(c)
    assert workload_patches(c) == 0
    assert annotation(c) is None


def test_a_reported_commit_brings_the_boost_back_to_the_bottom() -> None:
    c = boosted()
    c.submit(nodes=2)
    c.settle()
    c.admit()
    c.settle()
    c.clock.advance(70)  # 140 node-seconds unsaved
    resync(c)
    assert annotation(c) == "51"
    pod = pod_obj("train-1", 0)  # rank 0 reports the commit it just made, as the controller reads workers
    pod["status"]["containerStatuses"] = [{"name": "worker", "state": {"running": {}}, "lastState": {"terminated": {
        "exitCode": 0, "reason": "Completed", "message": commit_report(step=70, t=c.clock.now)}}}]
    c.api.put(PODS, pod)
    c.settle()
    assert c.status()["accounting"]["lastCheckpoint"]["step"] == 70
    assert annotation(c) == "3"


def test_a_running_worker_s_live_report_brings_the_boost_back_to_the_bottom() -> None:
    # The live channel: the controller polls rank 0's launcher while the gang runs, so the commit lowers
    # the boost now, not at the gang's next stop (its termination message).
    c = boosted()
    served: dict[str, str] = {}
    c.ctl.live = LiveReports(c.ctl.pods, c.ctl._owned_changed, fetch=lambda url, _timeout: served.get(url, ""))
    c.submit(nodes=2)
    c.settle()
    c.admit()
    c.settle()
    c.clock.advance(70)
    resync(c)
    assert annotation(c) == "51"
    pod = pod_obj("train-1", 0)
    pod["metadata"]["uid"] = "uid-rank-0"
    pod["status"]["podIP"] = "10.1.0.5"
    pod["spec"]["containers"] = [{"name": "worker", "ports": [{"name": "gangrun-report", "containerPort": 29510}]}]
    c.api.put(PODS, pod)
    c.settle()
    c.ctl.live.poll_once()  # nothing committed yet: an empty report changes nothing
    assert annotation(c) == "51"
    served["http://10.1.0.5:29510/"] = commit_report(step=70, t=c.clock.now)
    c.ctl.live.poll_once()
    c.settle()
    assert c.status()["accounting"]["lastCheckpoint"]["step"] == 70
    assert annotation(c) == "3"
