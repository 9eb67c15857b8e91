"""One resume point per gang start: rank 0 chooses the checkpoint, every other rank loads exactly it.

`load()` takes the newest complete checkpoint *when it is called*. Left to itself, a rank that loads
after rank 0 has trained and committed a new save (it started late, its node was slow) would resume
from a later step than its peers: a different data position and optimizer state, with no error. So
within one start of a gang (GANGRUN_START: the same id on every worker of the start, a new one at
every admission, readmission and restart) the choice is made once:

    rank 0          chooses as `load()` always has (own attempt first, then earlier attempts, then
                    resumeFrom), then writes ``attempt-<N>/start-<id>.json`` naming the checkpoint
                    (or saying there is none) before it reads a byte of it
    other ranks     wait for that file and load the checkpoint it names, whatever was committed
                    meanwhile

Rank 0 reads the file first too: a second `load()` in the same start (another `Checkpoint`, a
restarted script) gets the same answer. While the start runs, rank 0's retention keeps the checkpoint
it named (`keep`), so a slow rank never finds it removed; the files of earlier starts are removed.
A start's choice is never removed by another start's rank 0: each removes only what it found when it
chose.

The file is written whole (tmp + rename on a filesystem, one PUT on an object store) and never
changes, so a reader sees nothing or all of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

from gangrun._ckpt.layout import join
from gangrun._ckpt.polls import Polls
from gangrun._ckpt.storage import Storage
from gangrun._errors import CheckpointError

Where = Literal["own", "previous", "resumeFrom"]
_MARKER = re.compile(r"^start-([0-9A-Za-z_-]+)\.json(\.part)?$")


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a start resumes from (`uri` None: from scratch)."""

    uri: str | None
    attempt: int | None = None
    seq: int | None = None
    step: int | None = None
    where: Where | None = None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ResumePoint:
        doc = json.loads(data)
        if not isinstance(doc, dict) or ("uri" in doc and doc["uri"] is not None and not isinstance(doc["uri"], str)):
            raise ValueError("not a resume point")
        return cls(uri=doc.get("uri"), attempt=doc.get("attempt"), seq=doc.get("seq"), step=doc.get("step"),
                   where=doc.get("where"))


def marker_name(start: str) -> str:
    return f"start-{start}.json"


def is_marker(name: str) -> bool:
    return _MARKER.match(name.rstrip("/")) is not None


def read(storage: Storage, attempt_dir: str, start: str) -> ResumePoint | None:
    """The point chosen for `start`, or None while rank 0 has not chosen."""
    try:
        return ResumePoint.from_bytes(storage.read_bytes(join(attempt_dir, marker_name(start))))
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # an object store without atomic writes may show a half-written file: look again


def publish(storage: Storage, attempt_dir: str, start: str, point: ResumePoint) -> None:
    storage.makedirs(attempt_dir)
    storage.write_bytes(join(attempt_dir, marker_name(start)), point.to_bytes(), sync=False)


def wait(storage: Storage, attempt_dir: str, start: str, *, rank: int, timeout: float,
         stopping: Callable[[], bool]) -> ResumePoint:
    """On a rank other than 0: the point rank 0 chose for `start`, once it is written. Raises
    CheckpointError when rank 0 has not chosen within `timeout` seconds, or the gang is stopping."""
    for _ in Polls(timeout=timeout, local=storage.local):
        point = read(storage, attempt_dir, start)
        if point is not None:
            return point
        if stopping():
            raise CheckpointError(f"rank {rank}: the gang is stopping before rank 0 chose a checkpoint to resume from")
    raise CheckpointError(
        f"rank {rank}: rank 0 did not choose the checkpoint to resume from within {timeout:g} s "
        f"(every rank of a gang resumes from the one rank 0 loads: does rank 0 call load()?)"
    )


def earlier(storage: Storage, folders: list[str], start: str) -> list[str]:
    """The choices of other starts in `folders` (attempt folders). Rank 0 lists them when it chooses and
    removes them at its first commit: they were made before it, so by starts that are over. (A choice
    that appears later is a newer start's, and is never touched.)"""
    keep = marker_name(start)
    return [join(folder, name.rstrip("/")) for folder in folders for name in storage.list_names(folder)
            if is_marker(name) and name.rstrip("/") != keep]
