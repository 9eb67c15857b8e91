"""A running gang's commits on its Kubernetes timeline (issue 27 item 10): the controller polls the running
workers' live checkpoint report by default, not only under `--priority-boost`, so `gangrun events`,
`describe` and the web page show each commit while the gang runs; `--no-live-reports` turns it off."""

from __future__ import annotations

import pytest

from gangrun import cli
from gangrun._backends.kube.client import PODS
from gangrun._backends.kube.controller import Controller
from gangrun._backends.kube.live_reports import LiveReports
from gangrun._core.timeline import EventType
from tests.harness.kube_builders import commit_report, pod_obj
from tests.kube.test_controller import Cluster


def committed_steps(c: Cluster) -> list[str]:
    return [e.message for e in c.backend.events("train") if e.type is EventType.CHECKPOINT]


def test_a_running_gang_s_commits_reach_its_timeline_without_priority_boost() -> None:
    c = Cluster()
    assert c.ctl.boost is None and c.ctl.live is not None  # polled by default
    served: dict[str, str] = {}
    # the same poller, with its HTTP answered here instead of by a worker's launcher
    c.ctl.live = LiveReports(c.ctl.pods, c.ctl._owned_changed, fetch=lambda url, _timeout: served.get(url, ""))
    c.submit(nodes=2)
    c.settle()
    c.admit()
    c.settle()
    pod = pod_obj("train-1", 0)
    pod["metadata"]["uid"] = "uid-rank-0"
    pod["status"]["podIP"] = "10.1.0.5"
    pod["spec"]["containers"] = [{"name": "worker", "ports": [{"name": "gangrun-report", "containerPort": 29510}]}]
    c.api.put(PODS, pod)
    c.settle()
    for step in (10, 20):
        c.clock.advance(10)
        served["http://10.1.0.5:29510/"] = commit_report(step=step, t=c.clock.now)
        c.ctl.live.poll_once()
        c.settle()
    assert c.status()["accounting"]["lastCheckpoint"]["step"] == 20
    steps = committed_steps(c)
    assert len(steps) == 2 and "10" in steps[0] and "20" in steps[1]


def test_live_reports_can_be_turned_off() -> None:
    c = Cluster()
    assert Controller(c.api, namespace=None, report_period=None).live is None


@pytest.mark.parametrize(("argv", "want"), [
    pytest.param([], 5.0, id="on-by-default"),
    pytest.param(["--report-period", "2"], 2.0, id="period"),
    pytest.param(["--no-live-reports"], None, id="off"),
])
def test_the_controller_command_polls_live_reports_unless_told_not_to(
        argv: list[str], want: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    monkeypatch.setattr("gangrun._backends.kube.run_controller", lambda **kw: seen.update(kw) or 0)
    assert cli.main(["controller", "--no-leader-election", *argv]) == 0
    assert seen["report_period"] == want and seen["boost"] is None
