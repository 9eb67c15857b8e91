"""B1 under fire: a process SIGKILLed at a random moment of a save never leaves a torn checkpoint.

A forked child (real process, real SIGKILL; forked rather than spawned so a round costs milliseconds,
not an interpreter start) saves a directory of a few MB again and again and reports each step whose
save() returned. After the kill, load() must return a complete tree of a step at least as new as the
last one reported (the kill may land between the commit and the report). The next child resumes from
there, as a restarted worker would, so leftovers of killed saves pile up and must be ignored.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from gangrun import Checkpoint

FILES = 24
FILE_SIZE = 96 << 10  # ~2.3 MB a save: long enough that most kills land mid-save
ROUNDS = 20


def _content(step: int, i: int) -> bytes:
    return (f"{step}:{i}:".encode() * (FILE_SIZE // 8 + 1))[: FILE_SIZE + i]


def _child(root: str, protocol: str, start: int, report_fd: int, workdir: Path) -> None:
    ckpt = Checkpoint.for_path(root, attempt=1, protocol=protocol, cache_dir=workdir / "child-cache")
    src = workdir / "state"
    step = start
    while True:
        for i in range(FILES):
            sub = src / f"d{i % 3}" / ("empty" if i == 0 else "")
            sub.mkdir(parents=True, exist_ok=True)
            (src / f"d{i % 3}" / f"f{i}.bin").write_bytes(_content(step, i))
        ckpt.save(src, step=step)
        os.write(report_fd, f"{step}\n".encode())
        step += 1


def _check_tree(path: Path, step: int) -> None:
    for i in range(FILES):
        assert (path / f"d{i % 3}" / f"f{i}.bin").read_bytes() == _content(step, i), f"file {i} of step {step} torn"
    assert (path / "d0" / "empty").is_dir()


def _has_unfinished_save(folder: Path) -> bool:
    if not folder.exists():
        return False
    return any("." in p.name or not (p / "manifest.json").exists() for p in folder.iterdir())


@pytest.mark.parametrize("protocol", ["rename", "marker"])
def test_b1_sigkill_mid_save_never_loads_torn(tmp_path, protocol) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    root = str(tmp_path / "ck" / "train")
    confirmed = 0
    torn_seen = 0  # rounds whose kill left an unfinished save behind: the case under test
    for rnd in range(ROUNDS):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never returns into pytest
            try:
                os.close(r)
                _child(root, protocol, confirmed + 1, w, tmp_path / f"w{rnd}")
            finally:
                os._exit(1)
        os.close(w)
        time.sleep(rng.uniform(0.01, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(r) as f:
            reported = [int(x) for x in f.read().split()]
        confirmed = max([confirmed, *reported])
        torn_seen += _has_unfinished_save(Path(root) / "attempt-1")
        ckpt = Checkpoint.for_path(root, attempt=1, cache_dir=tmp_path / "cache" / str(rnd))
        path = ckpt.load()
        ctx = f"seed={seed} round={rnd} protocol={protocol} confirmed={confirmed}"
        if confirmed == 0:
            assert path is None or ckpt.loaded_step == 1, ctx
        else:
            assert path is not None and ckpt.loaded_step >= confirmed, ctx
        if path is not None:
            _check_tree(path, ckpt.loaded_step)
            confirmed = ckpt.loaded_step
    assert torn_seen >= ROUNDS // 4, f"only {torn_seen} kills landed mid-save (seed={seed})"
