"""The local control plane process: one thread, one selector, one clock, no polling loop.

    python -m gangrun._backends.local.daemon <home>

The selector wakes on: a client connection (JSON-lines RPC, `protocol.py`), a worker exit (a pidfd
per worker becomes readable when it exits), SIGTERM (through a wakeup socket), or the earliest timer
the controller asks for (the engine's `wake_at`, a SIGKILL deadline, a requeue backoff, and a
0.5 s checkpoint-events read while workers run). With nothing to do it sleeps; every
`HEARTBEAT` it notes that it is alive (so the next daemon knows how long this one was down) and
checks that its socket is still there (re-binding it if someone deleted it).

One daemon per home: an exclusive `flock` on `daemon.lock`; a second one exits (after trying for
LOCK_PATIENCE, since clients probe the lock). Single threaded on purpose: `preexec_fn`
(PR_SET_PDEATHSIG) is only safe without threads, and one thread makes every reconcile atomic with
respect to the others.

`down` (or SIGTERM): every live gang is stopped (stop notice, SIGTERM, SIGKILL at its deadline),
no new gang is started, and the daemon exits once no worker is left, after ending whatever the
workers started in other sessions (`orphans.py`: the daemon is their subreaper).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from subprocess import Popen
from typing import Any

from gangrun._backends.clock import Clock, system_clock
from gangrun._backends.local import launcher, metrics_http, operations, orphans, protocol, reads, shutdown
from gangrun._backends.local.config import Paths
from gangrun._backends.local.controller import Controller
from gangrun._backends.local.gang import GangTwin, Worker
from gangrun._backends.local.render import Launch, log_path
from gangrun._backends.local.store import Store
from gangrun._core.exit_status import exit_status
from gangrun._errors import DaemonUnavailable, GangrunError

log = logging.getLogger("gangrun.local")
IDLE_TIMEOUT = 60.0
HEARTBEAT = timedelta(seconds=5)
LOCK_PATIENCE = 1.0
READS = frozenset({"ping", "get", "list", "events", "status"})  # still answered while shutting down


@dataclass
class _Waiter:
    conn: socket.socket
    name: str
    after: list[Any]
    deadline: datetime


class Daemon:
    def __init__(self, paths: Paths, *, clock: Clock = system_clock) -> None:
        self.paths, self.clock = paths, clock
        self.sel = selectors.DefaultSelector()
        self.store = Store(paths.db)
        self.ctl = Controller(paths, self.store, processes=self)
        self.waiters: list[_Waiter] = []
        self.down_conns: list[socket.socket] = []
        self.stopping = False
        self.server: socket.socket | None = None
        self.socket_id: tuple[int, int] | None = None
        self.prometheus = metrics_http.MetricsEndpoint(self.sel, lambda: reads.render_metrics(self.ctl, self.clock()))
        self.next_heartbeat = self.clock()
        self.orphans = orphans.Orphans(paths.home)  # what the workers started, whatever its session

    # -- Processes (what the controller may do to workers) ----------------------------------------------

    def start(self, gang: GangTwin, worker: Worker, launch: Launch, env: dict[str, str]) -> tuple[int, int]:
        mark = orphans.mark(self.paths.home, gang.name, gang.restarts, worker.rank, nonce=time.time_ns())
        p = launcher.spawn(launch.argv, env={**env, orphans.MARK: mark}, cwd=launch.cwd,
                           log=log_path(launch, gang, worker))
        try:
            fd = os.pidfd_open(p.pid)  # EMFILE is possible: then nobody would ever see this worker exit
        except OSError:
            launcher.signal_group(p.pid, signal.SIGKILL)  # the gang treats a raise as "nothing started"
            p.wait()
            raise
        self.sel.register(fd, selectors.EVENT_READ, ("exit", gang.task, gang.attempt, worker.rank, p, fd))
        self.orphans.started(p.pid, mark)
        return p.pid, launcher.start_time(p.pid) or 0

    def signal(self, pgids: Iterable[int], sig: int) -> None:
        for pgid in pgids:
            launcher.signal_group(pgid, sig)

    def free_port(self) -> int:
        return launcher.free_port()

    def _exited(self, task: str, attempt: int, rank: int, p: Popen[bytes], fd: int) -> None:
        launcher.signal_group(p.pid, signal.SIGKILL)  # its leftovers; the zombie leader keeps the pgid ours
        code = exit_status(p.wait())
        self.sel.unregister(fd)
        os.close(fd)
        self.orphans.exited(p.pid)
        try:  # the gang first: its peers' stop (a restart) must not wait for a walk of /proc
            operations.on_exit(self.ctl, task, attempt, rank, code, self.clock())
        finally:
            self.orphans.sweep()  # what it started in other sessions: its orphans are the daemon's now

    # -- the loop ------------------------------------------------------------------------------------

    def serve(self) -> None:
        self._bind()
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno())
        signal.signal(signal.SIGTERM, lambda *_: None)
        signal.signal(signal.SIGINT, lambda *_: None)
        self.sel.register(wake_r, selectors.EVENT_READ, ("signal", wake_r))
        if not orphans.become_subreaper():  # the marks still find what workers leave; init reaps it
            log.warning("gangrun local control plane: cannot become the child subreaper of the workers")
        # Before anything starts: what a dead daemon's workers left, in their process groups or not.
        self.ctl.load(self.clock(), kill_leftovers=lambda groups: (launcher.kill_leftovers(groups),
                                                                   self.orphans.sweep(keep_running=False)))
        self.prometheus.serve(self.ctl.config.metrics_port)
        log.info("gangrun local control plane: pid %s, %d tasks", os.getpid(), len(self.ctl.tasks))
        try:
            while True:
                started = time.perf_counter()
                self._guarded(self.ctl.tick if not self.stopping else partial(shutdown.kill_overdue, self.ctl))
                self.ctl.metrics.reconcile.observe(time.perf_counter() - started)
                if self.stopping and reads.live_workers(self.ctl) == 0:
                    break
                self._housekeeping()
                self._answer_waiters()
                for key, _ in self.sel.select(self._timeout()):
                    self._guarded(partial(self._dispatch, key))
        finally:
            self.orphans.sweep(keep_running=False)
            shutdown.mark_lost_on_shutdown(self.ctl, self.clock())
            for conn in self.down_conns:
                protocol.reply(conn, protocol.ok(True))
            self.paths.socket.unlink(missing_ok=True)
            self.paths.pidfile.unlink(missing_ok=True)

    def _bind(self) -> None:
        if self.server is not None:
            self.sel.unregister(self.server)
            self.server.close()
        sock_path = self.paths.socket
        sock_path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born 0600: no window where others could connect
        try:
            server.bind(str(sock_path))
        finally:
            os.umask(old)
        server.listen(128)
        server.setblocking(False)
        self.sel.register(server, selectors.EVENT_READ, ("listen",))
        self.server = server
        st = sock_path.stat()
        self.socket_id = (st.st_dev, st.st_ino)

    def _housekeeping(self) -> None:
        """Every HEARTBEAT: say we are alive, end orphans, and bring our socket back if someone removed it."""
        now = self.clock()
        if now < self.next_heartbeat:
            return
        self.next_heartbeat = now + HEARTBEAT
        self._guarded(self.ctl.heartbeat)
        if self.orphans.due():
            self.orphans.sweep()
        try:
            st = self.paths.socket.stat()
            here = (st.st_dev, st.st_ino) == self.socket_id
        except OSError:
            here = False
        if not here and not self.stopping:
            log.warning("gangrun local control plane: %s was removed; listening on it again", self.paths.socket)
            self._bind()

    def _guarded(self, fn: Callable[[datetime], Any]) -> None:
        try:
            fn(self.clock())
        except Exception:  # a bug in one reconcile must not take the control plane down
            log.error("gangrun: internal error\n%s", traceback.format_exc())

    def _timeout(self) -> float:
        now = self.clock()
        wakes = [self.ctl.next_wake(now), self.next_heartbeat, *(w.deadline for w in self.waiters)]
        if self.stopping:
            wakes.append(now + timedelta(seconds=0.1))
        t = min((x for x in wakes if x is not None), default=now + timedelta(seconds=IDLE_TIMEOUT))
        return max(0.0, min((t - now).total_seconds(), IDLE_TIMEOUT))

    def _dispatch(self, key: selectors.SelectorKey, _now: datetime) -> None:
        kind = key.data[0]
        if kind == "exit":
            self._exited(*key.data[1:])
        elif kind == "listen" and self.server is not None:
            conn, _ = self.server.accept()
            conn.setblocking(False)
            self.sel.register(conn, selectors.EVENT_READ, ("conn", conn, bytearray()))
        elif kind == "conn":
            self._read(key.data[1], key.data[2])
        elif kind == metrics_http.LISTEN:
            self.prometheus.accept()
        elif kind == metrics_http.CONNECTION:
            self.prometheus.answer(key.data[1], key.data[2])
        elif kind == "signal":
            try:
                key.data[1].recv(64)
            except BlockingIOError:
                pass
            self._begin_shutdown()

    def _read(self, conn: socket.socket, buf: bytearray) -> None:
        if not protocol.received(conn, buf, end=b"\n", limit=protocol.MAX_LINE):
            return
        self.sel.unregister(conn)
        conn.setblocking(True)
        conn.settimeout(10)
        if not buf.strip():
            conn.close()
            return
        try:
            req = json.loads(bytes(buf).split(b"\n", 1)[0])
            answer = self._handle(conn, str(req.get("op", "")), req.get("args") or {})
        except Exception as e:  # every error goes back to the client, typed
            if not isinstance(e, GangrunError):
                log.error("gangrun: request failed\n%s", traceback.format_exc())
            answer = protocol.error(e)
        if answer is not None:
            protocol.reply(conn, answer)

    def _handle(self, conn: socket.socket, op: str, a: dict[str, Any]) -> bytes | None:
        ctl, now = self.ctl, self.clock()
        if op == "wait":
            after = list(a["after"])
            if self._key(a["name"]) != after:
                return protocol.ok(reads.view(ctl, a["name"], now))
            timeout = timedelta(seconds=float(a.get("timeout", 1.0)))
            self.waiters.append(_Waiter(conn=conn, name=a["name"], after=after, deadline=now + timeout))
            return None
        if op == "down":
            self.down_conns.append(conn)
            self._begin_shutdown()
            return None
        if self.stopping and op not in READS:
            raise DaemonUnavailable("the local control plane is shutting down")
        result: Any = None
        if op == "ping":
            result = {"pid": os.getpid()}
        elif op == "submit":
            result = operations.submit(ctl, a, now)
        elif op == "get":
            result = reads.view(ctl, a["name"], now)
        elif op == "list":
            result = reads.views(ctl, now)
        elif op == "events":
            ctl.task(a["name"])
            self._guarded(ctl.tick)  # flush what is pending so the answer is complete
            result = [e.for_json() for e in self.store.events(a["name"])]
        elif op == "cancel":
            result = operations.cancel(ctl, a["name"], now)
        elif op == "delete":
            result = operations.delete(ctl, a["name"], force=bool(a.get("force")), purge=bool(a.get("purge")), now=now)
        elif op == "purge":
            result = operations.purge_deleted(ctl, a["name"], force=bool(a.get("force")))
        elif op == "evict":
            operations.evict(ctl, a["name"], a["reason"], now)
        elif op == "deactivate":
            operations.set_active(ctl, a["name"], False, now)
        elif op == "activate":
            operations.set_active(ctl, a["name"], True, now)
        elif op == "configure":
            operations.configure(ctl, cpu=a.get("cpu"), memory=a.get("memory"), gpu=a.get("gpu"),
                                 queues=a.get("queues"), priority_classes=a.get("priorityClasses"),
                                 metrics_port=a.get("metricsPort"), priority_boost=a.get("priorityBoost"),
                                 boost_steps=a.get("boostSteps"))
            self.prometheus.serve(self.ctl.config.metrics_port)
            result = reads.status(ctl, now)
        elif op == "status":
            result = reads.status(ctl, now)
        else:
            raise DaemonUnavailable(f"unknown request {op!r}")
        if op not in READS:  # carry the change out now; a reconcile's bug is logged, the request answered
            self._guarded(ctl.tick)
        return protocol.ok(result)

    def _key(self, name: str) -> list[Any]:
        st = self.ctl.task(name).state
        return [st.attempt, st.info.version, st.phase.value]

    def _answer_waiters(self) -> None:
        now, keep = self.clock(), []
        for w in self.waiters:
            try:
                done = self._key(w.name) != w.after or now >= w.deadline or self.stopping
                answer = protocol.ok(reads.view(self.ctl, w.name, now)) if done else None
            except GangrunError as e:  # deleted while someone waited on it
                answer = protocol.error(e)
            if answer is None:
                keep.append(w)
            else:
                protocol.reply(w.conn, answer)
        self.waiters = keep

    def _begin_shutdown(self) -> None:
        if not self.stopping:
            log.info("gangrun local control plane: stopping")
            self.stopping = True
            shutdown.stop_all(self.ctl, self.clock())


def _take(lock: Any) -> bool:
    """Take the home's lock, or return False when another daemon holds it. A client checking whether a
    daemon runs holds the lock shared for an instant, so a refusal is tried again for LOCK_PATIENCE
    before concluding that another daemon serves: else a crash's clients could turn every new daemon away."""
    deadline = time.monotonic() + LOCK_PATIENCE
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    paths = Paths(Path(argv[1]).resolve())
    paths.ensure()
    with open(paths.lock, "a") as lock:  # held for the life of the process
        if not _take(lock):
            return 0  # another daemon serves this home
        paths.pidfile.write_text(str(os.getpid()))
        os.environ["GANGRUN_HOME"] = str(paths.home)
        try:
            Daemon(paths).serve()
        except DaemonUnavailable as e:  # e.g. local.db is not a database: say so where the client looks
            print(f"gangrun: error: {e}", file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
