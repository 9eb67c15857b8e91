"""`LocalBackend`: the client's handle on the local control plane (the `Backend` Protocol and more).

Writes go to the daemon over its Unix socket, starting it on demand (`submit`, `up`, and the
operations on a task the store knows). Reads (`get`, `list`, `events`) ask the daemon when it runs
and otherwise read the SQLite store directly, so `gangrun get` after `gangrun local down` still
answers without starting anything — and says what it cannot know: a gang recorded as running when
its daemon died is reported as unknown since the daemon's last heartbeat. Logs are files under the
home and are read directly, a chunk at a time (`logfiles`).
"""

from __future__ import annotations

import builtins
import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from gangrun._backends.clock import Clock, system_clock
from gangrun._backends.local import launcher, logfiles, protocol
from gangrun._backends.local.config import Config, Paths, default_home
from gangrun._backends.local.render import resolve_executable
from gangrun._backends.local.store import Store
from gangrun._backends.local.task import LocalTask, log_files, read_rows, unreadable_view, view
from gangrun._core.phases import Phase
from gangrun._core.spec import TaskSpec
from gangrun._core.timeline import Event
from gangrun._core.view_types import ListedView, LocalView, OfflineLocalView, TaskView
from gangrun._core.worker_env import submitter_env
from gangrun._errors import DaemonUnavailable, SpecError, UsageError

START_TIMEOUT = 20.0
Offline = Callable[[Store, list[LocalTask], dict[str, str], Config, datetime], Any]


class LocalBackend:
    name = "local"
    threadsafe = True  # every call opens its own connection or store: the web page calls it from threads

    def __init__(self, home: Path | str | None = None, *, clock: Clock = system_clock,
                 start_timeout: float = START_TIMEOUT) -> None:
        self.paths = Paths(Path(home).expanduser().resolve() if home else default_home().resolve())
        self.clock = clock
        self.start_timeout = start_timeout  # how long a request waits for a daemon to start or come back

    # -- the daemon ----------------------------------------------------------------------------------

    def _call(self, op: str, args: dict[str, Any] | None = None, *, start: bool = False,
              timeout: float = 30.0) -> Any:
        """One request to the daemon. When none answers, wait (at most `start_timeout`) for the one that
        holds the home's lock: a daemon another client is starting (after a crash, several clients find it
        gone at once), or one putting back its removed socket. With nobody holding the lock, start one if
        `start`, else raise. A retried submit is safe: the daemon answers the same manifest with its task."""
        try:
            return protocol.call(self.paths.socket, op, args, timeout=timeout)
        except DaemonUnavailable as e:
            error = e
        began = time.monotonic()
        while time.monotonic() - began < self.start_timeout:
            if self._locked():
                time.sleep(0.2)
            elif start:
                self._start_once()
            else:
                raise error
            try:
                return protocol.call(self.paths.socket, op, args, timeout=timeout)
            except DaemonUnavailable as e:
                error = e
        if self._locked():
            raise self._not_answering(time.monotonic() - began) from None
        raise error

    def _not_answering(self, waited: float) -> DaemonUnavailable:
        """What is true of a lock held by a daemon that does not answer: whether the pid it wrote is alive."""
        pid = self._pid()
        if pid is not None and _alive(pid):
            return DaemonUnavailable(
                f"the local control plane (pid {pid}) holds {self.paths.lock} but has not answered on "
                f"{self.paths.socket} for {waited:.0f}s; stop it (kill {pid}) and run `gangrun local up`")
        which = f"{self.paths.pidfile} names pid {pid}, which is not running" if pid is not None else \
            f"{self.paths.pidfile} names no process"
        return DaemonUnavailable(
            f"a process holds {self.paths.lock} but no local control plane answered on {self.paths.socket} for "
            f"{waited:.0f}s ({which}); `fuser {self.paths.lock}` shows who holds it")

    def _locked(self) -> bool:
        """Whether a daemon holds this home's lock (alive, whether or not it answers)."""
        if not self.paths.lock.exists():  # never created here: a read must leave the home as it is
            return False
        try:
            with open(self.paths.lock, "rb") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    return True
                return False
        except OSError:
            return False

    def _pid(self) -> int | None:
        try:
            return int(self.paths.pidfile.read_text())
        except (OSError, ValueError):
            return None

    def _start_once(self) -> None:
        """Start a daemon unless another client just did: clients that find none at once (after a crash)
        take turns on the start lock, and each looks again before starting. Two daemons started at once
        would wait on the home's lock, and the second would take over when the first is stopped."""
        self.paths.ensure()
        with open(self.paths.start_lock, "a") as turn:
            fcntl.flock(turn, fcntl.LOCK_EX)
            if self._locked():
                return
            try:
                protocol.call(self.paths.socket, "ping", timeout=5.0)
                return
            except DaemonUnavailable:
                self._start()

    def _start(self) -> None:
        """Start the daemon detached from this process (own session, output to daemon.log) and wait for it."""
        self.paths.ensure()
        env = dict(os.environ, GANGRUN_HOME=str(self.paths.home))
        with open(self.paths.log, "ab") as out:
            start = out.tell()
            proc = subprocess.Popen([sys.executable, "-m", "gangrun._backends.local.daemon", str(self.paths.home)],
                                    env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    start_new_session=True, close_fds=True, cwd=str(self.paths.home))
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            try:
                protocol.call(self.paths.socket, "ping", timeout=5.0)
                return
            except DaemonUnavailable:
                pass
            code = proc.poll()
            if code not in (None, 0):
                break
            if code == 0 and not self._locked():  # it found another daemon, which has gone too: the caller
                return                            # starts one again
            time.sleep(0.02)
        said = self.paths.log.read_bytes()[start:].decode(errors="replace").strip().splitlines()
        error = next((line for line in reversed(said) if line.startswith("gangrun: error: ")), "")
        if error:
            raise DaemonUnavailable(error.removeprefix("gangrun: error: "))
        raise DaemonUnavailable(f"the local control plane did not start; see {self.paths.log}")

    def up(self, *, cpu: str | None = None, memory: str | None = None, gpu: int | None = None,
           queues: list[str] | None = None, priority_classes: dict[str, int] | None = None,
           metrics_port: int | None = None, priority_boost: bool | None = None,
           boost_steps: list[float] | None = None) -> dict[str, Any]:
        """Start the daemon if needed and set the quota (None keeps the current value). Returns status().
        `priority_boost`: checkpoint-aware preemption on or off (on by default); `boost_steps`: the
        node-seconds of unsaved work at which a gang's boost steps up."""
        args = {"cpu": cpu, "memory": memory, "gpu": gpu, "queues": queues, "priorityClasses": priority_classes,
                "metricsPort": metrics_port, "priorityBoost": priority_boost,
                "boostSteps": boost_steps}
        self._call("configure", args, start=True)
        return self.status()

    def down(self) -> bool:
        """Stop every gang and the daemon. Returns False when it was not running."""
        try:
            pid = self._call("ping")["pid"]
            self._call("down", timeout=600.0)
        except DaemonUnavailable:
            return False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.02)
        return True

    def status(self) -> dict[str, Any]:
        try:
            pid = self._call("ping")["pid"]
            status = self._call("status")
        except DaemonUnavailable:
            return {"running": False, "home": str(self.paths.home)}
        return {**status, "pid": pid, "home": str(self.paths.home), "socket": str(self.paths.socket)}

    # -- Backend -------------------------------------------------------------------------------------

    def submit(self, spec: TaskSpec) -> str:
        base = Path(spec.source).resolve().parent if spec.source else Path.cwd()
        cwd = (base / spec.working_dir).resolve()
        if not cwd.is_dir():
            raise SpecError("spec.workingDir", f"{spec.working_dir!r} is not a directory (relative to the manifest)")
        # The workers get this client's environment, not the daemon's (docs/local-backend.md).
        env = submitter_env(os.environ)
        doc = {"manifest": spec.raw, "source": str(Path(spec.source).resolve()) if spec.source else "", "cwd": str(cwd),
               "env": env, "executable": resolve_executable(spec.command[0], path=env.get("PATH"), cwd=str(cwd))}
        return str(self._call("submit", doc, start=True))

    def get(self, name: str) -> TaskView:
        return cast(TaskView, dict(self._read("get", {"name": name},
                                              lambda store, tasks, broken, cfg, now: _offline_view(
                                                  _pick(tasks, broken, name), cfg, self.paths, store, now))))

    def list(self) -> builtins.list[ListedView]:
        return builtins.list(self._read("list", {}, lambda store, tasks, broken, cfg, now: [
            *(_offline_view(t, cfg, self.paths, store, now) for t in tasks),
            *(unreadable_view(name, why) for name, why in broken.items())]))

    def events(self, name: str) -> builtins.list[Event]:
        docs = self._read("events", {"name": name}, lambda store, tasks, broken, cfg, now: [
            e.for_json() for e in store.events(_pick(tasks, broken, name).name)])
        return [Event.from_json(d) for d in docs]

    def cancel(self, name: str) -> bool:
        return bool(self._act("cancel", name))

    def delete(self, name: str, *, force: bool = False, purge: bool = False, timeout: float = 120.0) -> bool:
        """Remove an ended task, its timeline and logs (its checkpoints too with `purge`); with `force`,
        cancel a running one first and return once its workers are gone (the name is free again then)."""
        deleted = bool(self._act("delete", name, force=force, purge=purge))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.get(name)
            except UsageError:
                return deleted
            time.sleep(0.1)
        raise DaemonUnavailable(f'task "{name}" was cancelled but its workers did not stop within {timeout:.0f}s')

    def purge_deleted(self, name: str, *, force: bool = False) -> builtins.list[str]:
        """`SupportsPurgeDeleted`: remove the checkpoints deleted tasks of `name` kept; returns where they
        were. Refused while a task that has not ended resumes from them, unless `force`."""
        return builtins.list(self._call("purge", {"name": name, "force": force}, start=True))

    def logs(self, name: str, *, rank: int | None = None, attempt: int | None = None, round: int | None = None,
             follow: bool = False) -> Iterator[str]:
        if follow and round is not None:
            raise UsageError("--round (round=) shows one round's output; --follow (follow=True) follows the attempt "
                             "from its first round on: use one or the other")
        files, prefix, shown = self._log_files(name, rank, attempt, round)
        offsets: dict[Path, int] = {}
        while True:
            done = True
            if follow:  # until the task ends or moves past this attempt (TaskRun.log_lines goes on to the next)
                v = self.get(name)
                done = Phase(v["phase"]).terminal or v["attempt"] > shown
            for _restart, r, path in files():  # a chunk at a time: a log of any size costs one chunk
                for line, end in logfiles.lines(path, offsets.get(path, 0), whole=not follow or done):
                    offsets[path] = end
                    yield f"[rank {r}] {line}" if prefix else line
            if done:
                return
            time.sleep(0.2)

    def log_tail(self, name: str, *, rank: int | None = None, attempt: int | None = None, max_lines: int,
                 max_bytes: int) -> tuple[builtins.list[str], bool]:
        """The newest lines of `logs(...)` (read from the files' ends: at most `max_bytes` per call), and
        whether older ones were left out."""
        files, prefix, _ = self._log_files(name, rank, attempt)
        found = files()
        if not prefix:
            return logfiles.tail([p for _, _, p in found], max_lines=max_lines, max_bytes=max_bytes)
        out: builtins.list[str] = []
        truncated = False
        for _restart, r, path in found:  # every rank: each its share, in restart then rank order
            lines, cut = logfiles.tail([path], max_lines=max_lines, max_bytes=max_bytes // len(found))
            out.extend(f"[rank {r}] {line}" for line in lines)
            truncated = truncated or cut
        return out[-max_lines:], truncated or len(out) > max_lines

    def _log_files(self, name: str, rank: int | None, attempt: int | None, round: int | None = None,
                   ) -> tuple[Callable[[], builtins.list[tuple[int, int, Path]]], bool, int]:
        """The attempt's log files (a function: a running gang adds restart rounds), of one `round` or
        every one, whether lines are prefixed by rank, and the attempt. Raises UsageError for an attempt,
        rank or round the task does not have."""
        v = self.get(name)
        n = v["attempt"] if attempt is None else attempt
        if n < 1 or n > v["attempt"]:
            raise UsageError(f'task "{name}" has attempts 1..{v["attempt"]}, not {n}')
        world = v["worldSize"] or 0  # a local task's spec is valid: it always says
        if rank is not None and not 0 <= rank < world:
            raise UsageError(f'task "{name}" has ranks 0..{world - 1}, not {rank}')

        def files() -> builtins.list[tuple[int, int, Path]]:
            found = log_files(self.paths, name, v.get("uid") or "", n, rank)
            return [f for f in found if round is None or f[0] == round]

        if round is not None and not files():
            rounds = sorted({r for r, _, _ in log_files(self.paths, name, v.get("uid") or "", n, rank)})
            raise UsageError(f'attempt {n} of task "{name}" has no output of round {round} (rounds: '
                             f'{", ".join(map(str, rounds)) or "none yet"})')
        return files, rank is None and world > 1, n

    def wait_for_change(self, name: str, *, after_version: tuple[int, int, str], timeout: float) -> TaskView:
        try:
            return cast(TaskView, dict(self._call("wait", {"name": name, "after": builtins.list(after_version),
                                                           "timeout": timeout}, timeout=timeout + 30)))
        except DaemonUnavailable:
            time.sleep(min(timeout, 0.5))
            return self.get(name)

    # -- fault injection (B6) ------------------------------------------------------------------------

    def evict(self, name: str, reason: str) -> None:
        self._act("evict", name, reason=reason)

    def deactivate(self, name: str) -> None:
        self._act("deactivate", name)

    def activate(self, name: str) -> None:
        self._act("activate", name)

    def _act(self, op: str, name: str, **args: Any) -> Any:
        """An operation on an existing task: starts the daemon only if the store knows the task, so a
        mistyped name in a fresh home leaves nothing running."""
        try:
            return self._call(op, {"name": name, **args})
        except DaemonUnavailable:
            if self._locked():
                raise
        self._read("get", {"name": name},
                   lambda store, tasks, broken, cfg, now: name in broken or _pick(tasks, broken, name), daemon=False)
        return self._call(op, {"name": name, **args}, start=True)

    # -- reads without a daemon ----------------------------------------------------------------------

    def _read(self, op: str, args: dict[str, Any], offline: Offline, *, daemon: bool = True) -> Any:
        """Ask the daemon; without one, `offline(store, tasks, broken, config, now)` answers from the store."""
        if daemon:
            try:
                return self._call(op, args)
            except DaemonUnavailable:
                pass
        if not self.paths.db.exists():
            if op == "list":
                return []
            raise UsageError(f'unknown task "{args.get("name")}" (no local tasks yet)')
        store = Store(self.paths.db, readonly=True)
        try:
            stored = store.config()
            cfg = Config.from_json(stored) if stored else Config.default()
            tasks, broken = read_rows(store.rows())
            return offline(store, tasks, broken, cfg, self.clock())
        finally:
            store.close()


def _offline_view(task: LocalTask, cfg: Config, paths: Paths, store: Store,
                  now: datetime) -> LocalView | OfflineLocalView:
    """The view of a task while no daemon runs. A gang recorded as running is not known to run."""
    v = view(task, cfg, paths, now=now)
    g = task.gang
    if g is None or not g.live or task.terminal:
        return v
    seen = store.heartbeat()
    since = f" since {datetime.fromisoformat(seen).isoformat(timespec='seconds')}" if seen else ""
    # `reason` keeps its place in the view; `controlPlane` comes last.
    return {**v, "reason": f"unknown{since}: the local control plane is not running, so this gang's workers are "
                           f"gone; `gangrun local up` restarts it and decides what follows",
            "controlPlane": {"running": False, "lastSeen": seen}}


def _pick(tasks: list[LocalTask], broken: dict[str, str], name: str) -> LocalTask:
    for t in tasks:
        if t.name == name:
            return t
    if name in broken:
        raise UsageError(f'task "{name}" cannot be read ({broken[name]}); `gangrun delete {name}` removes it')
    raise UsageError(f'unknown task "{name}" (known tasks: {", ".join(t.name for t in tasks) or "none"})')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = launcher.proc_stat(pid)
    return fields is not None and fields[0] != "Z"  # a zombie (our own child in tests) counts as gone
