"""The controller's live view of running workers' checkpoints (`live_reports.py`): which pods it asks,
and what a round does with their answers."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from gangrun._backends.kube.live_reports import LiveReports, target
from tests.harness.kube_builders import commit_report, pod_obj


def reporting(index: int = 0, *, uid: str = "u0", ip: str = "10.1.0.5", phase: str = "Running") -> dict[str, Any]:
    """A worker pod of the current image: its container declares the report port."""
    pod = pod_obj("train-1", index, phase=phase)
    pod["metadata"]["uid"] = uid
    pod["status"]["podIP"] = ip
    pod["spec"]["containers"] = [{"name": "worker", "ports": [
        {"name": "rendezvous", "containerPort": 29500}, {"name": "gangrun-report", "containerPort": 29510}]}]
    return pod


def on_host_network(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["hostNetwork"] = True
    return pod


def without_port(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["containers"][0]["ports"] = pod["spec"]["containers"][0]["ports"][:1]
    return pod


@pytest.mark.parametrize("pod,url", [
    pytest.param(reporting(), "http://10.1.0.5:29510/", id="running-first-node"),
    pytest.param(reporting(ip="fd00::5"), "http://[fd00::5]:29510/", id="ipv6"),
    pytest.param(reporting(1), None, id="another-node-rank-0-is-on-node-0"),
    pytest.param(reporting(phase="Pending"), None, id="not-running-yet"),
    pytest.param(reporting(ip=""), None, id="no-ip-yet"),
    pytest.param(without_port(reporting()), None, id="an-older-image-declares-no-report-port"),
    pytest.param(on_host_network(reporting()), None, id="host-network-another-gang-may-hold-the-port"),
])
def test_only_a_running_first_node_worker_with_the_report_port_is_asked(pod: dict[str, Any], url: str | None) -> None:
    assert target(pod) == url


class Pods:
    def __init__(self, *pods: dict[str, Any]) -> None:
        self.pods = list(pods)

    def items(self) -> list[dict[str, Any]]:
        return list(self.pods)


def live(pods: Pods, answers: dict[str, Any]) -> tuple[LiveReports, list[str]]:
    changed: list[str] = []

    def fetch(url: str, _timeout: float) -> str:
        answer = answers.get(url, "")
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    return LiveReports(pods, lambda pod: changed.append(pod["metadata"]["uid"]), fetch=fetch), changed  # type: ignore[arg-type]


URL = "http://10.1.0.5:29510/"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_new_report_queues_its_task_once() -> None:
    pod = reporting()
    answers = {URL: commit_report(step=5, t=NOW)}
    reports, changed = live(Pods(pod, reporting(1, uid="u1", ip="10.1.0.6")), answers)
    reports.poll_once()
    reports.poll_once()  # the same report again: nothing to reconcile
    assert changed == ["u0"]
    assert reports.of([pod]) == {"u0": answers[URL]}
    answers[URL] = commit_report(step=6, t=NOW)
    reports.poll_once()
    assert changed == ["u0", "u0"]


@pytest.mark.parametrize("failure", [ConnectionRefusedError(), TimeoutError(), ValueError("bad status line")])
def test_a_worker_that_stops_answering_keeps_its_last_report(failure: Exception) -> None:
    pod = reporting()
    answers: dict[str, Any] = {URL: commit_report(step=5, t=NOW)}
    reports, changed = live(Pods(pod), answers)
    reports.poll_once()
    answers[URL] = failure
    reports.poll_once()
    assert changed == ["u0"] and reports.of([pod]) == {"u0": commit_report(step=5, t=NOW)}


def test_a_gone_pod_s_report_is_dropped() -> None:
    pod = reporting()
    pods = Pods(pod)
    reports, _ = live(pods, {URL: commit_report(step=5, t=NOW)})
    reports.poll_once()
    pods.pods.clear()
    reports.poll_once()
    assert reports.of([pod]) == {}


def test_a_finished_pod_keeps_its_report_until_it_is_gone() -> None:
    # Its termination message says the same; until the sync that reads it, the live report stands in.
    pod = reporting()
    pods = Pods(pod)
    reports, _ = live(pods, {URL: commit_report(step=5, t=NOW)})
    reports.poll_once()
    pods.pods[0] = reporting(phase="Succeeded")
    reports.poll_once()
    assert reports.of([pod]) == {"u0": commit_report(step=5, t=NOW)}
