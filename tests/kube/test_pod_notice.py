"""A pod's stop notice: the launcher keeps GANGRUN_STOP_FILE as the newest of what the controller pushed
to its report port and what the pod's annotation says (`gangrun._worker.pod_notice`)."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gangrun._backends.kube.stop_notices import StopNotices
from gangrun._worker import launch
from gangrun._worker.live_report import serve
from gangrun._worker.pod_notice import PodNotice

PREEMPTED = {"cause": "Preempted", "message": "preempted by ml/urgent", "deadline": 1020.5}
MAINTENANCE = {"cause": "NodeMaintenance", "message": "node n1 is about to go (drained)", "deadline": 1030.0}
RESTART = {"cause": "Restart", "message": "pod p exited with code 3 (Error); the whole gang restarts", "deadline": 1040.0}


def body(doc: dict) -> bytes:
    return json.dumps(doc).encode()


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    annotation = tmp_path / "etc" / "stop-notice.json"
    annotation.parent.mkdir()
    annotation.write_text("")  # the projection of an annotation not written yet
    return tmp_path / "stop-notice.json", annotation


def read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def test_a_pushed_notice_is_the_workers_at_once_and_a_later_projection_of_it_changes_nothing(files) -> None:
    stop, annotation = files
    n = PodNotice(str(stop), str(annotation))
    assert n.pushed(body(PREEMPTED))
    assert read(stop) == PREEMPTED
    annotation.write_text(json.dumps(PREEMPTED))
    n.at_stop()
    assert read(stop) == PREEMPTED
    assert list(stop.parent.glob("*.tmp-*")) == []  # written by rename


def test_with_no_push_the_annotations_notice_is_put_in_place_at_the_stop(files) -> None:
    stop, annotation = files
    n = PodNotice(str(stop), str(annotation))
    n.at_stop()
    assert read(stop) is None  # nothing to tell: the worker falls back to its grace period
    annotation.write_text(json.dumps(PREEMPTED))
    n.at_stop()
    assert read(stop) == PREEMPTED


def test_an_older_notice_projected_late_does_not_replace_a_newer_push(files) -> None:
    stop, annotation = files
    n = PodNotice(str(stop), str(annotation))
    assert n.pushed(body(MAINTENANCE)) and n.pushed(body(PREEMPTED))
    annotation.write_text(json.dumps(MAINTENANCE))  # the kubelet is one notice behind
    n.at_stop()
    assert read(stop) == PREEMPTED


def test_a_notice_whose_push_failed_still_comes_through_the_annotation(files) -> None:
    stop, annotation = files
    n = PodNotice(str(stop), str(annotation))
    assert n.pushed(body(MAINTENANCE))
    annotation.write_text(json.dumps(PREEMPTED))  # its push never arrived
    n.at_stop()
    assert read(stop) == PREEMPTED


def test_node_maintenance_stays_the_cause_through_the_restart_it_causes(files) -> None:
    stop, annotation = files
    n = PodNotice(str(stop), str(annotation))
    assert n.pushed(body(MAINTENANCE)) and n.pushed(body(RESTART))
    assert read(stop) == MAINTENANCE


@pytest.mark.parametrize("bad", [b"", b"{", b"[]", b'{"cause": ""}', b'{"cause": 3}', b'{"cause": "X", "deadline": "soon"}'])
def test_a_body_that_is_not_a_notice_is_refused_and_changes_nothing(files, bad: bytes) -> None:
    stop, annotation = files
    n = PodNotice(str(stop), str(annotation))
    assert not n.pushed(bad)
    assert read(stop) is None


def post(url: str, data: bytes) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST"), timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_controllers_push_reaches_the_file_through_the_launchers_report_port(files) -> None:
    stop, annotation = files
    server = serve(0, None, None, PodNotice(str(stop), str(annotation)))
    assert server is not None
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert post(f"{base}/elsewhere", body(PREEMPTED)) == 404
        assert post(f"{base}/stop-notice", b"not json") == 400
        assert read(stop) is None
        StopNotices.push(f"{base}/stop-notice", body(PREEMPTED))  # the controller's side
        assert read(stop) == PREEMPTED
        StopNotices.push("http://127.0.0.1:9/stop-notice", body(PREEMPTED))  # nobody there: no error
    finally:
        server.shutdown()
        server.server_close()


class Child:
    def __init__(self, stop: Path) -> None:
        self.stop, self.seen = stop, []

    def send_signal(self, signum: int) -> None:
        self.seen.append((signum, read(self.stop)))

    def wait(self) -> int:
        signal.raise_signal(signal.SIGTERM)  # Kueue's eviction deletes the pod: the kubelet's SIGTERM
        return 0


def test_the_launcher_puts_the_notice_in_place_before_it_forwards_the_sigterm(files) -> None:
    stop, annotation = files
    n = PodNotice(str(stop), str(annotation))
    annotation.write_text(json.dumps(PREEMPTED))
    child = Child(stop)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        code, stopped = launch._forwarding(lambda: child, stopping=n.at_stop)
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
        launch.STOPPING.clear()
    assert stopped and code == 0
    assert child.seen == [(signal.SIGTERM, PREEMPTED)]
