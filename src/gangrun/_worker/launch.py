"""Worker launcher for the Kubernetes image: `python -m gangrun.launch -- <command...>` runs `main`.

Every worker pod of a gang runs it (the JobSet's container command, see `render.py`). It:

1. completes the worker environment contract (`gangrun._core.worker_env.process_env`, the same
   rules the local backend uses): NODE_RANK from the Indexed Job's completion index, GROUP_RANK,
   TORCHELASTIC_RUN_ID, and RANK/LOCAL_RANK for one process per node;
2. waits until the rank-0 DNS name (`MASTER_ADDR`) resolves: the headless Service publishes pods as
   they are created, so early workers would otherwise fail their first connect. The wait is bounded
   (`GANGRUN_DNS_TIMEOUT`, default 300s) and fails with a message naming the host; it looks every
   50 ms at first, then at least every 200 ms (`FIRST_POLL`, `POLL_CAP`; the start id's ask likewise);
   then gives every worker of this start the same GANGRUN_START: the first node's launcher mints it
   and serves it on GANGRUN_REPORT_PORT (`GET /start`), the others ask it there (within the same
   bound). A readmission recreates every pod with the same environment, so only a live process of
   the new start can tell the starts apart; every rank then loads the checkpoint chosen for it;
3. runs the command directly (exec) for `NPROC_PER_NODE=1`, or under torchrun with a static
   rendezvous whose id is TORCHELASTIC_RUN_ID (`<jobset>-<restart attempt>`), so a whole-gang
   restart never joins the previous round's rendezvous;
4. stays the command's parent when it cannot exec (torchrun; PID 1, which ignores SIGTERM without a
   handler; or a pod, where it has two more jobs) and forwards SIGTERM/SIGINT to it. When the command
   is this interpreter running a script or a module (`fork_plan`), the child is a fork of the
   launcher that runs it with runpy (`gangrun._worker.forked_python`): one interpreter start per
   worker, not two. The fork is taken first, while the launcher has one thread, and waits for the
   environment (the start id) before it runs anything; `GANGRUN_LAUNCH_FORK=0` turns it off. Every
   other command (torchrun, a python option, another interpreter or program) is a subprocess;
5. in a pod (GANGRUN_TERMINATION_LOG set) while the command runs: serves the newest committed
   checkpoint on GANGRUN_REPORT_PORT for the controller to poll (`gangrun._worker.live_report`),
   from just after the command starts (the first node of a multi-node gang: from before its DNS
   wait, as it serves the start id too), and takes the stop notices the controller pushes there;
   it keeps GANGRUN_STOP_FILE as the newest of those and the pod annotation's, and puts it in place
   before it forwards a SIGTERM (`gangrun._worker.pod_notice`);
6. in a pod when the command ends: writes the same report into the termination message
   (`gangrun._checkpoint_report`), and turns an exit 0 after a SIGTERM into 143, because a worker
   that was stopped has not finished the task: a drained pod that exits 0 would read as a completed
   index to its Job;
7. with `failurePolicy.restartStrategy: InPlace` (GANGRUN_IN_PLACE_WAIT set): serves from its start on
   every node, for the pod's readiness probe; a worker that fails leaves the pod running, NotReady, until
   the controller orders the next round (POST /restart): then, and on a running worker's node after it
   was stopped for the order, it runs the command again in the same pod with the new round's restart
   attempt, rendezvous id and start id (`gangrun._worker.in_place`). Told nothing in time, it leaves
   with the worker's code and JobSet recreates the gang. Stopped by SIGTERM (its pod deleted), it
   leaves with `LOST_EXIT`, which the Job ignores: the Job makes that one pod again, and the new pod's
   launcher (GANGRUN_REPLACED > 0) runs nothing until the controller orders the round it joins.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from gangrun._core import worker_env as wenv
from gangrun._core.exit_status import exit_status
from gangrun._worker.forked_python import PythonCommand, Waiting, python_command
from gangrun._worker.in_place import Order, Rounds
from gangrun._worker.live_report import START_PATH, EventsTail, serve
from gangrun._worker.pod_notice import PodNotice

DEFAULT_DNS_TIMEOUT = 300.0
#: How often `wait_for_dns` and `fetch_start` look: a new pod's name resolves (and its launcher answers) a
#: fraction of a second after the pod starts, and a resume waits on it, so every look after the first
#: 50 ms comes at most 200 ms after the previous one: the wait ends within 200 ms of the name's publication,
#: at about five lookups a second (one cheap query to the cluster DNS) while it lasts.
FIRST_POLL = 0.05
POLL_CAP = 0.2
EXIT_DNS = 3
EXIT_USAGE = 2
EXIT_STOPPED = 128 + signal.SIGTERM
EXIT_NOT_JOINED = 4  # a replacement pod told no round to join: counted, so that its Job fails and JobSet recreates


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    raw = (env.get(name) or "").strip()
    return int(raw) if raw.isdigit() else default


def _node_rank(env: Mapping[str, str]) -> int:
    return _whole(env, wenv.NODE_RANK, _whole(env, "JOB_COMPLETION_INDEX", 0))


def _gang(env: Mapping[str, str]) -> str:
    return env.get(wenv.GANGRUN_GANG) or env.get(wenv.GANGRUN_TASK) or "gangrun"


def worker_environment(env: Mapping[str, str], *, start: str = "") -> dict[str, str]:
    """The environment the command runs with: `env` plus the per-node (and, for one process per
    node, per-process) variables of the contract. `start`: this start's id (see `start_id`)."""
    out = dict(env)
    node_rank = _node_rank(out)
    nnodes = _whole(out, wenv.NNODES, 1)
    nproc = _whole(out, wenv.NPROC_PER_NODE, 1)
    restart = _whole(out, wenv.RESTART_ATTEMPT, 0)
    gang = _gang(out)
    start = start or out.get(wenv.GANGRUN_START, "")
    out.setdefault(wenv.WORLD_SIZE, str(nnodes * nproc))
    out.setdefault(wenv.LOCAL_WORLD_SIZE, str(nproc))
    if nproc == 1:
        out.update(wenv.process_env(nproc_per_node=1, node_rank=node_rank, local_rank=0, restart_attempt=restart,
                                    gang=gang, start=start))
    else:  # torchrun sets RANK and LOCAL_RANK per process, by the same rule
        out.update(wenv.node_env(node_rank=node_rank, restart_attempt=restart, gang=gang, start=start))
    return out


# Set once this launcher is told to stop: from then on its start is over, and GET /start says so (a
# new start's launchers must not take the id of a start that is being torn down).
STOPPING = threading.Event()


#: How long the first node's launcher still answers GET /start after its worker ended, for nodes that
#: have not asked yet (a worker that ends in a second must not strand a peer whose launcher is starting).
LINGER = 30.0


class StartServer:
    """What the first node serves on GET /start: this start's id with the gang and restart round it
    belongs to, so that another gang's or an older round's launcher is never taken for it. It counts
    the nodes it answered (`?node=N`), once each answer is sent. An in-place restart gives it the next
    round's start (`next_round`); while the round changes (`pause`) it answers nothing."""

    def __init__(self, env: Mapping[str, str], start: str) -> None:
        self._gang = _gang(env)
        self._text: str | None = None
        self._asked: set[str] = set()
        self._changed = threading.Condition()
        self.next_round(_whole(env, wenv.RESTART_ATTEMPT, 0), start)

    def next_round(self, restart: int, start: str) -> None:
        with self._changed:
            self._text = json.dumps({"start": start, "gang": self._gang, "restart": restart})
            self._asked = set()

    def pause(self) -> None:
        with self._changed:
            self._text = None

    def answer(self, query: str = "") -> str | None:
        with self._changed:
            return None if STOPPING.is_set() else self._text

    def answered(self, query: str) -> None:
        with self._changed:
            self._asked.update(v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "node")
            self._changed.notify_all()

    def wait_asked(self, nodes: int, *, timeout: float) -> bool:
        """Wait until `nodes` other nodes have asked (or `timeout` passes); whether they all have."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._asked) >= nodes, timeout=timeout)


def fetch_start(env: Mapping[str, str], *, host: str, port: int, timeout: float,
                get: Callable[[str], bytes] | None = None, sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.monotonic) -> str:
    """This start's id, asked of the first node's launcher; TimeoutError naming it after `timeout`."""
    url = f"http://{host}:{port}{START_PATH}?node={_node_rank(env)}"
    want = (_gang(env), _whole(env, wenv.RESTART_ATTEMPT, 0))
    if get is None:
        import urllib.request  # only the other nodes' launchers ask: the first one never loads it

    fetch = get or (lambda u: urllib.request.urlopen(u, timeout=2).read())
    deadline, delay, why = clock() + timeout, FIRST_POLL, "no answer"
    while True:
        try:
            doc = json.loads(fetch(url))
            if (doc.get("gang"), doc.get("restart")) == want and isinstance(doc.get("start"), str):
                return str(doc["start"])
            why = f"it answered for gang {doc.get('gang')} round {doc.get('restart')}"
        except Exception as e:  # not up yet, stopping (503), a reply cut short, or not ours: ask again
            why = str(e)
        if clock() >= deadline:
            raise TimeoutError(f"the first node's launcher at {url} did not say this start's id within "
                               f"{timeout:.0f}s ({why}); can pods of the gang reach each other on port {port}?")
        sleep(delay)
        delay = min(delay * 1.5, POLL_CAP)


def torchrun_argv(env: Mapping[str, str], command: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={env.get(wenv.NNODES, '1')}", f"--nproc-per-node={env[wenv.NPROC_PER_NODE]}",
            f"--node-rank={env[wenv.NODE_RANK]}", f"--master-addr={env.get(wenv.MASTER_ADDR, '127.0.0.1')}",
            f"--master-port={env.get(wenv.MASTER_PORT, str(wenv.DEFAULT_MASTER_PORT))}",
            f"--rdzv-id={env[wenv.RUN_ID]}", *command]


def wait_for_dns(host: str, *, timeout: float, resolve: Callable[[str], object] = socket.gethostbyname,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
    """Return once `host` resolves; raise TimeoutError naming it after `timeout` seconds."""
    deadline = clock() + timeout
    delay = FIRST_POLL
    while True:
        try:
            resolve(host)
            return
        except OSError as e:
            if clock() >= deadline:
                raise TimeoutError(f"rank-0 host {host} did not resolve within {timeout:.0f}s ({e}); "
                                   f"is the JobSet's headless Service there (network.enableDNSHostnames)?") from None
        sleep(delay)
        delay = min(delay * 1.5, POLL_CAP)


class _Child(Protocol):
    def send_signal(self, signum: int) -> None: ...

    def wait(self) -> int: ...


def _run_forwarding(argv: list[str], env: dict[str, str], *, started: Callable[[], object] = lambda: None,
                    stopping: Callable[[], object] = lambda: None,
                    child_started: Callable[[_Child], object] = lambda _: None) -> tuple[int, bool]:
    """Run `argv` as a child, forwarding SIGTERM/SIGINT. Returns (exit code, whether a stop came)."""
    return _forwarding(lambda: subprocess.Popen(argv, env=env), started=started, stopping=stopping,
                       child_started=child_started)


def _forwarding(start: Callable[[], _Child], *, started: Callable[[], object] = lambda: None,
                stopping: Callable[[], object] = lambda: None,
                child_started: Callable[[_Child], object] = lambda _: None) -> tuple[int, bool]:
    """Start a child (a subprocess, or the forked copy told to go), forwarding SIGTERM/SIGINT to it;
    `started` runs once it is started, `stopping` before a signal is forwarded (the stop notice is then
    in place). The handlers come first: a stop that comes while the child starts reaches it once it
    has, and never leaves it running without its parent."""
    child: _Child | None = None
    early: list[int] = []
    stopped = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopped
        stopped = True
        STOPPING.set()
        stopping()
        if child is None:
            early.append(signum)
        else:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    child = start()
    for signum in early:
        child.send_signal(signum)
    started()
    child_started(child)
    return exit_status(child.wait()), stopped


def write_report(env: Mapping[str, str], tail: EventsTail | None) -> None:
    """Leave the newest committed checkpoint in the termination message; never fail the exit for it."""
    target = env.get(wenv.TERMINATION_LOG)
    if not target or tail is None:
        return
    text = tail.text()
    if text:
        try:
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            print(f"gangrun.launch: cannot write the termination message {target}: {e.strerror}", file=sys.stderr)


def exit_code(code: int, *, stopped: bool) -> int:
    """A worker that was stopped (SIGTERM) and exited 0 has not finished the task: report 143."""
    return EXIT_STOPPED if stopped and code == 0 else code


def fork_plan(args: Sequence[str], env: Mapping[str, str], *, executable: str = sys.executable,
              launcher_env: Mapping[str, str] | None = None) -> PythonCommand | None:
    """Whether the launcher, which stays the command's parent, runs it in a fork of itself (the command
    is this interpreter running a script or a module, one process per node) rather than as a subprocess.
    `env`: the launcher's environment; the worker's differs only in the contract's variables, none of
    which python reads as it starts."""
    if _whole(env, wenv.NPROC_PER_NODE, 1) > 1:  # torchrun starts the processes
        return None
    return python_command(args, env, executable=executable,
                         launcher_env=os.environ if launcher_env is None else launcher_env)


def _fork_for(args: Sequence[str], env: Mapping[str, str]) -> Waiting | None:
    command = fork_plan(args, env)
    if command is None or threading.active_count() > 1 or env.get("GANGRUN_LAUNCH_FORK") == "0":
        return None
    return Waiting.fork(command)


def _stop_for_order(child: _Child, notice: PodNotice | None, starts: StartServer | None,
                    env: Mapping[str, str]) -> Callable[[Order], None]:
    """How a running worker is stopped for an in-place restart: its stop notice in place, SIGTERM, and
    SIGKILL at the notice's deadline (or after the grace period) if it is still there."""
    def stop(order: Order) -> None:
        if notice is not None and order.notice is not None:
            notice.pushed(json.dumps(order.notice).encode())
        if starts is not None:
            starts.pause()  # a restarting node must not take this round's start id for the next one's
        deadline = (order.notice or {}).get("deadline")
        grace = (deadline - time.time() if isinstance(deadline, int | float)
                 else float(env.get(wenv.GRACE_PERIOD) or wenv.DEFAULT_GRACE_SECONDS))
        child.send_signal(signal.SIGTERM)
        kill = threading.Timer(max(grace, 0.0), child.send_signal, (signal.SIGKILL,))
        kill.daemon = True  # `send_signal` does nothing once the worker was waited for
        kill.start()

    return stop


def _round_env(base: Mapping[str, str], restart: int, *, starts: StartServer | None, master: str, port: int,
               timeout: float) -> dict[str, str]:
    """The worker's environment for in-place round `restart`: a new rendezvous id and a new start id, minted
    by the first node's launcher (served for the others) and asked of it by the others."""
    env = {**base, wenv.RESTART_ATTEMPT: str(restart)}
    env.pop(wenv.GANGRUN_START, None)
    if _node_rank(base) == 0 or _whole(base, wenv.NNODES, 1) == 1:
        start = wenv.new_start()
        if starts is not None:
            starts.next_round(restart, start)
    else:
        start = fetch_start(env, host=master, port=port, timeout=timeout)
    return worker_environment(env, start=start)


class _NotJoined(Exception):
    pass


def _join(rounds: Rounds, base: Mapping[str, str], *, wait: float, starts: StartServer | None, master: str,
          port: int, timeout: float) -> dict[str, str]:
    """A replacement pod's first round: the one the controller orders it to join (`Rounds.joined`)."""
    for sig in (signal.SIGTERM, signal.SIGINT):  # a stop while it waits: it leaves (no worker runs yet)
        signal.signal(sig, lambda _signum, _frame: STOPPING.set())
    order = rounds.joined(wait=wait)
    if order is None:
        raise _NotJoined("stopped while it waited for a round to join" if STOPPING.is_set() else
                         f"this pod replaced a lost one and was told no round to join within {wait:g}s")
    return _round_env(base, order.restart, starts=starts, master=master, port=port, timeout=timeout)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        args = args[args.index("--") + 1:]
    if not args:
        print("usage: python -m gangrun.launch -- <command...>", file=sys.stderr)
        return EXIT_USAGE
    base = dict(os.environ)
    master = base.get(wenv.MASTER_ADDR, "")
    multi = _whole(base, wenv.NNODES, 1) > 1
    in_pod = bool(base.get(wenv.TERMINATION_LOG))
    port = _whole(base, wenv.REPORT_PORT, 0) if in_pod else 0
    first = _node_rank(base) == 0
    timeout = float(base.get("GANGRUN_DNS_TIMEOUT") or DEFAULT_DNS_TIMEOUT)
    start = base.get(wenv.GANGRUN_START, "")
    if not start and (first or not multi):
        start = wenv.new_start()  # this launcher starts the whole gang's start, or the first node's
    stays = in_pod or os.getpid() == 1 or _whole(base, wenv.NPROC_PER_NODE, 1) > 1  # the command's parent
    forked = _fork_for(args, base) if stays else None  # first: the launcher has one thread yet
    events = base.get(wenv.EVENTS_FILE)
    tail = EventsTail(events) if in_pod and events else None
    starts = StartServer(base, start) if first and multi and port else None
    stop_file, annotation = base.get(wenv.STOP_FILE), base.get(wenv.STOP_ANNOTATION_FILE)
    notice = PodNotice(stop_file, annotation) if in_pod and stop_file and annotation else None
    wait = float(base.get(wenv.IN_PLACE_WAIT) or 0) if in_pod and port else 0.0
    joining = wait > 0 and _whole(base, wenv.REPLACED, 0) > 0  # this pod replaces one lost under the gang
    rounds = Rounds(_whole(base, wenv.RESTART_ATTEMPT, 0), stopping=STOPPING, replaced=joining) if wait > 0 else None
    if starts is not None and joining:
        starts.pause()  # its round's start id comes with the order

    def report() -> None:
        if port and (tail is not None or starts is not None or notice is not None or rounds is not None):
            serve(port, tail, starts, notice, rounds)

    if starts is not None or rounds is not None:  # asked for the start id, or probed for readiness, at once
        report()
    try:
        if rounds is not None and joining:
            env = _join(rounds, base, wait=wait, starts=starts, master=master, port=port, timeout=timeout)
        else:
            if master and multi:
                wait_for_dns(master, timeout=timeout)
                if not start and port:
                    start = fetch_start(base, host=master, port=port, timeout=timeout)
            env = worker_environment(base, start=start)
    except (TimeoutError, _NotJoined) as e:
        print(f"gangrun.launch: {e}", file=sys.stderr)
        if forked is not None:
            forked.abort()
        return wenv.LOST_EXIT if STOPPING.is_set() else EXIT_NOT_JOINED if isinstance(e, _NotJoined) else EXIT_DNS
    if stays:
        argv_ = torchrun_argv(env, args) if _whole(env, wenv.NPROC_PER_NODE, 1) > 1 else args
        try:
            # The live report for the controller's poll starts once the worker has (a poll comes every
            # few seconds; the worker is the one waited for).
            later = (lambda: None) if starts is not None or rounds is not None else report
            stopping = notice.at_stop if notice is not None else (lambda: None)
            def told(child: _Child) -> None:  # an in-place restart's order stops this child
                if rounds is not None:
                    rounds.running(_stop_for_order(child, notice, starts, base))

            code, stopped = (_forwarding(lambda: forked.go(env), started=later, stopping=stopping,
                                         child_started=told) if forked is not None
                             else _run_forwarding(argv_, env, started=later, stopping=stopping, child_started=told))
            while rounds is not None and not stopped:
                order = rounds.ended(code, wait=wait)
                if order is None:
                    break
                if notice is not None:
                    notice.clear()
                env = _round_env(base, order.restart, starts=starts, master=master, port=port, timeout=timeout)
                argv_ = torchrun_argv(env, args) if _whole(env, wenv.NPROC_PER_NODE, 1) > 1 else args
                code, stopped = _run_forwarding(argv_, env, stopping=stopping, child_started=told)
            stopped = stopped or STOPPING.is_set()  # a stop that came while a failed worker waited
        except OSError as e:
            print(f"gangrun.launch: cannot run {argv_[0]}: {e.strerror}", file=sys.stderr)
            return 127
        except TimeoutError as e:  # the first node's launcher did not say the next round's start id
            print(f"gangrun.launch: {e}", file=sys.stderr)
            return EXIT_DNS
        if starts is not None and not stopped:  # nodes still starting must learn this start's id
            starts.wait_asked(_whole(env, wenv.NNODES, 1) - 1, timeout=LINGER)
        write_report(env, tail)
        if rounds is not None and stopped:
            return wenv.LOST_EXIT  # its pod is going: the Job replaces it alone if the gang still runs
        return exit_code(code, stopped=stopped) if in_pod else code
    try:
        os.execvpe(args[0], args, env)
    except OSError as e:
        print(f"gangrun.launch: cannot run {args[0]}: {e.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached
