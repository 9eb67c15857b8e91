"""`per_rank=`: values that are each rank's own (RNG states, sampler positions, metrics), saved per rank.

A DCP state dict is the gang's state: a value every rank holds under the same key (a float, a list,
a tensor that is not a DTensor) is written once, by one rank, and that one copy is loaded on every
rank. Right for replicated parameters and a global step; wrong for ``torch.get_rng_state()`` or a
rank's shuffled order, which then come back as one rank's on all. So `save_state` and `load_state`
take a second dict, `per_rank`, which goes into the checkpoint under a key of its own for each rank:

    {**state_dict, "__gangrun_per_rank__": {"<rank>": per_rank}}

so DCP sees distinct keys and writes every rank's section. The ranks that saved one are listed in
``gangrun-torch.json`` (_save.py), so a loader knows before DCP reads whether its section exists.

The rule when the world size changes: rank r loads what rank r saved, or nothing. A rank the saving
gang did not have (growing from 2 to 4: ranks 2 and 3) gets nothing, its `per_rank` dict is left as it
was and `LoadedState.per_rank` is False; the sections of ranks the loading gang no longer has
(shrinking) are not loaded. Never another rank's section (r mod the old world, say): two ranks would
then draw the same random stream, the same dropout masks and the same shuffled order, without error.
"""

from __future__ import annotations

import re
from typing import Any

from gangrun.torch import _gang

#: The state dict key the per-rank sections go under; a user key of that name is refused.
KEY = "__gangrun_per_rank__"


def check(per_rank: Any, state_dict: dict[str, Any]) -> None:
    """Raises TypeError/ValueError, naming the argument, for what `per_rank` cannot be."""
    if per_rank is None:
        return
    if not isinstance(per_rank, dict):
        raise TypeError(f"per_rank must be a dict (this rank's own values) or None, not {type(per_rank).__name__}")
    bad = next((k for k in per_rank if not isinstance(k, str)), None)
    if bad is not None:
        raise TypeError(f"per_rank keys must be str, not {type(bad).__name__} ({bad!r})")
    if KEY in state_dict:
        raise ValueError(f"state_dict key {KEY!r} is reserved for per_rank values; rename it")


def with_section(state_dict: dict[str, Any], per_rank: dict[str, Any] | None, rank: int) -> dict[str, Any]:
    """`state_dict` with `rank`'s section added (a shallow copy), or `state_dict` itself without one.
    The section holds `per_rank` itself, so a load into the copy fills `per_rank` in place."""
    if per_rank is None:
        return state_dict
    return {**state_dict, KEY: {str(rank): per_rank}}


def own_rank() -> int:
    """This process's rank: the process group's, else the gang's (`context().rank`). Without a group
    only rank 0 saves (gangrun.torch), so another rank then finds no section of its own."""
    if _gang.initialized():
        return _gang.rank()
    from gangrun._worker.context import context

    return context().rank


def loads_section(rank: int, saved: tuple[int, ...]) -> bool:
    """Whether `rank` loads a per-rank section from a checkpoint whose ranks `saved` one: its own, only."""
    return rank in saved


def readable(message: str) -> str:
    """A DCP message with the internal key spelt as the user's argument (``per_rank.x``)."""
    return re.sub(rf"{KEY}\.\d+\.", "per_rank.", message)
