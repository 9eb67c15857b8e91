"""`LocalBackend`: the CLI's handle on the local control plane (the `Backend` Protocol and more).

Writes go to the daemon over its Unix socket, starting it on demand (`submit`, `up`, and the
operations that change a task). Reads (`get`, `list`, `events`) ask the daemon when it runs and
otherwise read the SQLite store directly, so `gangrun get` after `gangrun local down` still answers
without starting anything. Logs are files under the home and are read directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gangrun._backends.local import launcher, protocol
from gangrun._backends.local.config import Config, Paths, default_home
from gangrun._backends.local.store import Store
from gangrun._backends.local.tasks import TaskRecord, log_files, view
from gangrun._core.spec import TaskSpec
from gangrun._core.timeline import Event
from gangrun._errors import DaemonUnavailable, SpecError, UsageError

START_TIMEOUT = 20.0
TERMINAL = {"Succeeded", "Failed", "Aborted"}


class LocalBackend:
    name = "local"

    def __init__(self, home: Path | str | None = None) -> None:
        self.paths = Paths(Path(home).expanduser().resolve() if home else default_home().resolve())

    # -- the daemon ----------------------------------------------------------------------------------

    def _call(self, op: str, args: dict[str, Any] | None = None, *, start: bool = False,
              timeout: float = 30.0) -> Any:
        try:
            return protocol.call(self.paths.socket, op, args, timeout=timeout)
        except DaemonUnavailable:
            if not start or self._running():
                raise
        self._start()
        return protocol.call(self.paths.socket, op, args, timeout=timeout)

    def _running(self) -> bool:
        try:
            protocol.call(self.paths.socket, "ping", timeout=5.0)
            return True
        except DaemonUnavailable:
            return False

    def _start(self) -> None:
        """Start the daemon detached from this process (own session, output to daemon.log) and wait for it."""
        self.paths.ensure()
        env = dict(os.environ, GANGRUN_HOME=str(self.paths.home))
        with open(self.paths.log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "gangrun._backends.local.daemon", str(self.paths.home)],
                                    env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    start_new_session=True, close_fds=True, cwd=str(self.paths.home))
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._running():
                return
            if proc.poll() not in (None, 0):
                break
            time.sleep(0.02)
        tail = self.paths.log.read_text(errors="replace")[-2000:] if self.paths.log.exists() else ""
        raise DaemonUnavailable(f"the local control plane did not start (see {self.paths.log}):\n{tail}")

    def up(self, *, cpu: str | None = None, memory: str | None = None, gpu: int | None = None,
           queues: list[str] | None = None, priority_classes: dict[str, int] | None = None) -> dict[str, Any]:
        """Start the daemon if needed and set the quota (None keeps the current value). Returns status()."""
        args = {"cpu": cpu, "memory": memory, "gpu": gpu, "queues": queues, "priorityClasses": priority_classes}
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
        doc = {"manifest": spec.raw, "source": str(Path(spec.source).resolve()) if spec.source else "", "cwd": str(cwd)}
        return self._call("submit", doc, start=True)

    def get(self, name: str) -> dict[str, Any]:
        return self._read("get", {"name": name},
                          lambda store, recs, cfg, now: view(_pick(recs, name), cfg, self.paths, now))

    def list(self) -> list[dict[str, Any]]:
        return self._read("list", {}, lambda store, recs, cfg, now: [view(r, cfg, self.paths, now) for r in recs])

    def events(self, name: str) -> list[Event]:
        docs = self._read("events", {"name": name}, lambda store, recs, cfg, now: _offline_events(store, recs, name))
        return [Event.from_json(d) for d in docs]

    def cancel(self, name: str) -> bool:
        return bool(self._call("cancel", {"name": name}, start=True))

    def logs(self, name: str, *, rank: int | None = None, attempt: int | None = None,
             follow: bool = False) -> Iterator[str]:
        v = self.get(name)
        n = v["attempt"] if attempt is None else attempt
        if n < 1 or n > v["attempt"]:
            raise UsageError(f'task "{name}" has attempts 1..{v["attempt"]}, not {n}')
        if rank is not None and not 0 <= rank < v["worldSize"]:
            raise UsageError(f'task "{name}" has ranks 0..{v["worldSize"] - 1}, not {rank}')
        prefix = rank is None and v["worldSize"] > 1
        offsets: dict[Path, int] = {}
        while True:
            done = self.get(name)["phase"] in TERMINAL if follow else True
            for _restart, r, path in log_files(self.paths, name, n, rank):
                with open(path, "rb") as f:
                    f.seek(offsets.get(path, 0))
                    data = f.read()
                end = data.rfind(b"\n") + 1 if follow and not done else len(data)
                offsets[path] = offsets.get(path, 0) + end
                for line in data[:end].decode(errors="replace").splitlines():
                    yield f"[rank {r}] {line}" if prefix else line
            if done:
                return
            time.sleep(0.2)

    def wait_for_change(self, name: str, *, after_version: tuple[int, int, str], timeout: float) -> dict[str, Any]:
        try:
            return self._call("wait", {"name": name, "after": list(after_version), "timeout": timeout},
                              timeout=timeout + 30)
        except DaemonUnavailable:
            time.sleep(min(timeout, 0.5))
            return self.get(name)

    # -- fault injection (B6) ------------------------------------------------------------------------

    def evict(self, name: str, reason: str) -> None:
        self._call("evict", {"name": name, "reason": reason}, start=True)

    def deactivate(self, name: str) -> None:
        self._call("deactivate", {"name": name}, start=True)

    def activate(self, name: str) -> None:
        self._call("activate", {"name": name}, start=True)

    # -- reads without a daemon ----------------------------------------------------------------------

    def _read(self, op: str, args: dict[str, Any], offline: Any) -> Any:
        """Ask the daemon; without one, `offline(store, records, config, now)` answers from the store."""
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
            recs = [TaskRecord.from_row(r) for r in store.rows()]
            return offline(store, recs, cfg, time.time())
        finally:
            store.close()


def _offline_events(store: Store, recs: list[TaskRecord], name: str) -> list[dict[str, Any]]:
    _pick(recs, name)
    return [e.for_json() for e in store.events(name)]


def _pick(recs: list[TaskRecord], name: str) -> TaskRecord:
    for r in recs:
        if r.name == name:
            return r
    raise UsageError(f'unknown task "{name}" (known tasks: {", ".join(r.name for r in recs) or "none"})')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = launcher.proc_stat(pid)
    return fields is not None and fields[0] != "Z"  # a zombie (our own child in tests) counts as gone
