"""Each rank's random number generators, saved with its part of a checkpoint and restored on resume.

Lightning's checkpoint holds no RNG state. Without it, a resumed run draws other dropout masks (and
other random augmentations) than the uninterrupted run would have: the loss drifts from the first
step after the resume. Every rank has its own generators, so every rank saves its own file,
``rng-<rank>.pt``, holding two sets of states (`Saved`): the generators' states when the save was
made, and when the current epoch's data iterator was made (gangrun.lightning._position). A set is
Python's `random`, NumPy's global generator when NumPy is loaded, torch's CPU generator, and the
CUDA generators when CUDA is available.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any, TypedDict

import torch

States = dict[str, Any]


class Saved(TypedDict):
    now: States  # when the save was made
    epoch: States  # when the current epoch's data iterator was made


def file_name(rank: int) -> str:
    return f"rng-{rank}.pt"


def collect() -> States:
    """This process's generator states, as they are now."""
    states: States = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if "numpy" in sys.modules:
        import numpy as np

        states["numpy"] = np.random.get_state()
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore(states: States) -> None:
    """Set the generators to `states` (those it has; the others are left alone)."""
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "numpy" in states:
        import numpy as np

        np.random.set_state(states["numpy"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save(folder: Path, rank: int, *, epoch: States) -> Path:
    """Write rank `rank`'s file into `folder`: the states now, and `epoch`. Returns the file."""
    path = folder / file_name(rank)
    torch.save(Saved(now=collect(), epoch=epoch), path)
    return path


def load(path: Path) -> Saved:
    # Not weights_only: Python's and NumPy's states are tuples of plain values, pickled by `save`
    # into a checkpoint this gang wrote.
    saved: Saved = torch.load(path, weights_only=False)
    return saved
