"""Per-rank values in torch checkpoints: what a rank passes as `per_rank` comes back to that rank,
and to no other, on the same world size and after a change of it (docs/torch.md, "Per-rank state").

A plain value of the state dict is the gang's: every rank saving its own `100 + rank` under one key
gets one rank's copy back on all ranks (DCP writes a key once). Issue 26 saw per-rank RNG streams
come back that way, silently; `per_rank` is the place for them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangrun import Checkpoint
from gangrun._errors import CheckpointError
from tests.torch_sdk.torchgang import Zygote, free_port, rank_env, require_torch

torch = require_torch()


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """Ranks forked from one process that imported torch: a 4-rank gang then costs four forks,
    not four torch imports (minutes on a busy 2-core machine)."""
    z = Zygote()
    yield z
    z.close()


def gang(zygote: Zygote, root: Path, *, world: int, mode: str, attempt: int = 1, env: dict[str, str] | None = None,
         timeout: float = 240) -> list[dict[str, Any]]:  # fmt: skip
    """Run worker.py `mode` on `world` forked ranks; each rank's last JSON line, in rank order."""
    port = free_port()
    outs = [root.parent / f"{mode}-a{attempt}-w{world}-rank{r}.log" for r in range(world)]
    for r, out in enumerate(outs):
        zygote.fork(mode, rank_env(root, rank=r, world=world, port=port, attempt=attempt, env=env), out)
    deadline = time.monotonic() + timeout
    results: list[dict[str, Any]] = []
    for r, out in enumerate(outs):
        while True:
            text = out.read_text() if out.exists() else ""
            lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
            if lines:
                results.append(lines[-1])
                break
            assert "Traceback" not in text and time.monotonic() < deadline, f"rank {r} of {mode}:\n{text[-4000:]}"
            time.sleep(0.1)
    return results


@pytest.mark.parametrize("world", [2, 4], ids=["2-ranks", "4-ranks"])
def test_per_rank_values_tensors_and_rng_states_come_back_to_the_rank_that_saved_them(
    zygote: Zygote, tmp_path: Path, world: int
) -> None:
    root = tmp_path / "train"
    gang(zygote, root, world=world, mode="own_save")
    got = gang(zygote, root, world=world, mode="own_load")
    assert [r["v"] for r in got] == [100.0 + r for r in range(world)]
    assert [r["t"] for r in got] == [[float(r)] * 4 for r in range(world)]
    assert [r["name"] for r in got] == [f"rank-{r}" for r in range(world)]
    for r in got:
        assert r["own"] and r["per_rank"], f"rank {r['rank']} did not get back its own values, RNG states included: {r}"
        assert r["b"] == [1.0] * 8
    assert len({r["plain_v"] for r in got}) == 1, "a plain value is the gang's: one rank's copy on every rank"


@pytest.mark.parametrize(("saved", "loading"), [(4, 2), (2, 4)], ids=["shrink-4-to-2", "grow-2-to-4"])
def test_after_a_world_size_change_a_rank_loads_its_own_per_rank_values_or_none(
    zygote: Zygote, tmp_path: Path, saved: int, loading: int
) -> None:
    root = tmp_path / "train"
    gang(zygote, root, world=saved, mode="own_save", env={"ASYNC": "1"})
    got = gang(zygote, root, world=loading, mode="own_load", attempt=2)
    assert len(got) == loading
    for r in got:
        if r["rank"] < saved:
            assert r["own"] and r["per_rank"] and r["v"] == 100.0 + r["rank"], r
        else:  # never another rank's (r mod the old world would hand ranks 2, 3 the streams of 0, 1)
            assert r["untouched"] and not r["per_rank"], r


def test_per_rank_is_optional_on_either_side_and_named_when_it_does_not_fit(tmp_path: Path) -> None:
    from gangrun.torch import load_state, save_state

    def ck() -> Checkpoint:
        return Checkpoint.for_path(str(tmp_path / "train"))

    save_state({"w": torch.ones(2)}, step=1, blocking=True, checkpoint=ck())
    mine = {"seed": 5}
    loaded = load_state({"w": torch.zeros(2)}, per_rank=mine, checkpoint=ck())
    assert loaded is not None and not loaded.per_rank and mine == {"seed": 5}, "saved without: left as it was"

    save_state({"w": torch.ones(2)}, step=2, per_rank={"seed": 9, "t": torch.ones(3)}, blocking=True, checkpoint=ck())
    sd = {"w": torch.zeros(2)}
    loaded = load_state(sd, checkpoint=ck())
    assert loaded is not None and loaded.step == 2 and not loaded.per_rank, "loading without per_rank ignores it"
    mine = {"seed": 0, "t": torch.zeros(3)}
    loaded = load_state(sd, per_rank=mine, checkpoint=ck())
    assert loaded is not None and loaded.per_rank and mine["seed"] == 9 and bool((mine["t"] == 1).all())

    with pytest.raises(CheckpointError, match=r"Missing key in checkpoint state_dict: per_rank\.epoch"):
        load_state({"w": torch.zeros(2)}, per_rank={"seed": 0, "epoch": 0}, checkpoint=ck())
    with pytest.raises(TypeError, match="^per_rank must be a dict"):
        save_state({"w": torch.ones(2)}, step=3, per_rank=[1], checkpoint=ck())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^per_rank keys must be str"):
        load_state({"w": torch.ones(2)}, per_rank={0: 1}, checkpoint=ck())
    with pytest.raises(ValueError, match="'__gangrun_per_rank__' is reserved"):
        save_state({"__gangrun_per_rank__": 1}, step=3, per_rank={}, checkpoint=ck())
