"""The gang as torch.distributed sees it: who writes, and the few collectives a checkpoint needs.

Checkpoint coordination (which seq a save gets, who has finished writing, whether the commit
happened) goes over a side gloo group of its own, created once on every rank. A background save
runs its collectives on a thread while training runs its own on the default group; two threads
issuing collectives on one group would interleave them differently on different ranks and hang.
Gloo carries small Python objects on CPU whatever the training backend is (NCCL included).

Without an initialised process group the process is a gang of one: no collective is issued.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any, TypeVar, cast

T = TypeVar("T")

_lock = threading.Lock()
# id(default group) -> side group. Weak: torch.distributed owns the group, and destroy_process_group()
# must be able to end it (and gloo's threads) then. Kept alive here, it was destroyed only during the
# interpreter's finalization, which now and then aborted the process after a successful run
# ("terminate called without an active exception").
_side: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def initialized() -> bool:
    """Whether torch.distributed is up. Never imports torch: a script that did not import it has no gang."""
    if "torch.distributed" not in sys.modules:
        return False
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def rank() -> int:
    if not initialized():
        return 0
    import torch.distributed as dist

    return int(dist.get_rank())


def world_size() -> int:
    if not initialized():
        return 1
    import torch.distributed as dist

    return int(dist.get_world_size())


def side_group() -> Any:
    """The checkpoint group (None outside a gang). Created collectively: every rank must call this
    at the same point, which save_state/load_state guarantee by calling it on entry."""
    if not initialized():
        return None
    import torch.distributed as dist

    key = id(dist.group.WORLD)
    with _lock:
        group = _side.get(key)
        if group is None:
            group = _side[key] = dist.new_group(backend="gloo")
        return group


def broadcast(obj: T, group: Any) -> T:
    """Rank 0's `obj` on every rank."""
    if group is None:
        return obj
    import torch.distributed as dist

    box: list[Any] = [obj]
    dist.broadcast_object_list(box, src=0, group=group)
    return cast(T, box[0])


def gather(obj: T, group: Any) -> list[T] | None:
    """Every rank's `obj`, in rank order, on rank 0; None on the other ranks."""
    if group is None:
        return [obj]
    import torch.distributed as dist

    out: list[Any] | None = [None] * dist.get_world_size(group) if dist.get_rank(group) == 0 else None
    dist.gather_object(obj, out, dst=0, group=group)
    return out
