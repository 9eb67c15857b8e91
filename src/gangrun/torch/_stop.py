"""The stop every rank agrees on: one all_reduce (MAX) of the local stop flag.

SIGTERM reaches each process on its own schedule (or, with a single-process stop, only one of
them). If each rank acted on its own flag, one rank would leave the loop while the others wait for
it in their next collective until the SIGKILL, and the final save would be lost. A MAX over the
flags is True on every rank as soon as any rank has it, and every rank computes it at the same step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def agree(local: bool) -> bool:
    """True on every rank if any rank's `local` is True. Collective: every rank must call it."""
    backend = str(dist.get_backend())
    # The flag lives where the default group can reduce it: CPU for gloo (also when it is one of
    # several backends, "cpu:gloo,cuda:nccl"), the current GPU for NCCL alone.
    device = torch.device("cpu")
    if "gloo" not in backend and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    flag = torch.tensor([1 if local else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
