"""Issue 27 item 2, on the local backend with real processes: a rank that dies while its peers wait for
its part of a sharded save does not hold them for the grace period. The backend's stop notice says a
peer is gone (cause Restart), and the survivors give the save up after a moment (shards.PEER_LOST_WAIT)
instead of at the deadline, so the restart comes in seconds, not in `terminationGracePeriod`."""

from __future__ import annotations

import sys
from pathlib import Path

from gangrun._backends.local.backend import LocalBackend

from .conftest import phase, wait_for

SHARDED = """
import os, signal, time
import gangrun
ctx = gangrun.context()
ckpt = ctx.checkpoint
ckpt.load()
for step in range(1, 1000):
    if ctx.rank == 1 and ctx.restart_attempt == 0 and step == 3:
        time.sleep(0.5)  # rank 0 is waiting for this rank's part of step 3 by now
        os.kill(os.getpid(), signal.SIGKILL)
    ckpt.save(f"rank {ctx.rank} step {step}".encode(), step=step, shard=True)
    if ctx.restart_attempt == 1 and step == 2:
        break
"""

GRACE = 20.0


def test_a_rank_killed_during_a_sharded_save_restarts_the_gang_in_seconds_not_the_grace_period(
        backend: LocalBackend, manifest, tmp_path: Path) -> None:
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    backend.submit(manifest("sharded", command=[sys.executable, str(script)], max_restarts=1, grace=f"{GRACE:g}s"))
    done = wait_for(backend, "sharded", phase("Succeeded"), timeout=120)
    assert done["restartAttempt"] == 1
    events = backend.events("sharded")
    died = next(e.time for e in events if e.type.value == "WorkerExited" and e.data.get("rank") == 1)
    back = next(e.time for e in events if e.type.value == "WorkersRunning" and e.time > died)
    took = (back - died).total_seconds()
    print(f"rank 1 killed mid-save -> next round running: {took:.1f} s (grace {GRACE:g} s)")
    assert took < GRACE / 2, f"the survivors waited {took:.1f} s for a dead rank's part"
    assert any("had not written their part when the gang was stopped for a lost peer" in line
               for line in backend.logs("sharded", rank=0)), list(backend.logs("sharded", rank=0))
