"""gangrun.lightning: a Lightning script resumes exactly after preemptions and a SIGKILL, and the
pieces (the gang's ranks as Lightning's cluster environment, the stop, the saves, the data position,
the RNG states) in isolation, in one process.

lightning is the optional `lightning` extra: skipped where it is missing, except under CI=true.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .story import ROOT, compare, finish, interrupted_gang, losses, require, start_torchrun

require("lightning")

EXAMPLE = ROOT / "examples" / "frameworks" / "lightning_fit.py"
STEPS = 40  # 8 steps an epoch on 2 ranks: resumes land mid-epoch
RESUMED = re.compile(r"gangrun: loaded checkpoint from .*\(seq \d+, step (\d+), sharded")


@pytest.mark.slow
def test_lightning_preempted_twice_and_killed_once_logs_the_uninterrupted_loss_at_every_step(backend,
                                                                                            tmp_path: Path) -> None:
    straight = start_torchrun(EXAMPLE, tmp_path / "straight", MAX_STEPS=str(STEPS))
    try:
        lines = interrupted_gang(backend, EXAMPLE, tmp_path, name="lightning-fit", steps=STEPS, at=(5, 15, 25),
                                 env={"STEP_SECONDS": "1.5"})  # fmt: skip
    finally:
        baseline = finish(straight)
    assert sum("loaded checkpoint from this attempt" in line for line in lines) >= 2 * 2, "two readmissions, 2 ranks"
    assert sum("loaded checkpoint from previous attempt 1" in line for line in lines) == 2, "the retry, 2 ranks"
    resumed = [int(m.group(1)) for line in lines if (m := RESUMED.search(line)) and "rank 0's part" in line]
    print(f"rank 0 resumed from the checkpoints of steps {resumed}", flush=True)
    assert len(resumed) == 3, "two readmissions and one retry"
    compare(losses(baseline), losses(lines), STEPS)


# ---------------------------------------------------------------- in one process

class _Gang:
    """A gang's worker environment for `context()`, and the stop notice as a backend would give it."""

    @staticmethod
    def env(tmp_path: Path, *, rank: int = 0, nodes: int = 2, nproc: int = 1) -> dict[str, str]:
        return {
            "GANGRUN_TASK": "fit", "GANGRUN_ATTEMPT": "1", "RANK": str(rank), "LOCAL_RANK": str(rank % nproc),
            "WORLD_SIZE": str(nodes * nproc), "NNODES": str(nodes), "NODE_RANK": str(rank // nproc),
            "NPROC_PER_NODE": str(nproc), "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29511",
            "GANGRUN_CHECKPOINT_PATH": str(tmp_path / "ck" / "fit" / "attempt-1"),
        }  # fmt: skip


def test_the_environment_gives_lightning_the_ranks_gangrun_set(tmp_path: Path) -> None:
    from gangrun import Context
    from gangrun.lightning import GangEnvironment

    env = GangEnvironment(Context.from_env(_Gang.env(tmp_path, rank=3, nodes=2, nproc=2), install_stop_handler=False))
    got = (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank(), env.main_address, env.main_port)
    assert got == (4, 3, 1, 1, "10.0.0.7", 29511)
    assert env.creates_processes_externally, "Lightning must not launch processes of its own"
    env.set_global_rank(0)
    env.set_world_size(1)
    assert (env.global_rank(), env.world_size()) == (3, 4), "the gang's ranks, not Lightning's arithmetic"
    env.validate_settings(num_devices=2, num_nodes=2)
    with pytest.raises(ValueError, match="does not match the gang"):
        env.validate_settings(num_devices=1, num_nodes=4)


def test_trainer_in_a_gang_has_the_gangs_shape_environment_and_callback(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import gangrun.lightning
    from gangrun._ckpt import notice

    for name, value in _Gang.env(tmp_path, rank=0, nodes=1, nproc=1).items():
        monkeypatch.setenv(name, value)
    try:
        trainer = gangrun.lightning.trainer(max_steps=1, accelerator="cpu", logger=False, save_every=4)
        callbacks = [cb for cb in trainer.callbacks if isinstance(cb, gangrun.lightning.GangCallback)]
        assert len(callbacks) == 1 and callbacks[0].save_every == 4
        assert isinstance(trainer._accelerator_connector.cluster_environment, gangrun.lightning.GangEnvironment)
        assert (trainer.num_nodes, trainer.num_devices) == (1, 1)
    finally:
        notice.uninstall()


STOP_AT = [pytest.param(6, id="mid-epoch"), pytest.param(8, id="at-the-end-of-an-epoch")]


def _fit(ckpt_root: Path, *, steps: int, stop_at: int | None = None, save_every: int | None = None,
         resume: bool = False, extra: list[object] | None = None) -> tuple[list[tuple[int, float]], Any]:  # fmt: skip
    """A small dropout model on shuffled data (8 batches an epoch) in this process, with a GangCallback
    on a checkpoint under `ckpt_root`; a stop notice arrives during step `stop_at`. Returns the
    losses per step and the callback."""
    import lightning as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from gangrun import Checkpoint
    from gangrun._ckpt import notice
    from gangrun.lightning import GangCallback

    seen: list[tuple[int, float]] = []

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            if self.trainer.global_step + 1 == stop_at:
                notice.STATE.notice = notice.StopNotice("Preempted", None, deadline=1e12, received_at=0.0)
            return nn.functional.mse_loss(self.net(x), y)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append((self.trainer.global_step, outputs["loss"].item()))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    L.seed_everything(0, verbose=False)
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True).cos()), batch_size=4, shuffle=True)
    ckpt = Checkpoint.for_path(str(ckpt_root), world_size=1, cache_dir=ckpt_root.parent / "cache")
    callback = GangCallback(save_every=save_every, checkpoint=ckpt, exit_on_stop=False)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback, *(extra or [])])  # fmt: skip
    try:
        trainer.fit(Model(), loader, ckpt_path=callback.ckpt_path() if resume else None)
    finally:
        notice.uninstall()
    return seen, callback


@pytest.mark.parametrize("stop_at", STOP_AT)
def test_a_stopped_fit_saves_at_the_agreed_step_and_resumes_with_the_uninterrupted_losses(tmp_path: Path,
                                                                                         stop_at: int) -> None:
    want, _ = _fit(tmp_path / "straight", steps=20)
    before, stopped = _fit(tmp_path / "ck", steps=20, stop_at=stop_at)
    assert stopped.stopped and [s for s, _ in before] == list(range(1, stop_at + 1)), "stopped after that step"
    after, resumed = _fit(tmp_path / "ck", steps=20, resume=True)
    assert resumed.skipped == stop_at % 8, "the batches of the epoch already trained are not trained again"
    assert before + after == want, "every step's loss, the same float as the uninterrupted run's"


def test_save_every_commits_a_checkpoint_every_nth_step(tmp_path: Path) -> None:
    from gangrun import Checkpoint

    _fit(tmp_path / "ck", steps=11, save_every=5)
    ckpt = Checkpoint.for_path(str(tmp_path / "ck"), world_size=1, cache_dir=tmp_path / "cache2")
    part = ckpt.load()
    assert ckpt.loaded_step == 10 and part is not None
    assert sorted(p.name for p in part.iterdir()) == ["lightning.ckpt", "rng-0.pt"]


def test_lightnings_sigterm_handler_is_replaced_by_gangruns_once_training_starts(tmp_path: Path) -> None:
    """Lightning installs a SIGTERM handler of its own at the start of fit, which would end the run at
    the next batch with its own exception (and a collective run inside the signal handler)."""
    import signal

    import lightning as L

    from gangrun._ckpt import notice

    handlers: list[object] = []

    class Look(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            handlers.append(signal.getsignal(signal.SIGTERM))

    notice.install({})  # as in a gang
    _fit(tmp_path / "ck", steps=2, extra=[Look()])
    assert handlers and all(h == notice.STATE.handle for h in handlers)
