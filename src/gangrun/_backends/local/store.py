"""SQLite state of the local control plane: tasks, their timelines, the configuration.

One row per task holds everything that must survive a daemon crash: the engine's `TaskState`, the
Workload twin and the gang twin of the current attempt (with worker pids), and the accounting. A
round of reconciles writes its rows and their new timeline events in ONE transaction (`save`), so a
daemon killed at any point restarts from consistent rows. WAL mode lets clients read while the
daemon writes. A file that is not a database is a `StoreUnreadable` that names it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gangrun._core.timeline import Event
from gangrun._errors import DaemonUnavailable

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    name TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    workload TEXT,
    gang TEXT,
    acct TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_task ON events (task, id);
CREATE TABLE IF NOT EXISTS config (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kept (name TEXT NOT NULL, root TEXT NOT NULL, PRIMARY KEY (name, root));
"""


@dataclass(kw_only=True)
class Row:
    """A task row as plain JSON values; the daemon turns them into its objects."""

    name: str
    seq: int
    spec: dict[str, Any]
    state: dict[str, Any]
    workload: dict[str, Any] | None
    gang: dict[str, Any] | None
    acct: dict[str, Any]
    error: str = ""  # why the row cannot be read, for a row that is not JSON any more


class Store:
    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        try:
            if readonly:
                # as_uri() percent-encodes the path: a '#', '?' or '%' in the home stays part of the file name
                self.db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                          timeout=10)
            else:
                self.db = sqlite3.connect(path, isolation_level=None, timeout=10)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.executescript(SCHEMA)
                path.chmod(0o600)
            self.db.execute("PRAGMA busy_timeout=10000")
            self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a file that is not SQLite fails here
        except sqlite3.DatabaseError as e:
            raise DaemonUnavailable(f"the local state {path} cannot be read ({e}); move it away to start "
                                    "afresh") from None

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- tasks -----------------------------------------------------------------------------------------

    def next_seq(self) -> int:
        (n,) = self.db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks").fetchone()
        return int(n)

    def insert(self, row: Row, events: list[Event]) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO tasks (name, seq, spec, state, workload, gang, acct) VALUES (?,?,?,?,?,?,?)",
                       (row.name, row.seq, _j(row.spec), _j(row.state), _j(row.workload), _j(row.gang),
                        _j(row.acct)))
            self._add_events(db, row.name, events)

    def save(self, changes: list[tuple[Row, list[Event]]]) -> None:
        """The one write path of a round: every changed row and its new events, atomically."""
        if not changes:
            return
        with self.transaction() as db:
            for row, events in changes:
                db.execute("UPDATE tasks SET state=?, workload=?, gang=?, acct=? WHERE name=?",
                           (_j(row.state), _j(row.workload), _j(row.gang), _j(row.acct), row.name))
                self._add_events(db, row.name, events)

    def delete(self, name: str, *, kept_root: str = "") -> None:
        """A task and its timeline, gone together; `kept_root`, the checkpoints it leaves, is remembered
        under its name (`kept`) so that a later purge of the name finds them wherever they are."""
        with self.transaction() as db:
            db.execute("DELETE FROM tasks WHERE name=?", (name,))
            db.execute("DELETE FROM events WHERE task=?", (name,))
            if kept_root:
                db.execute("INSERT OR IGNORE INTO kept (name, root) VALUES (?, ?)", (name, kept_root))

    def kept(self, name: str) -> list[str]:
        """The checkpoint roots deleted tasks of `name` left (see `delete`)."""
        return [r for (r,) in self.db.execute("SELECT root FROM kept WHERE name=? ORDER BY root", (name,))]

    def forget_kept(self, name: str, root: str) -> None:
        self.db.execute("DELETE FROM kept WHERE name=? AND root=?", (name, root))

    def rows(self) -> list[Row]:
        """Every task row; a row whose JSON does not parse comes back with `spec` None (`Row.broken`)."""
        cur = self.db.execute("SELECT name, seq, spec, state, workload, gang, acct FROM tasks ORDER BY seq")
        return [_row(r) for r in cur.fetchall()]

    # -- events ----------------------------------------------------------------------------------------

    @staticmethod
    def _add_events(db: sqlite3.Connection, task: str, events: list[Event]) -> None:
        db.executemany("INSERT INTO events (task, body) VALUES (?, ?)",
                       [(task, json.dumps(e.for_json())) for e in events])

    def events(self, task: str) -> list[Event]:
        cur = self.db.execute("SELECT body FROM events WHERE task=? ORDER BY id", (task,))
        out = []
        for (body,) in cur.fetchall():
            try:
                out.append(Event.from_json(json.loads(body)))
            except (ValueError, TypeError, KeyError):
                continue  # one damaged entry must not hide the rest of the timeline
        return out

    # -- config ----------------------------------------------------------------------------------------

    def config(self) -> dict[str, Any] | None:
        r = self.db.execute("SELECT value FROM config WHERE key='config'").fetchone()
        return json.loads(r[0]) if r else None

    def put_config(self, value: dict[str, Any]) -> None:
        self._put("config", json.dumps(value))

    def heartbeat(self) -> str | None:
        """When the daemon was last known alive (ISO time): its newest heartbeat or timeline entry."""
        r = self.db.execute("SELECT value FROM config WHERE key='heartbeat'").fetchone()
        beat = str(r[0]) if r else None
        last = self.db.execute("SELECT body FROM events ORDER BY id DESC LIMIT 1").fetchone()
        try:
            stamp = str(json.loads(last[0])["time"]) if last else None
        except (ValueError, KeyError, TypeError):
            stamp = None
        known = [t for t in (beat, stamp) if t]
        return max(known, key=datetime.fromisoformat) if known else None

    def put_heartbeat(self, at: str) -> None:
        self._put("heartbeat", at)

    def _put(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO config (key, value) VALUES (?, ?)", (key, value))


def _j(v: Any) -> str | None:
    return None if v is None else json.dumps(v)


def _row(r: tuple[Any, ...]) -> Row:
    name, seq, spec, state, workload, gang, acct = r
    try:
        return Row(name=name, seq=seq, spec=json.loads(spec), state=json.loads(state),
                   workload=json.loads(workload) if workload else None, gang=json.loads(gang) if gang else None,
                   acct=json.loads(acct))
    except (ValueError, TypeError) as e:
        return Row(name=str(name), seq=int(seq or 0), spec={}, state={}, workload=None, gang=None, acct={},
                   error=f"its stored JSON does not parse ({e})")
