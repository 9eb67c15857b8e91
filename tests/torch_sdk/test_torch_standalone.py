"""The SDK outside a gang: a script adapted to gangrun runs unchanged under torchrun (real torchrun,
gloo, several processes and nodes) and under plain `python`; its checkpoints go to a local folder
that its first load or save names once, and its next run resumes from them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.torch_sdk.torchgang import SRC, free_port, rank_env, require_torch

torch = require_torch()

ADAPTED = Path(__file__).with_name("adapted.py")


def _env() -> dict[str, str]:
    drop = {"GANGRUN_TASK", "GANGRUN_CHECKPOINT_PATH", "RANK", "WORLD_SIZE", "LOCAL_RANK", "NPROC_PER_NODE",
            "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # As in the issue: NPROC_PER_NODE set by hand in the shell must not get in torchrun's way.
    env.update(PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1",
               NPROC_PER_NODE="1")
    return env


def _torchrun(cwd: Path, *, nnodes: int, nproc: int) -> tuple[list[dict], str]:
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc_per_node={nproc}",
             f"--node_rank={node}", "--master_addr=127.0.0.1", f"--master_port={port}", "train.py"],
            cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for node in range(nnodes)
    ]  # fmt: skip
    return _collect(procs)


def _python(cwd: Path) -> tuple[list[dict], str]:
    return _collect([subprocess.Popen([sys.executable, "train.py"], cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)])  # fmt: skip


def _records(out: str) -> list[dict]:
    """The JSON records the ranks print, one per rank. The ranks of a node share torchrun's stdout, and
    with PYTHONUNBUFFERED a print is two writes (the text, then its newline), so two ranks' records can
    meet on one line: read each record where a line or the record before it ends."""
    decoder, found = json.JSONDecoder(), []
    for line in out.splitlines():
        at = 0
        while line.startswith("{", at):
            record, at = decoder.raw_decode(line, at)
            found.append(record)
    return found


def _collect(procs: list[subprocess.Popen[str]]) -> tuple[list[dict], str]:
    lines, errs = [], ""
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, f"exited {p.returncode}:\n{err[-4000:]}"
            lines += _records(out)
            errs += err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return sorted(lines, key=lambda r: r["rank"]), errs


@pytest.mark.parametrize(("nnodes", "nproc"), [(1, 2), (2, 1)], ids=["1-node-x-2-processes", "2-nodes-x-1-process"])
def test_a_script_runs_unchanged_under_torchrun(tmp_path: Path, nnodes: int, nproc: int) -> None:
    shutil.copy(ADAPTED, tmp_path / "train.py")
    folder = tmp_path / ".gangrun" / "checkpoints" / "train"
    where = f"gangrun: not in a gangrun task: checkpoints go to {folder} (set GANGRUN_CHECKPOINT_PATH"
    world = nnodes * nproc

    first, err = _torchrun(tmp_path, nnodes=nnodes, nproc=nproc)
    assert [r["rank"] for r in first] == list(range(world)), first
    for r in first:
        assert not r["in_gang"] and r["world"] == world and (r["nnodes"], r["nproc"]) == (nnodes, nproc)
        assert (r["node_rank"], r["local_rank"]) == divmod(r["rank"], nproc)
        assert str(r["local_rank"]) == r["env_local_rank"]
        assert (r["loaded_step"], r["step"], r["w"]) == (None, 3, [3.0] * 4)
    assert err.count(where) == 1, f"the first load names the folder once:\n{err}"

    again, err = _torchrun(tmp_path, nnodes=nnodes, nproc=nproc)  # the same script, the same folder
    assert [(r["loaded_step"], r["step"], r["w"]) for r in again] == [(3, 6, [6.0] * 4)] * world, again
    assert err.count(where) == 1 and f"seq 3, step 3, {world} ranks" in err, err
    assert (folder / "attempt-1").is_dir()


def test_a_script_runs_unchanged_under_plain_python(tmp_path: Path) -> None:
    shutil.copy(ADAPTED, tmp_path / "train.py")
    folder = tmp_path / ".gangrun" / "checkpoints" / "train"
    first, err = _python(tmp_path)
    assert [(r["rank"], r["world"], r["in_gang"], r["step"]) for r in first] == [(0, 1, False, 3)]
    assert err.count(f"checkpoints go to {folder}") == 1, err
    again, _ = _python(tmp_path)
    assert [(r["loaded_step"], r["step"], r["w"]) for r in again] == [(3, 6, [6.0] * 4)]


def test_checkpoint_path_outside_a_gang_is_where_checkpoints_go(tmp_path: Path) -> None:
    shutil.copy(ADAPTED, tmp_path / "train.py")
    env_path = tmp_path / "elsewhere"
    env = {**_env(), "GANGRUN_CHECKPOINT_PATH": str(env_path)}
    p = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    assert f"checkpoints go to {env_path} (GANGRUN_CHECKPOINT_PATH)" in p.stderr
    assert (env_path / "attempt-1").is_dir() and not (tmp_path / ".gangrun").exists()


def test_destroy_process_group_ends_the_checkpoint_side_group(tmp_path: Path) -> None:
    """gangrun keeps no reference to its side gloo group: destroy_process_group() ends it and its threads
    then, not the interpreter's finalization (where a gloo group's end aborted a finished rank now and then)."""
    script = tmp_path / "side.py"
    script.write_text(textwrap.dedent("""
        import gc, json, weakref
        import torch, torch.distributed as dist
        from gangrun.torch import save_state, wait
        dist.init_process_group("gloo")
        save_state({"x": torch.ones(2)}, step=1, blocking=False)
        wait()
        from gangrun.torch import _gang
        side = weakref.ref(_gang.side_group())
        dist.destroy_process_group()
        gc.collect()
        print(json.dumps({"alive": side() is not None}))
    """))
    env = rank_env(tmp_path / "ckpt", rank=0, world=1, port=free_port())
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"alive": False}
