"""`gangrun ui`'s server without a browser: which Host names it answers (DNS rebinding), where it
listens and what it prints, and that a log of any size is served in bounded memory without holding
up other requests."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangrun._backends.local import LocalBackend
from gangrun._ui import start
from gangrun._ui.server import interface_addresses


@pytest.fixture
def page(tmp_path: Path) -> Iterator[str]:
    """The page of an empty local home, served on 127.0.0.1 with one more allowed name."""
    server = start(LocalBackend(tmp_path / "home"), allow_hosts=["gpu-box.lan"])
    yield server.url
    server.shutdown()
    server.server_close()


def _get(url: str, host: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_ui_refuses_a_foreign_host_header(page):
    port = page.rstrip("/").rsplit(":", 1)[1]
    status, body = _get(page + "api/tasks", host=f"attacker.example:{port}")
    assert status == 421
    assert "attacker.example" in json.loads(body)["error"]
    assert "--allow-host attacker.example" in json.loads(body)["error"]
    assert _get(page, host="attacker.example")[0] == 421  # the page itself too, not only the API


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}", "127.0.0.2",
                                  "10.1.2.3:{port}", "gpu-box.lan:{port}"])
def test_ui_answers_loopback_names_addresses_and_allowed_hosts(page, host):
    port = page.rstrip("/").rsplit(":", 1)[1]
    status, body = _get(page + "api/tasks", host=host.format(port=port))
    assert status == 200, body
    assert json.loads(body)["tasks"] == []


def _ui(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gangrun", "ui", "--port", "0", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "GANGRUN_HOME": str(home)})


def test_ui_on_every_address_prints_a_reachable_address_and_warns(tmp_path):
    proc = _ui(tmp_path / "home", "--host", "0.0.0.0")
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        warning = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    host = first.split()[2].removeprefix("http://").rsplit(":", 1)[0]
    assert host in (interface_addresses() or [socket.gethostname()]), first  # not 127.0.0.1
    assert warning.startswith("gangrun: warning: the page listens on every address (0.0.0.0)"), warning
    assert "every task and its logs" in warning


def test_gangrun_ui_allow_host_adds_a_name_the_page_answers(tmp_path):
    proc = _ui(tmp_path / "home", "--allow-host", "gpu-box.lan", "--allow-host", "tunnel.example")
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[2]
        port = url.rstrip("/").rsplit(":", 1)[1]
        assert _get(url + "api/tasks", host=f"gpu-box.lan:{port}")[0] == 200
        assert _get(url + "api/tasks", host="tunnel.example")[0] == 200
        assert _get(url + "api/tasks", host=f"attacker.example:{port}")[0] == 421
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_ui_listens_on_the_ipv6_loopback(tmp_path):
    server = start(LocalBackend(tmp_path / "home"), host="::1")
    try:
        assert server.url.startswith("http://[::1]:")
        status, body = _get(server.url + "api/tasks")
        assert (status, json.loads(body)["tasks"]) == (200, [])
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_in_use_blames_the_port_and_a_foreign_address_blames_the_host(tmp_path, gangrun):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = gangrun("ui", "--port", str(port), check=False)
        assert (r.returncode, r.stderr.count("\n")) == (2, 1), r.stderr
        assert f"--port {port}: already in use" in r.stderr
    r = gangrun("ui", "--host", "192.0.2.1", "--port", "0", check=False)  # TEST-NET-1: never this machine's
    assert (r.returncode, r.stderr.count("\n")) == (2, 1), r.stderr
    assert "--host 192.0.2.1: not an address of this machine" in r.stderr
    r = gangrun("ui", "--host", "no-such-name.invalid", "--port", "0", check=False)
    assert "--host no-such-name.invalid:" in r.stderr and "--port" not in r.stderr


# -- logs of any size --------------------------------------------------------------------------------

LOG_MB = 200
LIMIT = 64 * 2**20


@pytest.fixture
def big_log(tmp_path: Path, gangrun) -> tuple[Path, str]:
    """A finished one-worker task whose log is LOG_MB megabytes (written directly: fast)."""
    manifest = tmp_path / "big.yaml"
    manifest.write_text(json.dumps({"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask",
                                    "metadata": {"name": "big"},
                                    "spec": {"nodes": 1, "command": ["true"],
                                             "resources": {"cpu": "1", "memory": "100Mi"}}}))
    done = json.loads(gangrun("run", str(manifest), "-o", "json").stdout)
    assert done["phase"] == "Succeeded"
    home = tmp_path / "home"
    log = _log(home, "big")
    assert log.exists()
    line = b"x" * 99 + b"\n"
    block = line * (8 * 2**20 // len(line))
    with open(log, "wb") as f:
        for _ in range(LOG_MB // 8):
            f.write(block)
        f.write(b"the last line\n")
    return home, "big"


def _log(home: Path, name: str) -> Path:
    """Rank 0's log of attempt 1 (logs are kept per task identity: logs/<name>/<id>/...)."""
    (log,) = (home / "logs" / name).glob("*/attempt-1/restart-0/rank-0.log")
    return log


def _hwm(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


MEASURED = ("import sys, atexit\n"
            "atexit.register(lambda: sys.stderr.write('\\nVmHWM ' + [l for l in open('/proc/self/status') "
            "if l.startswith('VmHWM')][0].split()[1] + '\\n'))\n"
            "from gangrun.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")


def _measured(env: dict[str, str], *args: str, out: Path) -> int:
    """Peak memory (bytes) of a `gangrun ARGS` process, its output written to `out`."""
    with open(out, "wb") as f:
        r = subprocess.run([sys.executable, "-c", MEASURED, *args], stdout=f, stderr=subprocess.PIPE, text=True,
                           env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return int(r.stderr.rsplit("VmHWM ", 1)[1].split()[0]) * 1024


@pytest.mark.slow
def test_logs_of_200_mb_stay_under_64_mib(big_log, env, tmp_path):
    home, name = big_log
    size = _log(home, name).stat().st_size
    baseline = _measured(env, "get", name, out=tmp_path / "get.out")
    peak = _measured(env, "logs", name, out=tmp_path / "logs.out")
    assert (tmp_path / "logs.out").stat().st_size == size
    print(f"gangrun logs: peak {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB")
    assert peak - baseline < LIMIT, f"gangrun logs: {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB"

    proc = subprocess.Popen([sys.executable, "-m", "gangrun", "ui", "--port", "0"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[2]
        assert _get(url + "api/tasks")[0] == 200
        baseline = _hwm(proc.pid)
        started = time.monotonic()
        status, body = _get(url + f"api/tasks/{name}/logs?rank=0")
        tail_seconds = time.monotonic() - started
        doc = json.loads(body)
        assert (status, doc["truncated"], doc["lines"][-1], len(doc["lines"])) == (200, True, "the last line", 5000)
        assert tail_seconds < 2.0, f"the page's tail of a {LOG_MB} MB log took {tail_seconds:.1f}s"
        with urllib.request.urlopen(url + f"api/tasks/{name}/logs.txt?rank=0", timeout=120) as r:
            streamed = 0
            while piece := r.read(1 << 20):
                streamed += len(piece)
        assert streamed == size
        peak = _hwm(proc.pid)
        print(f"gangrun ui: peak {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB, tail {tail_seconds:.2f}s")
        assert peak - baseline < LIMIT, f"gangrun ui: {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


LOG_LINES = ("import sys, time\n"
             "import gangrun\n"
             "run = gangrun.attach(sys.argv[1], home=sys.argv[2])\n"
             "started = time.monotonic()\n"
             "lines = run.log_lines()\n"
             "first = next(lines)\n"
             "print('first', time.monotonic() - started, first == 'x' * 99, flush=True)\n"
             "count = 1 + sum(1 for _ in lines)\n"
             "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
             "print('all', count, hwm, flush=True)\n")


@pytest.mark.slow
def test_log_lines_of_a_200_mb_log_gives_its_first_line_at_once_and_stays_under_64_mib(big_log, env):
    home, name = big_log
    lines_in_log = _log(home, name).read_bytes().count(b"\n")
    baseline = _measured(env, "get", name, out=home.parent / "get.out")  # a Python with gangrun imported
    r = subprocess.run([sys.executable, "-c", LOG_LINES, name, str(home)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    first, every = (line.split() for line in r.stdout.splitlines())
    took, peak = float(first[1]), int(every[2]) * 1024
    print(f"run.log_lines(): first line {took:.3f}s, peak {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB")
    assert first[2] == "True" and int(every[1]) == lines_in_log
    assert took < 1.0, f"the first of {LOG_MB} MB of lines took {took:.1f}s"
    assert peak - baseline < LIMIT, f"run.log_lines(): {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB"


def test_api_tasks_answers_while_4_log_requests_are_in_flight(big_log, env):
    home, name = big_log
    server = start(LocalBackend(home))
    host, port = server.server_address[0], server.server_address[1]
    readers = []
    try:
        for _ in range(4):  # four whole-log downloads, each read a little and then left waiting
            c = http.client.HTTPConnection(str(host), port, timeout=30)
            c.request("GET", f"/api/tasks/{name}/logs.txt")
            r = c.getresponse()
            assert r.status == 200 and r.read(1 << 16)
            readers.append(c)
        started = time.monotonic()
        status, body = _get(server.url + "api/tasks")
        took = time.monotonic() - started
        assert status == 200 and [t["name"] for t in json.loads(body)["tasks"]] == [name]
        assert took < 2.0, f"/api/tasks took {took:.1f}s behind 4 log downloads"
        started = time.monotonic()
        assert _get(server.url + f"api/tasks/{name}/logs")[0] == 200  # the page's own log view too
        assert time.monotonic() - started < 2.0
    finally:
        for c in readers:
            c.close()
        server.shutdown()
        server.server_close()
