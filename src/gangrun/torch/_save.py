"""`save_state`: a DCP save of every rank into one gangrun checkpoint, committed once all ranks wrote.

One save, on every rank at the same step:

1. Rank 0 picks the next seq of this attempt and opens the pending location (commit.py: a
   ``ckpt-<seq>.tmp-<id>`` folder on local filesystems, the final ``ckpt-<seq>`` on object stores)
   and tells every rank where it is (one broadcast on the checkpoint group, see _gang.py).
2. Every rank writes its shards there with DCP (``__<rank>_<n>.distcp``); DCP's coordinator writes
   ``.metadata`` only after every rank's writes succeeded.
3. Every rank reports its files (size, CRC-32) or its error to rank 0, which writes
   ``gangrun-torch.json`` (world size, step, the ranks that saved `per_rank` values: _per_rank.py)
   and commits: the manifest, then the rename (local) or the manifest as the last object (object
   stores). Readers ignore everything before that (commit.py).
4. Rank 0 tells every rank whether the commit happened, so every rank returns or raises alike.

A rank killed at any point leaves a folder that is never committed: rank 0 commits only with every
rank's report in hand, and a dead rank makes the collectives of the others fail (or the whole gang
is stopped, which is what the backends do when a worker dies). Retention removes the leftover.

Asynchronous saves (``blocking=False``) copy the state to host memory in the caller (the only part
training waits for; the copy buffers are reused from save to save), then run steps 2-4 on the
background writer thread of _ckpt/writer.py: one save in flight, the next waits for it, a failure is
raised once by the next save or `wait()`, and in-flight saves are flushed before the process exits.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import torch

# The helpers DCP's own BlockingAsyncStager is made of; that class itself pins its cached buffers
# unconditionally, which fails on machines without an accelerator.
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from gangrun._ckpt import catalog, commit, events
from gangrun._ckpt import writer as writer_mod
from gangrun._ckpt.commit import Content, PendingCheckpoint, Taken, pending_for
from gangrun._ckpt.events import EVENTS_FILE_ENV
from gangrun._ckpt.layout import entry_name, join
from gangrun._ckpt.logs import say
from gangrun._ckpt.manifest import FileEntry
from gangrun._errors import CheckpointError, CommitFailed
from gangrun.torch import _dcp, _files, _gang, _per_rank
from gangrun.torch._target import Target

log = logging.getLogger("gangrun")

# DCP warns on every save without a process group; gangrun saves as a gang of one on purpose there
# (see gangrun.torch), and a warning per checkpoint would bury the worker log.
warnings.filterwarnings(
    "ignore", message="torch.distributed is disabled, unavailable or uninitialized", category=UserWarning
)

#: Written by rank 0 into every torch checkpoint: what a loader needs to know before DCP reads it.
INFO = "gangrun-torch.json"


@dataclass(frozen=True)
class StateSave:
    """A save: committed at `uri` when save_state() returns (blocking), or once the writer is done."""

    seq: int
    attempt: int
    step: int | None
    uri: str
    staging_seconds: float  # how long the caller was held copying the state to host memory (0 when blocking)


@dataclass(frozen=True)
class _Report:
    """What one rank tells rank 0 after writing: its files, or why it could not."""

    rank: int
    files: tuple[FileEntry, ...]
    error: str | None
    per_rank: bool = False  # this rank saved a per_rank section


class Saver:
    """The saves of one target (task root + attempt) from this process, one at a time."""

    def __init__(self, target: Target) -> None:
        self.target = target
        _SAVERS.add(self)
        self._bg = writer_mod.BackgroundWriter(target.attempt_uri)
        self._lock = threading.Lock()
        self._last_seq = 0
        self._staged: dict[str, Any] | None = None  # staging buffers, reused from save to save

    def save(
        self, state_dict: dict[str, Any], *, step: int | None, blocking: bool, per_rank: dict[str, Any] | None = None
    ) -> StateSave:
        t = self.target
        state_dict = _per_rank.with_section(state_dict, per_rank, _gang.rank())
        taken = Taken.now()  # the state as of now, and whether the gang is stopping
        events.first_step(os.environ.get(EVENTS_FILE_ENV) or None, task=t.task, attempt=t.attempt, rank=_gang.rank(),
                          step=step, now=taken.at)
        with self._lock:
            self._bg.wait()  # one save in flight; raises the previous one's failure, once
            group = _gang.side_group()
            staging = 0.0
            if not blocking:
                # Staged before the save is opened: a failed copy (out of memory) leaves nothing behind.
                started = time.perf_counter()
                state_dict = self._stage(state_dict)
                staging = time.perf_counter() - started
            seq, location, pending = self._open(group)
            # Rank 0, which committed, prunes: in the background.
            self._bg.run(lambda: self._write(state_dict, seq, step, location, pending, group, taken), blocking=blocking,
                         then=(lambda: self._retain(seq)) if pending is not None else None)  # fmt: skip
            return StateSave(seq, t.attempt, step, t.uri_of(t.attempt, seq), staging)

    def wait(self, timeout: float | None = None) -> bool:
        return self._bg.wait(timeout)

    # ------------------------------------------------------------ steps

    def _open(self, group: Any) -> tuple[int, str, PendingCheckpoint | None]:
        """Step 1: the seq and pending location, decided by rank 0 and known to every rank."""
        pending: PendingCheckpoint | None = None
        choice: tuple[int, str] | str
        if _gang.rank() == 0:
            try:
                t = self.target
                seq = max(catalog.next_seq(t.storage, t.attempt_path), self._last_seq + 1)
                pending = pending_for(t.storage, join(t.attempt_path, entry_name(seq)))
                pending.create()
                self._last_seq = seq
                choice = (seq, pending.location)
            except Exception as e:  # every rank must hear about it, or they wait in the broadcast forever
                choice = f"rank 0 could not open the save: {e!r}"
        else:
            choice = ""
        choice = _gang.broadcast(choice, group)
        if isinstance(choice, str):
            raise CommitFailed(f"torch checkpoint save under {self.target.root} failed: {choice}")
        return choice[0], choice[1], pending

    def _stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A copy of `state_dict` in host memory that training can no longer change.

        Copied into the buffers of the previous save when the state has the same shape (a save
        waits for the previous one, so they are free again): allocating and page-faulting the
        whole state on every save would double what training waits for. Pinned where an
        accelerator is present, so the device-to-host copy runs at full speed.
        """
        if self._staged is None or not _same_layout(self._staged, state_dict):
            self._staged = _create_cpu_state_dict(state_dict, pin_memory=torch.accelerator.is_available())
        # type_check=False: values that are not tensors or plain data are deep-copied (DCP pickles them).
        staged: dict[str, Any] = _copy_state_dict(state_dict, self._staged, type_check=False)
        return staged

    def _write(
        self,
        state_dict: dict[str, Any],
        seq: int,
        step: int | None,
        location: str,
        pending: PendingCheckpoint | None,
        group: Any,
        taken: Taken,
    ) -> None:
        """Steps 2-4, on every rank. `taken`: when the state was taken, and whether in a stop."""
        t = self.target
        me = _gang.rank()
        data_dir = join(location, "data")
        try:
            w = _dcp.writer(t, data_dir)
            dcp_save(state_dict, storage_writer=w, process_group=group, no_dist=group is None)
            files = tuple(_files.entry(t.storage, data_dir, rel) for rel in w.written)
            report = _Report(me, files, None, per_rank=_per_rank.KEY in state_dict)
        except (Exception, CheckpointException) as e:  # reported: rank 0 aborts instead of committing without this rank
            report = _Report(me, (), f"rank {me}: {e!r}")
        reports = _gang.gather(report, group)
        outcome: str | None = None
        if reports is not None:  # rank 0
            outcome = self._commit(reports, seq, step, data_dir, pending, taken)
        outcome = _gang.broadcast(outcome, group)
        if outcome is not None:
            raise CommitFailed(f"torch checkpoint save {t.uri_of(t.attempt, seq)} failed: {outcome}")

    def _commit(
        self, reports: list[_Report], seq: int, step: int | None, data_dir: str, pending: PendingCheckpoint | None,
        taken: Taken,
    ) -> str | None:
        """Rank 0: commit if every rank wrote; returns why not otherwise (and removes the save)."""
        t = self.target
        assert pending is not None  # rank 0 opened it in _open

        def write() -> Content:  # the ranks wrote the data: here, what it holds
            errors = [r.error for r in reports if r.error]
            if errors:
                raise CheckpointError("; ".join(errors))
            info = json.dumps({"format": 1, "world_size": len(reports), "step": step,
                               "per_rank": [r.rank for r in reports if r.per_rank]}).encode()  # fmt: skip
            t.storage.write_bytes(join(data_dir, INFO), info)
            files = [f for r in reports for f in r.files]
            files += [_files.entry(t.storage, data_dir, n) for n in (_dcp.METADATA, INFO)]
            return Content(kind="dir", files=tuple(sorted({f.path: f for f in files}.values(), key=lambda f: f.path)))

        save = commit.Save(task=t.task, attempt=t.attempt, rank=0, seq=seq, step=step, uri=t.uri_of(t.attempt, seq),
                           taken=taken, events_file=os.environ.get(EVENTS_FILE_ENV) or None, what="torch checkpoint",
                           ranks=len(reports))  # fmt: skip
        try:
            commit.commit(pending, save, write)
        except Exception as e:
            say(f"gangrun: torch checkpoint seq {seq} abandoned, not committed: {e}", logging.WARNING)
            return str(e)
        return None

    def _retain(self, seq: int) -> None:
        """Rank 0, after the commit of `seq` (and after telling every rank): `keep_last` retention.
        Off the save's path: removing an old checkpoint costs a tenth of a save, nobody waits for it."""
        t = self.target
        catalog.retain(t.storage, t.root_path, attempt=t.attempt, committed_seq=seq, keep_last=t.keep_last,
                       where=t.root)


_SAVERS: weakref.WeakSet[Saver] = weakref.WeakSet()


def _same_layout(staged: Any, state: Any) -> bool:
    """Whether `staged` has the keys, tensor shapes and dtypes of `state` (so it can be copied into)."""
    if isinstance(state, torch.Tensor):
        return isinstance(staged, torch.Tensor) and staged.shape == state.shape and staged.dtype == state.dtype
    if isinstance(state, dict):
        return isinstance(staged, dict) and staged.keys() == state.keys() and all(
            _same_layout(staged[k], v) for k, v in state.items()
        )
    if isinstance(state, (list, tuple)):
        return isinstance(staged, (list, tuple)) and len(staged) == len(state) and all(
            _same_layout(a, b) for a, b in zip(staged, state, strict=True)
        )
    return True


def _join_at_exit() -> None:
    """Join the writer threads before the interpreter finalizes. Waiting until no save is in flight
    (what _ckpt/writer.py does at exit) is not enough for torch: a daemon thread still releasing its
    staged tensors when finalization starts is torn out of torch's C++ code, and the process aborts
    ("terminate called without an active exception") after the checkpoint was committed."""
    deadline = writer_mod.exit_deadline
    for saver in list(_SAVERS):
        try:
            saver.wait(None if deadline is None else max(0.0, deadline - time.time()))
        except CommitFailed as e:
            log.error("gangrun: a background torch checkpoint save failed and was never waited for: %s", e)


# Among threading's exit hooks, which run while daemon threads still do (see _ckpt/writer.py).
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_join_at_exit)
