"""ctx.should_stop(): one answer for the whole gang at the same step (B3), and one consistent final save."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from gangrun import Checkpoint
from tests.torch_sdk.torchgang import Gang, require_torch

torch = require_torch()


def test_b3_sigterm_to_one_rank_stops_every_rank_at_the_same_step_with_one_sharded_save(tmp_path: Path) -> None:
    from gangrun.torch import load_state

    root = tmp_path / "train"
    gang = Gang(root, world=4, mode="stop")
    for p in gang.procs:  # every rank is in its loop, past its first should_stop() calls
        assert p.stdout is not None
        assert json.loads(p.stdout.readline())["ready"]
    gang.procs[2].send_signal(signal.SIGTERM)
    done = gang.wait(status=143)  # stopped, every rank: none of them finished the task (issue 27, item 9)
    steps = {r["stopped_at"] for r in done}
    assert len(steps) == 1, f"ranks stopped at different steps: {done}"
    assert [r["local_flag"] for r in done] == [False, False, True, False], "only rank 2 got the signal"
    step = steps.pop()
    # The final save is one checkpoint with every rank's shard, loadable whole (here by one process).
    sd = {"w": torch.zeros(16, 8), "b": torch.zeros(8), "meta": {"note": None}}
    loaded = load_state(sd, checkpoint=Checkpoint.for_path(str(root), attempt=1))
    assert loaded is not None and (loaded.step, loaded.world_size) == (step, 4)
    assert bool((sd["w"] == step).all()) and bool((sd["b"] == -step).all())


def test_should_stop_without_torch_distributed_is_the_local_flag() -> None:
    import gangrun
    from gangrun._ckpt import notice

    ctx = gangrun.Context(in_gang=True)
    try:
        assert ctx.should_stop() is False
        notice.STATE.notice = notice.StopNotice(None, None, 0.0, 0.0)  # as the SIGTERM handler records it
        assert ctx.should_stop() is True
    finally:
        notice.uninstall()
