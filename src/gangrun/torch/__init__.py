"""PyTorch state dicts in gangrun checkpoints, saved sharded by every rank and committed once.

    from gangrun.torch import save_state, load_state

    loaded = load_state(state)                     # None on a fresh start; else step, world size, source
    ...
    save_state(state, step=step)                   # blocking=False: stage to host memory, write in the background
    save_state(state, step=step, per_rank=mine)    # `mine`: this rank's own values (RNG states), kept per rank
    if ctx.should_stop():                          # the same answer on every rank, at the same step
        save_state(state, step=step, blocking=True)

`state` is a torch.distributed.checkpoint state dict: plain or DDP module state, FSDP2/DTensor
state, optimizer state from ``torch.distributed.checkpoint.state_dict.get_state_dict``, or any dict of
tensors and picklable values. A value every rank holds under the same key is kept once (one rank's
copy), which is right for replicated state; values that are each rank's own go in `per_rank`
(_per_rank.py). Every rank calls both functions at the same step (they are collectives
when torch.distributed is initialised); each rank writes its own shards, replicated tensors once.

Checkpoints sit in the task's layout, next to `ctx.checkpoint` saves (``attempt-<N>/ckpt-<seq>/``),
and follow its rules: committed atomically (nothing is visible before every rank's files are written
and rank 0 has committed), loaded own attempt first then earlier attempts, `keep_last` retention.
A checkpoint written by one world size loads on another: DCP reshards.

Without an initialised process group the process saves alone; in a gang of several ranks without
one, only rank 0 saves (the replicated-state pattern) and the others return None.

Importing this module imports torch; ``import gangrun`` does not.
"""

from __future__ import annotations

import threading
from typing import Any

from gangrun._ckpt import events
from gangrun._ckpt.logs import say
from gangrun.checkpoint import Checkpoint
from gangrun.torch import _gang, _per_rank
from gangrun.torch._load import LoadedState, load
from gangrun.torch._save import Saver, StateSave
from gangrun.torch._target import resolve

__all__ = ["LoadedState", "StateSave", "load_state", "save_state", "wait"]

_savers: dict[tuple[str, int], Saver] = {}
_lock = threading.Lock()
_said_not_writer = False


def save_state(
    state_dict: dict[str, Any],
    *,
    step: int | None = None,
    per_rank: dict[str, Any] | None = None,
    blocking: bool = False,
    checkpoint: Checkpoint | None = None,
    storage_options: dict[str, Any] | None = None,
) -> StateSave | None:
    """Save `state_dict` as the next checkpoint of this attempt, every rank its own shards.

    blocking=False (the default) returns once the state is copied to host memory; the write and the
    commit run in the background, the next save waits for them, and a failure is raised once by the
    next `save_state` or `wait()` as CommitFailed. blocking=True returns once committed on every
    rank. `per_rank`: this rank's own values (its RNG states, sampler position, metrics), saved for
    this rank alone; `state_dict` keeps one copy of any value that is not sharded. `checkpoint`
    (default: this task's, ``gangrun.context().checkpoint``) says where; `storage_options` reach
    fsspec (object-store endpoints and keys).
    """
    if step is not None and not isinstance(step, int):
        raise TypeError(f"step must be an int or None, not {type(step).__name__}")
    _per_rank.check(per_rank, state_dict)
    if not _writes():
        return None
    return _saver(checkpoint, storage_options).save(state_dict, step=step, blocking=blocking, per_rank=per_rank)


def load_state(
    state_dict: dict[str, Any],
    *,
    per_rank: dict[str, Any] | None = None,
    checkpoint: Checkpoint | None = None,
    storage_options: dict[str, Any] | None = None,
) -> LoadedState | None:
    """Load the newest committed torch checkpoint into `state_dict` in place (own attempt first,
    then earlier ones), resharding if it was written by another world size. Returns what was
    loaded, or None (state_dict untouched) when there is no checkpoint yet.

    `per_rank` is filled in place with what this rank saved as its `per_rank`; when the checkpoint
    has none for this rank (saved by a smaller gang, or without per_rank) it is left as it was and
    `LoadedState.per_rank` is False. Never another rank's values."""
    _per_rank.check(per_rank, state_dict)
    loaded = load(resolve(checkpoint, storage_options), state_dict, per_rank)
    # The next step is the first one after the load, and its report names the step loaded.
    events.loaded(found=loaded is not None, step=loaded.step if loaded is not None else None)
    return loaded


def wait(timeout: float | None = None) -> bool:
    """Wait for this process's background saves. False on timeout; raises CommitFailed once if one
    failed. Call it before ``dist.destroy_process_group()``: a save in flight still needs the group."""
    with _lock:
        savers = list(_savers.values())
    return all(s.wait(timeout) for s in savers)


def _saver(checkpoint: Checkpoint | None, storage_options: dict[str, Any] | None) -> Saver:
    target = resolve(checkpoint, storage_options)
    with _lock:
        key = (target.root, target.attempt)
        saver = _savers.get(key)
        if saver is None:
            saver = _savers[key] = Saver(target)
        return saver


def _writes() -> bool:
    """False on a rank of a multi-rank gang that runs without torch.distributed: there rank 0 alone
    saves, as `ctx.checkpoint.save` does, since the ranks have no way to agree on one save."""
    global _said_not_writer
    if _gang.initialized():
        return True
    from gangrun._worker.context import context

    ctx = context()
    if ctx.rank == 0:
        return True
    if not _said_not_writer:
        _said_not_writer = True
        say(f"gangrun: rank {ctx.rank} does not write torch checkpoints (no torch.distributed group; rank 0 saves)")
    return False
