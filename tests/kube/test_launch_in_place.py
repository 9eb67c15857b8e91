"""The launcher's side of an in-place restart (`gangrun._worker.in_place`), with real processes: a failed
worker's launcher keeps its pod, says so to the readiness probe and waits for the controller's order; a
running worker is stopped for the order with its notice; each round gets a new rendezvous and start id."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gangrun._core import worker_env as wenv
from gangrun._worker.in_place import Order, Rounds, parse
from tests.kube.test_launch import _free_port, _get_while_it_starts, _pod_env

# Round 0 fails with 3; any later round prints what it was given and exits 0. Told to stop, it prints the
# notice's cause and exits 0, as a worker that saved does.
WORKER = """
import json, os, signal, sys, time
def stopped(*_):
    try:
        cause = json.load(open(os.environ["GANGRUN_STOP_FILE"]))["cause"]
    except OSError:
        cause = None
    print("stopped", cause, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stopped)
restart = os.environ["JOBSET_RESTART_ATTEMPT"]
print("round", restart, os.environ["TORCHELASTIC_RUN_ID"], os.environ["GANGRUN_START"], flush=True)
if sys.argv[1] == "fail" and restart == "0":
    sys.exit(3)
if sys.argv[1] == "run" and restart == "0":
    time.sleep(60)
"""


def _launcher(tmp_path: Path, how: str, *, wait: float = 30, script: bool = False,
              replaced: int = 0) -> tuple[subprocess.Popen[str], str]:
    """`script`: the worker is a script file, which the first round runs in a fork of the launcher;
    `replaced`: the Job's count of lost pods this one replaces (GANGRUN_REPLACED)."""
    command = [sys.executable, "-c", WORKER, how]
    if script:
        (tmp_path / "worker.py").write_text(WORKER)
        command = [sys.executable, str(tmp_path / "worker.py"), how]
    port = _free_port()
    env = {**_pod_env(tmp_path), "GANGRUN_REPORT_PORT": str(port), "GANGRUN_IN_PLACE_WAIT": str(wait),
           "GANGRUN_GANG": "t-a1", "JOBSET_RESTART_ATTEMPT": "0", "GANGRUN_STOP_FILE": str(tmp_path / "stop.json"),
           "GANGRUN_STOP_ANNOTATION_FILE": str(tmp_path / "annotation"), "GANGRUN_REPLACED": str(replaced or "")}
    proc = subprocess.Popen([sys.executable, "-m", "gangrun.launch", "--", *command], env=env, stdout=subprocess.PIPE, text=True)
    return proc, f"http://127.0.0.1:{port}"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _order(base: str, body: dict[str, object]) -> int:
    request = urllib.request.Request(f"{base}/restart", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=5) as r:
        return int(r.status)


def _until(check: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def _line(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    return proc.stdout.readline().split()


@pytest.fixture
def reap() -> object:
    procs: list[subprocess.Popen[str]] = []
    yield procs.append
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("script", [False, True], ids=["subprocess", "forked-first-round"])
def test_a_failed_worker_s_launcher_keeps_its_pod_and_runs_the_next_round_when_told(
        tmp_path: Path, reap, script: bool) -> None:
    proc, base = _launcher(tmp_path, "fail", script=script)
    reap(proc)
    first = _line(proc)
    assert first[:3] == ["round", "0", "t-a1-0"]
    _until(lambda: _get(f"{base}/ready")[0] == 503)  # the pod's readiness probe fails: the controller sees it
    report = json.loads(_get(f"{base}/round")[1])
    assert (report["restart"], report["failed"]) == (0, 3) and abs(report["at"] - time.time()) < 30
    assert _order(base, {"restart": 1, "notice": {"cause": "Restart", "message": "m", "deadline": None}}) == 204
    second = _line(proc)
    assert second[:3] == ["round", "1", "t-a1-1"]  # a new rendezvous id ...
    assert second[3] != first[3] and len(second[3]) == 12  # ... and a new start: every rank loads one checkpoint
    assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("script", [False, True], ids=["subprocess", "forked-first-round"])
def test_a_running_worker_is_stopped_for_the_order_with_its_notice_then_runs_again(
        tmp_path: Path, reap, script: bool) -> None:
    proc, base = _launcher(tmp_path, "run", script=script)
    reap(proc)
    assert _line(proc)[:2] == ["round", "0"]
    _get_while_it_starts(f"{base}/ready")
    notice = {"cause": "Restart", "message": "rank 1 failed; the whole gang restarts", "deadline": time.time() + 30}
    assert _order(base, {"restart": 1, "notice": notice}) == 204
    assert _line(proc) == ["stopped", "Restart"]  # told why, in its grace period: it saves
    assert _line(proc)[:2] == ["round", "1"]
    assert proc.wait(timeout=30) == 0
    assert not (tmp_path / "stop.json").exists(), "the new round starts with no notice"


def test_a_launcher_told_nothing_in_time_leaves_with_the_worker_s_code(tmp_path: Path, reap) -> None:
    proc, _ = _launcher(tmp_path, "fail", wait=0.5)
    reap(proc)
    assert proc.wait(timeout=30) == 3  # the pod fails: JobSet recreates the gang, as without the option


def test_a_recreate_order_ends_a_failed_worker_s_pod_at_once(tmp_path: Path, reap) -> None:
    proc, base = _launcher(tmp_path, "fail")
    reap(proc)
    _line(proc)
    _until(lambda: _get(f"{base}/ready")[0] == 503)
    started = time.monotonic()
    assert _order(base, {"restart": 1, "recreate": True}) == 204
    assert proc.wait(timeout=30) == 3
    assert time.monotonic() - started < 5


def test_a_launcher_stopped_while_its_failed_worker_waits_leaves_at_once_as_a_lost_pod(tmp_path: Path, reap) -> None:
    """Its pod is going (Kueue took the gang back, its JobSet was deleted, or the pod alone was deleted):
    LOST_EXIT, which the Job ignores, so that a pod deleted under a running gang is made again alone."""
    proc, base = _launcher(tmp_path, "fail")
    reap(proc)
    _line(proc)
    _until(lambda: _get(f"{base}/ready")[0] == 503)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == wenv.LOST_EXIT


def test_a_running_worker_s_launcher_stopped_by_sigterm_leaves_as_a_lost_pod(tmp_path: Path, reap) -> None:
    proc, base = _launcher(tmp_path, "run")
    reap(proc)
    assert _line(proc)[:2] == ["round", "0"]
    _get_while_it_starts(f"{base}/ready")  # the worker is past its print (a SIGTERM inside it cannot print)
    proc.send_signal(signal.SIGTERM)
    assert _line(proc)[0] == "stopped"  # the worker saved and exited 0
    assert proc.wait(timeout=10) == wenv.LOST_EXIT


def test_a_replacement_pod_s_launcher_runs_nothing_until_told_the_round_to_join(tmp_path: Path, reap) -> None:
    """GANGRUN_REPLACED > 0: the Job made this pod for one deleted under the gang. Its launcher is NotReady and
    says `replaced` until the controller orders the round the gang restarted in; then it runs that round."""
    proc, base = _launcher(tmp_path, "fail", replaced=1)
    reap(proc)
    report = json.loads(_get_while_it_starts(f"{base}/round"))
    assert report == {"restart": 0, "failed": None, "at": None, "replaced": True} and _get(f"{base}/ready")[0] == 503
    assert _order(base, {"restart": 2, "notice": {"cause": "Restart", "message": "m", "deadline": None}}) == 204
    assert _line(proc)[:3] == ["round", "2", "t-a1-2"]  # the first line it ever printed: round 0 never ran
    assert proc.wait(timeout=30) == 0


def test_a_replacement_told_no_round_in_time_fails_its_pod(tmp_path: Path, reap) -> None:
    """A controller that is down: the pod fails with a code the Job counts, and JobSet recreates the gang."""
    proc, _ = _launcher(tmp_path, "run", wait=0.5, replaced=1)
    reap(proc)
    assert proc.wait(timeout=30) == 4
    assert proc.stdout is not None and proc.stdout.read() == "", "no round ran"


# -- the rules, without processes ---------------------------------------------------------------------


@pytest.mark.parametrize(("body", "order"), [
    (b'{"restart": 2}', Order(restart=2)),
    (b'{"restart": 2, "notice": {"cause": "Restart"}, "recreate": true}',
     Order(restart=2, notice={"cause": "Restart"}, recreate=True)),
    (b'{"restart": -1}', None), (b'{"restart": true}', None), (b'{"restart": "2"}', None),
    (b'{"restart": 2, "notice": "x"}', None), (b"[]", None), (b"not json", None),
])
def test_an_order_is_read_strictly(body: bytes, order: Order | None) -> None:
    assert parse(body) == order


def test_an_order_for_a_round_run_or_told_already_changes_nothing() -> None:
    rounds = Rounds(2, stopping=threading.Event())
    stops: list[Order] = []
    rounds.running(stops.append)
    assert rounds.ordered(b'{"restart": 2}') and stops == []  # the round it runs
    assert rounds.ordered(b'{"restart": 3}') and [o.restart for o in stops] == [3]
    assert rounds.ordered(b'{"restart": 3}') and len(stops) == 1  # told already
    assert rounds.ordered(b'{"restart": 1, "recreate": true}') and len(stops) == 1
    assert rounds.ended(0, wait=10) == Order(restart=3) and rounds.restart == 3


def test_a_recreate_order_for_a_running_worker_is_ignored() -> None:
    rounds = Rounds(0, stopping=threading.Event())
    stops: list[Order] = []
    rounds.running(stops.append)
    assert rounds.ordered(b'{"restart": 1, "recreate": true}')
    assert stops == [] and rounds.ended(0, wait=0) is None  # it completed: the launcher leaves with 0


def test_an_order_that_came_while_the_round_started_stops_it_once_it_runs() -> None:
    rounds = Rounds(0, stopping=threading.Event())
    assert rounds.ordered(b'{"restart": 1}')
    stops: list[Order] = []
    rounds.running(stops.append)
    assert [o.restart for o in stops] == [1]


def test_a_failed_round_waits_for_the_order_and_is_ready_again_once_it_comes() -> None:
    rounds = Rounds(0, stopping=threading.Event())
    got: list[Order | None] = []
    waiter = threading.Thread(target=lambda: got.append(rounds.ended(1, wait=30)))
    waiter.start()
    _until(lambda: not rounds.ready())
    assert json.loads(rounds.report())["failed"] == 1
    rounds.ordered(b'{"restart": 1}')
    waiter.join(timeout=5)
    assert got == [Order(restart=1)] and rounds.ready() and json.loads(rounds.report())["failed"] is None


def test_a_replacement_takes_an_order_of_its_own_round_the_others_do_not() -> None:
    """A readmitted gang's pods all replace the ones its suspension ended: told their own round, they run it."""
    joining, running = Rounds(1, stopping=threading.Event(), replaced=True), Rounds(1, stopping=threading.Event())
    assert joining.ordered(b'{"restart": 1}') and joining.joined(wait=0) == Order(restart=1)
    assert running.ordered(b'{"restart": 1}') and running.ended(1, wait=0) is None


def test_no_manifest_sets_the_launcher_s_wait() -> None:
    assert wenv.IN_PLACE_WAIT in wenv.RESERVED and wenv.REPLACED in wenv.RESERVED
