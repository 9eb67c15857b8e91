"""The controller benchmark's probe and breakdown (tests/harness: controller_probe, controller_timeline): the timers it adds record what the report says."""

from __future__ import annotations

from gangrun._backends.kube.client import TASKS
from tests.harness import controller_probe
from tests.harness import controller_timeline as bench_controller
from tests.harness.kube_fake import FakeApi


def test_the_timed_queue_reports_when_a_key_was_first_queued_and_when_it_was_taken() -> None:
    q = controller_probe.TimedQueue()
    q.add(("ml", "a"))
    q.add(("ml", "a"))  # a second add while queued keeps the first time
    assert q.get(timeout=0) == ("ml", "a")
    queued, taken = q.taken[("ml", "a")]
    assert queued <= taken


def test_the_probe_controller_records_each_sync_and_each_status_write() -> None:
    api = FakeApi()
    syncs: list[dict] = []
    writes: list[dict] = []
    ctl = controller_probe.ProbeController(api, namespace=None, queue=controller_probe.TimedQueue(),
                                           syncs=syncs, writes=writes)
    api.put(TASKS, {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask",
                    "metadata": {"name": "train", "namespace": "ml"},
                    "spec": {"nodes": 2, "command": ["python", "train.py"], "image": "registry.invalid/t:1"}})
    ctl.tasks.relist()
    assert ctl.process_one(timeout=0)
    assert [s["key"] for s in syncs] == [["ml", "train"]]
    assert syncs[0]["queued"] <= syncs[0]["taken"] <= syncs[0]["done"]
    assert [w["key"] for w in writes] == [["ml", "train"]] and writes[0]["evictions"] == 0
    spent = syncs[0]["api"]  # what the sync's time went to: its status write and its JobSet's creation
    assert {"patch clusteredtasks/status", "create jobsets"} <= set(spent) and all(v >= 0 for v in spent.values())


def test_the_breakdown_splits_an_eviction_into_stages_that_add_up() -> None:
    tl = bench_controller.Timeline()
    tl.mark("t", "wl_evicted", 10.0)
    tl.mark("t", "st_evicted", 10.5)
    probe = {"syncs": [{"key": ["ns", "t"], "queued": 10.05, "taken": 10.15, "done": 10.45}],
             "writes": [{"key": ["ns", "t"], "t0": 10.2, "t1": 10.4, "evictions": 1, "reason": ""},
                        {"key": ["ns", "t"], "t0": 9.0, "t1": 9.1, "evictions": 0, "reason": ""}]}
    stages = bench_controller.breakdown(tl, probe, "wl_evicted", "st_evicted", bench_controller.eviction_write)
    got = {k: round(v[0], 3) for k, v in stages.items()}
    assert got == {"controller_watch": 0.05, "queue_wait": 0.1, "reconcile": 0.05, "api_write": 0.2,
                   "write_to_watch": 0.1}
    assert round(sum(got.values()), 3) == 0.5  # the eviction figure, 10.0 -> 10.5


def test_the_readmission_breakdown_takes_the_first_running_write_after_the_eviction() -> None:
    tl = bench_controller.Timeline()
    tl.mark("t", "js_resumed", 20.0)
    tl.mark("t", "st_readmitted", 20.4)
    w = {"key": ["ns", "t"], "evictions": 1}
    probe = {"syncs": [{"key": ["ns", "t"], "queued": 20.01, "taken": 20.02, "done": 20.3}],
             "writes": [{**w, "t0": 5.0, "t1": 5.2, "evicted": True, "reason": "running (restart attempt 0)"},
                        {**w, "t0": 9.0, "t1": 9.3, "evicted": True, "reason": "Preempted; waiting for re-admission"},
                        {**w, "t0": 20.05, "t1": 20.25, "evicted": False, "reason": "running (restart attempt 0)"},
                        {**w, "t0": 22.0, "t1": 22.1, "evicted": False, "reason": "running (restart attempt 0)"}]}
    stages = bench_controller.breakdown(tl, probe, "js_resumed", "st_readmitted", bench_controller.readmission_write)
    got = {k: round(v[0], 3) for k, v in stages.items()}
    assert got == {"controller_watch": 0.01, "queue_wait": 0.01, "reconcile": 0.03, "api_write": 0.2,
                   "write_to_watch": 0.15}


def test_the_round_counts_the_status_writes_between_its_start_and_end_only() -> None:
    tl = bench_controller.Timeline()
    for t, type_ in ((1.0, "MODIFIED"), (5.0, "MODIFIED"), (6.0, "ADDED"), (7.0, "MODIFIED"), (20.0, "MODIFIED")):
        tl.task(t, type_, {"metadata": {"name": "t"}, "status": {}})
    assert bench_controller.writes_between(tl, None, 4.0, 10.0) == 2  # submission's and later writes are out
    probe = {"writes": [{"t0": 3.0}, {"t0": 4.5}, {"t0": 9.9}, {"t0": 10.1}], "syncs": []}
    assert bench_controller.writes_between(tl, probe, 4.0, 10.0) == 2  # the probe's own count when there is one


def test_enough_nodes_for_a_thousand_tasks_by_cpu_and_by_pod_count() -> None:
    assert bench_controller.nodes_needed(50) == 4
    assert bench_controller.nodes_needed(1000) == 55  # 200 CPU of 100m pods on 4-CPU nodes, a tenth spare
