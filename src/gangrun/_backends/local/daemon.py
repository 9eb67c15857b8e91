"""The local control plane process: one thread, one selector, no polling loop.

    python -m gangrun._backends.local.daemon <home>

The selector wakes on: a client connection (JSON-lines RPC, `protocol.py`), a worker exit (a pidfd
per worker becomes readable when it exits), SIGTERM (through a wakeup socket), or the earliest timer
the controller asks for (the engine's `wake_at`, a SIGKILL deadline, a requeue backoff, and a
0.5 s checkpoint-events tail while workers run). With nothing to do it sleeps.

One daemon per home: an exclusive `flock` on `daemon.lock`; a second one exits at once. Single
threaded on purpose: `preexec_fn` (PR_SET_PDEATHSIG) is only safe without threads, and one thread
makes every reconcile atomic with respect to the others.

`down` (or SIGTERM): every live gang is stopped (stop notice, SIGTERM, SIGKILL at its deadline),
no new gang is started, and the daemon exits once no worker is left.
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
from pathlib import Path
from typing import Any

from gangrun._backends.local import launcher, protocol
from gangrun._backends.local.config import Paths
from gangrun._backends.local.controller import Controller
from gangrun._backends.local.gang import GangTwin, Launch, Worker
from gangrun._backends.local.store import Store
from gangrun._backends.local.tasks import utc
from gangrun._core.timeline import Event, EventType

log = logging.getLogger("gangrun.local")
IDLE_TIMEOUT = 60.0


class Daemon:
    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        self.sel = selectors.DefaultSelector()
        self.store = Store(paths.db)
        self.ctl = Controller(paths, self.store, spawn=self._spawn)
        self.waiters: list[tuple[socket.socket, str, list, float]] = []
        self.down_conns: list[socket.socket] = []
        self.stopping = False

    # -- processes -----------------------------------------------------------------------------------

    def _spawn(self, g: GangTwin, w: Worker, launch: Launch, env: dict[str, str]) -> tuple[int, int]:
        logfile = Path(launch.logs) / f"restart-{g.restarts}" / f"rank-{w.rank}.log"
        p = launcher.spawn(launch.argv, env=env, cwd=launch.cwd, log=logfile)
        try:
            fd = os.pidfd_open(p.pid)  # EMFILE is possible: then nobody would ever see this worker exit
        except OSError:
            launcher.signal_group(p.pid, signal.SIGKILL)  # the gang treats a raise as "nothing started"
            p.wait()
            raise
        self.sel.register(fd, selectors.EVENT_READ, ("exit", g.task, g.attempt, w.rank, p, fd))
        rec = self.ctl.tasks.get(g.task)
        if rec is not None:
            rec.add(Event(time=utc(time.time()), type=EventType.WORKER_READY, attempt=g.attempt,
                          message=f"worker rank {w.rank} (node {w.node}) running, pid {p.pid}",
                          data={"rank": w.rank, "pid": p.pid, "restart": g.restarts}))
        return p.pid, launcher.start_time(p.pid) or 0

    def _exited(self, task: str, attempt: int, rank: int, p: Any, fd: int) -> None:
        launcher.signal_group(p.pid, signal.SIGKILL)  # its leftovers; the zombie leader keeps the pgid ours
        code = launcher.exit_code(p.wait())
        self.sel.unregister(fd)
        os.close(fd)
        self.ctl.on_exit(task, attempt, rank, code, time.time())

    # -- the loop ------------------------------------------------------------------------------------

    def serve(self) -> None:
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
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno())
        signal.signal(signal.SIGTERM, lambda *_: None)
        signal.signal(signal.SIGINT, lambda *_: None)
        self.sel.register(wake_r, selectors.EVENT_READ, ("signal", wake_r))
        self.ctl.load(time.time(), launcher.kill_leftovers)
        log.info("gangrun local control plane: pid %s, %d tasks", os.getpid(), len(self.ctl.tasks))
        try:
            while True:
                self._guarded(self.ctl.tick if not self.stopping else self._shutdown_step)
                if self.stopping and self.ctl.live_workers() == 0:
                    break
                self._answer_waiters()
                for key, _ in self.sel.select(self._timeout()):
                    self._guarded(lambda _n=0, key=key: self._dispatch(key))
        finally:
            self.ctl.mark_lost_on_shutdown(time.time())
            for conn in self.down_conns:
                _reply(conn, protocol.ok(True))
            sock_path.unlink(missing_ok=True)
            self.paths.pidfile.unlink(missing_ok=True)

    def _guarded(self, fn: Any) -> None:
        try:
            fn(time.time())
        except Exception:  # a bug in one reconcile must not take the control plane down
            log.error("gangrun: internal error\n%s", traceback.format_exc())
            time.sleep(0.05)

    def _timeout(self) -> float:
        now = time.time()
        wake = self.ctl.next_wake(now)
        deadlines = [d for _, _, _, d in self.waiters]
        if self.stopping:
            deadlines.append(now + 0.1)
        t = min([x for x in [wake, *deadlines] if x is not None], default=now + IDLE_TIMEOUT)
        return max(0.0, min(t - now, IDLE_TIMEOUT))

    def _shutdown_step(self, now: float) -> None:
        for rec in self.ctl.tasks.values():
            if rec.gang is not None:
                rec.gang.kill_overdue(now)

    def _dispatch(self, key: selectors.SelectorKey) -> None:
        kind = key.data[0]
        if kind == "exit":
            self._exited(*key.data[1:])
        elif kind == "listen":
            conn, _ = key.fileobj.accept()
            conn.setblocking(False)
            self.sel.register(conn, selectors.EVENT_READ, ("conn", conn, bytearray()))
        elif kind == "conn":
            self._read(key.data[1], key.data[2])
        elif kind == "signal":
            try:
                key.data[1].recv(64)
            except BlockingIOError:
                pass
            self._begin_shutdown()

    def _read(self, conn: socket.socket, buf: bytearray) -> None:
        try:
            chunk = conn.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            buf += chunk
        if chunk and b"\n" not in buf and len(buf) < protocol.MAX_LINE:
            return
        self.sel.unregister(conn)
        conn.setblocking(True)
        conn.settimeout(10)
        if not buf.strip():
            conn.close()
            return
        try:
            req = json.loads(bytes(buf).split(b"\n", 1)[0])
            answer = self._handle(conn, req.get("op", ""), req.get("args") or {})
        except Exception as e:
            if not isinstance(e, protocol.GangrunError):
                log.error("gangrun: request failed\n%s", traceback.format_exc())
            answer = protocol.error(e)
        if answer is not None:
            _reply(conn, answer)

    def _handle(self, conn: socket.socket, op: str, a: dict[str, Any]) -> bytes | None:
        ctl, now = self.ctl, time.time()
        if op == "wait":
            after = list(a["after"])
            if self._key(a["name"]) != after:
                return protocol.ok(ctl.view(a["name"], now))
            self.waiters.append((conn, a["name"], after, now + float(a.get("timeout", 1.0))))
            return None
        if op == "down":
            self.down_conns.append(conn)
            self._begin_shutdown()
            return None
        if self.stopping and op not in ("ping", "get", "list", "events", "status"):
            raise protocol.DaemonUnavailable("the local control plane is shutting down")
        result: Any
        if op == "ping":
            result = {"pid": os.getpid()}
        elif op == "submit":
            result = ctl.submit(a, now)
        elif op == "get":
            result = ctl.view(a["name"], now)
        elif op == "list":
            result = ctl.views(now)
        elif op == "events":
            ctl.task(a["name"])
            self._guarded(ctl.tick)  # flush what is pending so the answer is complete
            result = [e.for_json() for e in self.store.events(a["name"])]
        elif op == "cancel":
            result = ctl.cancel(a["name"], now)
        elif op == "evict":
            result = ctl.evict(a["name"], a["reason"], now)
        elif op == "deactivate":
            result = ctl.set_active(a["name"], False, now)
        elif op == "activate":
            result = ctl.set_active(a["name"], True, now)
        elif op == "configure":
            ctl.configure(cpu=a.get("cpu"), memory=a.get("memory"), gpu=a.get("gpu"), queues=a.get("queues"),
                          priority_classes=a.get("priorityClasses"))
            result = ctl.status(now)
        elif op == "status":
            result = ctl.status(now)
        else:
            raise protocol.DaemonUnavailable(f"unknown request {op!r}")
        self._guarded(ctl.tick)  # a reconcile's bug is logged; it must not fail this request too
        return protocol.ok(result)

    def _key(self, name: str) -> list:
        st = self.ctl.task(name).state
        return [st.attempt, st.info.version, st.phase.value]

    def _answer_waiters(self) -> None:
        now, keep = time.time(), []
        for conn, name, after, deadline in self.waiters:
            if self._key(name) != after or now >= deadline or self.stopping:
                _reply(conn, protocol.ok(self.ctl.view(name, now)))
            else:
                keep.append((conn, name, after, deadline))
        self.waiters = keep

    def _begin_shutdown(self) -> None:
        if not self.stopping:
            log.info("gangrun local control plane: stopping")
            self.stopping = True
            self.ctl.stop_all(time.time())


def _reply(conn: socket.socket, data: bytes) -> None:
    try:
        conn.sendall(data)
    except OSError:
        pass
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    paths = Paths(Path(argv[1]).resolve())
    paths.ensure()
    lock = open(paths.lock, "a")  # noqa: SIM115 - held for the life of the process
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another daemon serves this home
    paths.pidfile.write_text(str(os.getpid()))
    os.environ["GANGRUN_HOME"] = str(paths.home)
    Daemon(paths).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
