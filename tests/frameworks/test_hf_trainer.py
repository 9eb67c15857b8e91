"""gangrun.transformers: a Hugging Face Trainer script resumes exactly after preemptions and a SIGKILL,
and the callback's pieces (which rank contributes which file, the folder handed back) in isolation.

transformers is the optional `transformers` extra: skipped where it is missing, except under CI=true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .story import ROOT, compare, finish, interrupted_gang, losses, require, start_torchrun

require("transformers")

from gangrun import Checkpoint  # noqa: E402
from gangrun.transformers import resume_from_checkpoint  # noqa: E402
from gangrun.transformers._callback import _written_by  # noqa: E402

EXAMPLE = ROOT / "examples" / "frameworks" / "hf_trainer.py"
STEPS = 40  # 8 steps an epoch on 2 ranks: resumes land mid-epoch


@pytest.mark.parametrize(("name", "rank", "want"), [
    pytest.param("model.safetensors", 0, True, id="rank-0-writes-the-model"),
    pytest.param("optimizer.pt", 1, False, id="only-rank-0-contributes-the-optimizer"),
    pytest.param("rng_state_1.pth", 1, True, id="each-rank-contributes-its-own-rng-file"),
    pytest.param("rng_state_1.pth", 0, False, id="not-another-ranks-rng-file"),
    pytest.param("rng_state.pth", 0, True, id="a-single-process-rng-file-is-rank-0s"),
])  # fmt: skip
def test_each_rank_contributes_the_files_it_wrote(name: str, rank: int, want: bool) -> None:
    assert _written_by(name, rank) is want


def test_resume_hands_every_rank_rank_0s_files_and_its_own_rng_state(tmp_path: Path) -> None:
    for rank, files in ((0, {"trainer_state.json": "{}", "rng_state_0.pth": "r0"}), (1, {"rng_state_1.pth": "r1"})):
        part = tmp_path / f"part-{rank}"
        part.mkdir()
        for name, text in files.items():
            (part / name).write_text(text)
    import threading

    def save(rank: int) -> None:
        ck = Checkpoint.for_path(str(tmp_path / "ck"), rank=rank, world_size=2)
        ck.save(tmp_path / f"part-{rank}", step=7, shard=True)

    threads = [threading.Thread(target=save, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    folder = resume_from_checkpoint(checkpoint=Checkpoint.for_path(str(tmp_path / "ck"), rank=1, world_size=2))
    assert folder is not None and Path(folder).name == "checkpoint-7"
    assert sorted(p.name for p in Path(folder).iterdir()) == ["rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"]
    assert (Path(folder) / "rng_state_1.pth").read_text() == "r1"
    assert resume_from_checkpoint(checkpoint=Checkpoint.for_path(str(tmp_path / "none"))) is None


@pytest.mark.slow
def test_trainer_preempted_twice_and_killed_once_logs_the_uninterrupted_loss_at_every_step(backend, tmp_path: Path) -> None:
    straight = start_torchrun(EXAMPLE, tmp_path / "straight", MAX_STEPS=str(STEPS))
    try:
        lines = interrupted_gang(backend, EXAMPLE, tmp_path, name="hf-trainer", steps=STEPS, at=(5, 15, 25),
                                 env={"STEP_SECONDS": "1.5"})  # fmt: skip
    finally:
        baseline = finish(straight)
    assert sum("loaded checkpoint from this attempt" in line for line in lines) >= 2 * 2, "two readmissions, 2 ranks"
    assert sum("loaded checkpoint from previous attempt 1" in line for line in lines) == 2, "the retry, 2 ranks"
    compare(losses(baseline), losses(lines), STEPS)


def test_save_every_asks_the_trainer_to_save_at_every_nth_step(tmp_path: Path) -> None:
    from transformers import TrainerControl, TrainerState

    from gangrun.transformers import GangCallback

    cb = GangCallback(save_every=5, checkpoint=Checkpoint.for_path(str(tmp_path / "ck")))
    saves = [s for s in range(1, 13) if cb.on_step_end(None, TrainerState(global_step=s), TrainerControl()).should_save]
    assert saves == [5, 10]
    assert not cb.stopped, "no stop was requested"


def test_after_the_stops_save_the_process_exits_0_instead_of_returning_from_train(tmp_path: Path) -> None:
    from transformers import TrainerControl, TrainerState

    from gangrun.transformers import GangCallback

    cb = GangCallback(checkpoint=Checkpoint.for_path(str(tmp_path / "ck")))
    assert cb.on_train_end(None, TrainerState(), TrainerControl()) is not None, "a run that was not stopped returns"
    cb.stopped = True
    with pytest.raises(SystemExit) as exited:
        cb.on_train_end(None, TrainerState(), TrainerControl())
    assert exited.value.code == 0
    cb.exit_on_stop = False
    assert cb.on_train_end(None, TrainerState(), TrainerControl()) is not None
