"""The worker launcher: the env contract from the completion index, a bounded DNS wait, torchrun for
nproc > 1, and in a pod the termination message and the exit code of a stopped worker."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gangrun import _checkpoint_report
from gangrun._worker import launch
from gangrun._worker.live_report import EventsTail, serve


def test_single_process_per_node_gets_rank_from_the_completion_index() -> None:
    env = launch.worker_environment({"JOB_COMPLETION_INDEX": "3", "NNODES": "4", "NPROC_PER_NODE": "1"})
    assert (env["NODE_RANK"], env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("3", "3", "0", "4")


def test_node_rank_from_the_downward_api_wins() -> None:
    env = launch.worker_environment({"NODE_RANK": "1", "JOB_COMPLETION_INDEX": "1", "NPROC_PER_NODE": "1"})
    assert env["RANK"] == "1"


def test_torchrun_rendezvous_id_names_the_jobset_and_restart_attempt() -> None:
    env = launch.worker_environment({"NODE_RANK": "1", "NNODES": "2", "NPROC_PER_NODE": "4",
                                     "MASTER_ADDR": "t-1-workers-0-0.t-1", "MASTER_PORT": "29500",
                                     "GANGRUN_GANG": "t-1", "JOBSET_RESTART_ATTEMPT": "2"})
    argv = launch.torchrun_argv(env, ["python", "train.py"])
    assert "RANK" not in env and "LOCAL_RANK" not in env  # torchrun sets them per process
    assert (env["GROUP_RANK"], env["TORCHELASTIC_RUN_ID"], env["LOCAL_WORLD_SIZE"]) == ("1", "t-1-2", "4")
    assert "--rdzv-id=t-1-2" in argv and "--node-rank=1" in argv and "--nproc-per-node=4" in argv
    assert argv[-2:] == ["python", "train.py"]


def test_one_process_per_node_gets_the_whole_contract_from_the_same_rules_as_the_local_backend() -> None:
    # nprocPerNode 1 used to miss LOCAL_WORLD_SIZE, GROUP_RANK and TORCHELASTIC_RUN_ID on Kubernetes.
    env = launch.worker_environment({"JOB_COMPLETION_INDEX": "2", "NNODES": "3", "NPROC_PER_NODE": "1",
                                     "GANGRUN_GANG": "t-1", "JOBSET_RESTART_ATTEMPT": "1"})
    assert {k: env[k] for k in ("NODE_RANK", "GROUP_RANK", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                                "TORCHELASTIC_RUN_ID", "JOBSET_RESTART_ATTEMPT")} == {
        "NODE_RANK": "2", "GROUP_RANK": "2", "RANK": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "WORLD_SIZE": "3", "TORCHELASTIC_RUN_ID": "t-1-1", "JOBSET_RESTART_ATTEMPT": "1"}


def test_dns_wait_is_bounded_and_names_the_host() -> None:
    clock = iter(range(0, 1000, 10))

    def resolve(host: str) -> None:
        raise OSError("Name or service not known")

    with pytest.raises(TimeoutError, match="t-1-workers-0-0.t-1"):
        launch.wait_for_dns("t-1-workers-0-0.t-1", timeout=60, resolve=resolve, sleep=lambda s: None,
                            clock=lambda: next(clock))


def test_dns_wait_returns_once_the_name_resolves() -> None:
    answers = iter([OSError("no"), OSError("no"), "10.0.0.1"])

    def resolve(host: str) -> object:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    launch.wait_for_dns("h", timeout=60, resolve=resolve, sleep=lambda s: None)


def test_launcher_execs_the_command_with_the_worker_env() -> None:
    out = subprocess.run([sys.executable, "-m", "gangrun.launch", "--", sys.executable, "-c",
                          "import os; print(os.environ['RANK'], os.environ['NODE_RANK'])"],
                         env={"JOB_COMPLETION_INDEX": "2", "NNODES": "1", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["2", "2"]


def test_launcher_without_a_command_is_a_usage_error() -> None:
    assert launch.main(["--"]) == launch.EXIT_USAGE


# -- in a pod: the newest checkpoint in the termination message, and a stopped worker never "completes" --

WORKER = """
import os, sys, time
from gangrun._ckpt.events import checkpoint_committed
events = os.environ["GANGRUN_EVENTS_FILE"]
for step in (2, 4):
    checkpoint_committed(events, task="train", attempt=1, rank=0, seq=step // 2, step=step, uri=f"s3://b/step-{step}")
print("ready", flush=True)
if sys.argv[1] == "wait":
    import signal
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))  # saves, then exits 0 as a well-behaved worker does
    time.sleep(60)
"""


def _pod_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "JOB_COMPLETION_INDEX": "0", "NNODES": "1", "NPROC_PER_NODE": "1",
            "GANGRUN_EVENTS_FILE": str(tmp_path / "events.jsonl"),
            "GANGRUN_TERMINATION_LOG": str(tmp_path / "termination-log")}


def test_in_a_pod_the_launcher_leaves_the_newest_commit_in_the_termination_message(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "gangrun.launch", "--", sys.executable, "-c", WORKER, "done"],
                         env=_pod_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    message = (tmp_path / "termination-log").read_text()
    assert json.loads(message)["commits"] == 2
    commit = _checkpoint_report.read(message)
    assert commit is not None and (commit.step, commit.seq, commit.uri) == (4, 2, "s3://b/step-4")


def test_a_worker_stopped_by_sigterm_that_exits_0_is_reported_as_stopped_not_completed(tmp_path: Path) -> None:
    # A drained pod whose worker saves and exits 0 would be a completed index to its Job: the gang would
    # never restart for the disruption. 143 makes it a failed pod the podFailurePolicy sees.
    proc = subprocess.Popen([sys.executable, "-m", "gangrun.launch", "--", sys.executable, "-c", WORKER, "wait"],
                            env=_pod_env(tmp_path), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert _checkpoint_report.read((tmp_path / "termination-log").read_text()) is not None


def test_outside_a_pod_the_exit_code_is_the_command_s() -> None:
    assert launch.exit_code(0, stopped=True) == 143 and launch.exit_code(0, stopped=False) == 0
    assert launch.exit_code(1, stopped=True) == 1


@pytest.mark.parametrize("lines,ok", [
    pytest.param([], False, id="nothing-committed"),
    pytest.param(['{"type":"checkpoint_committed","attempt":1,"rank":0,"seq":1,"step":1,"uri":"u","time":5}',
                  '{"type":"checkpoint_committed","attempt":1,"rank":0,"seq":2,"step":2,"uri":"u","ti'], True,
                 id="a-line-cut-by-a-kill-is-skipped"),
    pytest.param(['{"type":"checkpoint_committed","attempt":1,"rank":0,"seq":1,"step":1,"uri":"' + "x" * 5000
                  + '","time":5}'], True, id="a-huge-uri-is-dropped-to-fit-4096-bytes"),
])
def test_the_report_fits_the_termination_message(lines: list[str], ok: bool) -> None:
    text = _checkpoint_report.report(lines)
    assert len(text.encode()) <= _checkpoint_report.LIMIT
    assert (_checkpoint_report.read(text) is not None) is ok


@pytest.mark.parametrize("message", ["", "Traceback (most recent call last):", '{"gangrun": 2}', "[1]",
                                     '{"gangrun": 1, "newest": {"attempt": "1", "time": 3}}',
                                     '{"gangrun": 1, "newest": {"attempt": 1, "time": 1e300}}'])
def test_any_other_termination_message_reads_as_no_checkpoint(message: str) -> None:
    assert _checkpoint_report.read(message) is None


# -- in a pod, while the worker runs: the same report, served for the controller to poll --

LIVE_WORKER = """
import os, sys
from gangrun._ckpt.events import checkpoint_committed
checkpoint_committed(os.environ["GANGRUN_EVENTS_FILE"], task="train", attempt=1, rank=0, seq=1, step=7,
                     uri="s3://b/step-7")
print("ready", flush=True)
sys.stdin.readline()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_while_it_starts(url: str) -> str:
    # The report server starts just after the worker does: the worker's first line may come first.
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return str(r.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_in_a_pod_the_launcher_serves_the_newest_commit_while_the_worker_runs(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gangrun.launch", "--", sys.executable, "-c", LIVE_WORKER],
                            env={**_pod_env(tmp_path), "GANGRUN_REPORT_PORT": str(port)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        served = _get_while_it_starts(f"http://127.0.0.1:{port}/")
        commit = _checkpoint_report.read(served)
        assert commit is not None and (commit.step, commit.uri) == (7, "s3://b/step-7")
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
        assert (tmp_path / "termination-log").read_text() == served  # one report, two channels
    finally:
        proc.kill()
        proc.wait()


def test_the_live_report_reads_only_whole_lines_and_only_new_ones(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    line = '{"type":"checkpoint_committed","attempt":1,"rank":0,"seq":%d,"step":%d,"uri":"u","time":%d}'
    events.write_text(line % (1, 1, 5) + "\n" + (line % (2, 2, 6))[:30])  # the second is being appended
    tail = EventsTail(str(events))
    assert json.loads(tail.text())["commits"] == 1
    with events.open("a") as f:
        f.write((line % (2, 2, 6))[30:] + "\n")
    doc = json.loads(tail.text())
    assert (doc["commits"], doc["newest"]["step"]) == (2, 2)


def test_a_taken_report_port_leaves_the_worker_running_without_a_live_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        assert serve(taken.getsockname()[1], EventsTail(str(tmp_path / "events.jsonl"))) is None
    assert "cannot serve the live checkpoint report" in capsys.readouterr().err


PEER_STOP = """
import os, time, torch.distributed as dist, gangrun
dist.init_process_group("gloo")
ctx = gangrun.context()
steps = 0
while not ctx.should_stop() and steps < 4000:  # the first call imports gangrun.torch: seconds
    time.sleep(0.05)
    steps += 1
    if steps == 3:
        print("ready", flush=True)
"""


# -- one start id for every pod of a start (B7): the first node's launcher mints it, the others ask --

START_WORKER = "import os; print('start', os.environ.get('GANGRUN_START'), flush=True)"


def test_b7_every_pod_of_a_start_gets_the_start_id_the_first_node_s_launcher_minted(tmp_path: Path) -> None:
    port = _free_port()

    def pod(index: int) -> subprocess.Popen[str]:
        env = {**_pod_env(tmp_path / str(index)), "JOB_COMPLETION_INDEX": str(index), "NNODES": "2",
               "MASTER_ADDR": "127.0.0.1", "GANGRUN_REPORT_PORT": str(port), "GANGRUN_GANG": "t-1",
               "JOBSET_RESTART_ATTEMPT": "0", "GANGRUN_DNS_TIMEOUT": "20"}
        if index:  # pods have an address each; here the second would take the port for its own report first
            del env["GANGRUN_EVENTS_FILE"]
        (tmp_path / str(index)).mkdir()
        return subprocess.Popen([sys.executable, "-m", "gangrun.launch", "--", sys.executable, "-c", START_WORKER],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = pod(0)
    assert first.stdout is not None
    first_id = first.stdout.readline().split()[1]  # its worker is done ...
    time.sleep(1.0)  # ... before the second node's launcher even starts
    started = time.monotonic()
    other = pod(1)
    outs = [p.communicate(timeout=60) for p in (other, first)]
    assert [p.returncode for p in (other, first)] == [0, 0], outs
    assert outs[0][0].split()[1] == first_id and len(first_id) == 12, outs
    assert time.monotonic() - started < launch.LINGER, "the first launcher leaves once every node has asked"


def test_b7_a_launcher_asks_again_until_the_answer_is_its_own_gang_and_round() -> None:
    env = {"GANGRUN_GANG": "t-1", "JOBSET_RESTART_ATTEMPT": "2"}
    answers = iter([OSError("connection refused"), b"stopping",
                    json.dumps({"start": "old", "gang": "t-1", "restart": 1}).encode(),
                    json.dumps({"start": "other", "gang": "t-9", "restart": 2}).encode(),
                    json.dumps({"start": "new", "gang": "t-1", "restart": 2}).encode()])

    def get(url: str) -> bytes:
        assert url == "http://t-1-w-0-0.t-1:29510/start?node=0"
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert launch.fetch_start(env, host="t-1-w-0-0.t-1", port=29510, timeout=60, get=get, sleep=lambda s: None) == "new"


def test_b7_the_first_launcher_counts_a_node_as_answered_only_once_its_answer_is_sent() -> None:
    # The first launcher leaves as soon as every node is answered: counted at the ask, its exit raced the
    # answer still being written, and the other node saw its connection cut and then refused.
    served = launch.StartServer({"GANGRUN_GANG": "t-1"}, "abc")
    assert served.answer("node=1") is not None
    assert not served.wait_asked(1, timeout=0)
    served.answered("node=1")
    assert served.wait_asked(1, timeout=0)


def test_b7_a_launcher_whose_first_node_never_answers_says_which_address_it_asked() -> None:
    clock = iter(range(0, 1000, 10))

    def get(url: str) -> bytes:
        raise OSError("connection refused")

    with pytest.raises(TimeoutError, match=r"http://h:29510/start\?node=0 did not say this start's id within 60s"):
        launch.fetch_start({}, host="h", port=29510, timeout=60, get=get, sleep=lambda s: None,
                           clock=lambda: next(clock))


def test_b7_a_stopping_launcher_no_longer_gives_out_its_start_id() -> None:
    served = launch.StartServer({"GANGRUN_GANG": "t-1"}, "abc")
    assert json.loads(served.answer("node=1") or "")["start"] == "abc"
    launch.STOPPING.set()
    try:
        assert served.answer("node=1") is None
    finally:
        launch.STOPPING.clear()


def test_a_pod_whose_rank_was_stopped_only_by_a_peer_exits_stopped_not_completed(tmp_path: Path) -> None:
    # Issue 27, item 9: SIGTERM reaches pod 0 only; pod 1's worker leaves its loop because should_stop()
    # agreed across the gang, and exits 0. Its launcher got no SIGTERM, so only the SDK can say "stopped".
    pytest.importorskip("torch")
    port = str(_free_port())
    launchers = []
    for index in (0, 1):
        env = {**_pod_env(tmp_path / str(index)), "JOB_COMPLETION_INDEX": str(index), "NNODES": "2", "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "GANGRUN_TASK": "train", "GANGRUN_ATTEMPT": "1",
               "GANGRUN_GRACE_PERIOD": "30", "OMP_NUM_THREADS": "1"}
        (tmp_path / str(index)).mkdir()
        launchers.append(subprocess.Popen([sys.executable, "-m", "gangrun.launch", "--", sys.executable, "-c", PEER_STOP],
                                          env=env, stdout=subprocess.PIPE, text=True))
    try:
        for p in launchers:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        launchers[0].send_signal(signal.SIGTERM)
        assert launchers[1].wait(timeout=120) == 143, "the peer's pod would be a completed index"
        assert launchers[0].wait(timeout=120) == 143
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
                p.wait()


# -- the waits end within one look of the name's publication, without hammering the cluster DNS --

class _FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


@pytest.mark.parametrize("published", [0.0, 0.04, 0.3, 2.7, 45.0])
def test_the_dns_wait_ends_within_200ms_of_the_name_s_publication_at_most_20_lookups_a_second(
        published: float) -> None:
    t = _FakeTime()
    looks: list[float] = []

    def resolve(host: str) -> object:
        looks.append(t.now)
        if t.now < published:
            raise OSError("Name or service not known")
        return "10.0.0.1"

    launch.wait_for_dns("h", timeout=300, resolve=resolve, sleep=t.sleep, clock=t.clock)
    assert published <= t.now <= published + launch.POLL_CAP
    assert all(b - a >= launch.FIRST_POLL for a, b in itertools.pairwise(looks))
    assert max(t.sleeps, default=0) <= launch.POLL_CAP and len(looks) <= 1 + published / launch.POLL_CAP + 6


def test_the_start_id_ask_ends_within_200ms_of_the_first_node_s_answer() -> None:
    t = _FakeTime()
    answer = json.dumps({"start": "abc", "gang": "t-1", "restart": 0}).encode()

    def get(url: str) -> bytes:
        if t.now < 3.0:
            raise OSError("connection refused")
        return answer

    assert launch.fetch_start({"GANGRUN_GANG": "t-1"}, host="h", port=1, timeout=300, get=get, sleep=t.sleep,
                              clock=t.clock) == "abc"
    assert 3.0 <= t.now <= 3.0 + launch.POLL_CAP and min(t.sleeps) == launch.FIRST_POLL
