"""A torch.distributed script runs unchanged in a local gang (INTERFACE.md "Inside a worker").

Runs where torch is installed (the optional `torch` extra); skipped otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import phase, wait_for

torch = pytest.importorskip("torch")

SCRIPT = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")  # env:// from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
n = dist.get_world_size()
assert t.item() == n * (n + 1) / 2, t
print(f"rank {dist.get_rank()}/{n} local {os.environ['LOCAL_RANK']} all_reduce ok: {t.item()}", flush=True)
dist.destroy_process_group()
"""


def test_gloo_all_reduce_across_a_two_node_gang(backend, manifest, tmp_path: Path) -> None:
    script = tmp_path / "gloo.py"
    script.write_text(SCRIPT)
    spec = manifest("gloo", nodes=2, command=[sys.executable, str(script)], cpu="1")
    backend.submit(spec)
    done = wait_for(backend, "gloo", phase("Succeeded"))
    assert done["attempt"] == 1
    lines = list(backend.logs("gloo"))
    assert sum("all_reduce ok: 3.0" in line for line in lines) == 2
