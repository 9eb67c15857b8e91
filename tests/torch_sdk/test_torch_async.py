"""The async path of save_state in one process (B2): training waits only for the copy to host memory,
the next save waits for the previous one, a failure is raised once, and a save in flight at exit is
flushed. Also: `import gangrun` never imports torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gangrun import Checkpoint
from gangrun._errors import CommitFailed
from tests.torch_sdk.torchgang import SRC, require_torch

torch = require_torch()


def _ck(tmp_path: Path, attempt: int = 1, keep_last: int | None = 3) -> Checkpoint:
    return Checkpoint.for_path(str(tmp_path / "train"), attempt=attempt, keep_last=keep_last)


def test_b2_async_save_is_a_snapshot_training_may_change_right_away(tmp_path: Path) -> None:
    from gangrun.torch import load_state, save_state, wait

    sd = {"w": torch.zeros(1000)}
    info = save_state(sd, step=1, checkpoint=_ck(tmp_path))
    sd["w"].add_(5)  # the next training step, while the write may still run
    assert wait() and info is not None and info.staging_seconds > 0
    out = {"w": torch.ones(1000)}
    assert load_state(out, checkpoint=_ck(tmp_path)) is not None
    assert bool((out["w"] == 0).all()), "the save holds the state as it was when save_state returned"


def test_b2_next_save_waits_for_the_previous_and_retention_keeps_the_newest(tmp_path: Path) -> None:
    from gangrun.torch import load_state, save_state, wait

    ck = _ck(tmp_path, keep_last=2)
    sd = {"w": torch.zeros(1 << 18)}
    seqs = []
    for step in range(1, 5):
        sd["w"].fill_(step)
        info = save_state(sd, step=step, checkpoint=ck)
        assert info is not None
        seqs.append(info.seq)
    wait()
    assert seqs == [1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "train" / "attempt-1").iterdir()) == ["ckpt-000003", "ckpt-000004"]
    out = {"w": torch.zeros(1 << 18)}
    loaded = load_state(out, checkpoint=ck)
    assert loaded is not None and loaded.step == 4 and bool((out["w"] == 4).all())


def test_b2_background_failure_is_raised_once_and_nothing_is_committed(tmp_path: Path) -> None:
    from gangrun.torch import load_state, save_state, wait

    class Unsavable:  # copied by the staging, then refuses DCP's pickling in the background writer
        def __deepcopy__(self, memo: dict[int, object]) -> Unsavable:
            return self

        def __reduce__(self) -> tuple[object, ...]:
            raise RuntimeError("cannot pickle me")

    ck = _ck(tmp_path)
    save_state({"w": torch.zeros(4), "bad": Unsavable()}, step=1, checkpoint=ck)
    with pytest.raises(CommitFailed, match="cannot pickle me"):
        wait()
    assert wait(), "raised once, then clear"
    assert load_state({"w": torch.zeros(4)}, checkpoint=ck) is None
    leftovers = list((tmp_path / "train" / "attempt-1").iterdir())
    assert leftovers == [], f"an abandoned save is removed: {leftovers}"


def test_b2_save_in_flight_at_exit_is_flushed(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import torch
        from gangrun import Checkpoint
        from gangrun.torch import save_state
        save_state({{"w": torch.full((1 << 22,), 7.0)}}, step=7, checkpoint=Checkpoint.for_path({str(tmp_path / "train")!r}))
        # no wait(): the interpreter exits with the write in flight
    """)
    subprocess.run([sys.executable, "-c", script], check=True, env={"PYTHONPATH": str(SRC)}, timeout=120)
    from gangrun.torch import load_state

    out = {"w": torch.zeros(1 << 22)}
    loaded = load_state(out, checkpoint=_ck(tmp_path))
    assert loaded is not None and loaded.step == 7 and bool((out["w"] == 7).all())


def test_import_gangrun_does_not_import_torch() -> None:
    code = "import sys, gangrun; gangrun.context().should_stop(); sys.exit('torch' in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(SRC)}, timeout=60)
