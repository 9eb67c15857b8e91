"""Checkpoint throughput and blocked time, against a plain copy of the same tree.

    python benchmarks/bench_checkpoint.py                        # 1 GiB, 5 runs, every figure
    python benchmarks/bench_checkpoint.py --size 64M --repeat 3   # small and quick

Measures, in one run and on the same disk (a temporary directory, removed afterwards):

- save throughput of `Checkpoint.save(dir)` (copy + CRC-32 + fsync + manifest + rename) and load
  throughput of `load()` (copy + verify), each as a ratio to `shutil.copytree` of the same tree
  (target >= 0.8). copytree neither checksums nor fsyncs, so the ratio is the price of atomicity
  and verification. The "no fsync" figure writes through a cached page only, like copytree. The
  durable baseline, the one the save must reach (>= 0.8), is copytree followed by an fsync of every
  file and directory: the same bytes on disk, as a committed save has them.
- sharded save: `--ranks` processes (default 4) each save their part of the state (`--size` in
  all) with `save(part, step=n, shard=True)`, against the same processes each writing its part with
  plain file writes and an fsync (target >= 0.8); the plain writes without fsync are printed too.
- how long a training loop is blocked by `save(blocking=False)` versus a blocking save (target
  <= 5%): with the default snapshot (the tree is copied aside before save returns), without a
  snapshot (`snapshot=False`, the caller keeps the files unchanged until the save commits), and for
  a bytes object of the same size.

Before every timed figure the page cache is flushed (`os.sync()`, untimed), so no figure pays for
the writeback of the one before it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from gangrun import Checkpoint
from gangrun._ckpt import storage as storage_mod


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def make_tree(root: Path, total: int, rng: random.Random) -> tuple[int, int]:
    """Mixed sizes, like a real checkpoint: a few big shards, some medium files, many small ones."""
    sizes: list[int] = []
    budget = total
    for share, lo, hi in ((0.70, 32 << 20, 128 << 20), (0.25, 256 << 10, 4 << 20), (0.05, 1 << 10, 64 << 10)):
        part = int(total * share)
        while part > 0 and budget > 0:
            s = min(rng.randint(lo, hi), part, budget)
            sizes.append(s)
            part -= s
            budget -= s
    block = os.urandom(1 << 20)
    for i, s in enumerate(sizes):
        d = root / f"group{i % 7}" / ("sub" if i % 3 else "")
        d.mkdir(parents=True, exist_ok=True)
        with open(d / f"f{i:04d}.bin", "wb") as f:
            left = s
            while left:
                n = min(left, len(block))
                f.write(block[:n])
                left -= n
    (root / "empty").mkdir()
    return len(sizes), sum(sizes)


def timed(fn, *, clean: bool = True) -> float:  # type: ignore[no-untyped-def]
    if clean:
        os.sync()  # start clean: no figure pays for the previous one's dirty pages
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def copytree_fsync(src: Path, dst: Path) -> None:
    """The durable baseline: a plain copy, then every file and directory fsynced, one after another."""
    shutil.copytree(src, dst)
    for dirpath, _dirs, names in os.walk(dst):
        for n in names:
            fd = os.open(os.path.join(dirpath, n), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1G", help="tree size, e.g. 1G, 256M (default 1G)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is reported")
    ap.add_argument("--ranks", type=int, default=4, help="processes of the sharded save (default 4)")
    ap.add_argument("--only", choices=["save", "shards"], default=None, help="run one section only")
    ap.add_argument("--dir", default=None, help="where to put the temporary directory (default: system temp)")
    args = ap.parse_args()
    total = parse_size(args.size)
    work = Path(tempfile.mkdtemp(prefix="gangrun-bench-", dir=args.dir))
    try:
        if args.only in (None, "save"):
            run(work / "save", total, args.repeat)
        if args.only in (None, "shards"):
            run_shards(work / "shards", total, args.ranks, args.repeat)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, total: int, repeat: int) -> None:
    logging.getLogger("gangrun").setLevel(logging.WARNING)
    src = work / "src"
    nfiles, nbytes = make_tree(src, total, random.Random(0))
    gib = nbytes / (1 << 30)
    print(f"tree: {nfiles} files, {nbytes / (1 << 20):.0f} MiB, in {work.parent}")
    res: dict[str, list[float]] = {}

    def rec(name: str, seconds: float) -> None:
        res.setdefault(name, []).append(seconds)

    payload = os.urandom(min(nbytes, 256 << 20))
    for r in range(repeat):
        dst = work / f"copy{r}"
        rec("copytree", timed(partial(shutil.copytree, src, dst)))
        shutil.rmtree(dst)
        rec("copytree_fsync", timed(partial(copytree_fsync, src, dst)))
        shutil.rmtree(dst)

        ck = Checkpoint.for_path(str(work / f"ck{r}"), attempt=1, keep_last=None, cache_dir=work / f"cache{r}")
        rec("save", timed(partial(ck.save, src)))
        loader = Checkpoint.for_path(str(work / f"ck{r}"), attempt=1, cache_dir=work / f"cache{r}")
        with contextlib.redirect_stderr(io.StringIO()):  # the "loaded checkpoint" line, once per run
            rec("load", timed(loader.load))
        shutil.rmtree(work / f"cache{r}")

        rec("save_async_blocked", timed(partial(ck.save, src, blocking=False)))
        rec("save_async_total", timed(ck.wait, clean=False) + res["save_async_blocked"][-1])
        rec("save_nosnap_blocked", timed(partial(ck.save, src, blocking=False, snapshot=False)))
        ck.wait()
        rec("bytes_blocking", timed(partial(ck.save, payload)))
        rec("bytes_async_blocked", timed(partial(ck.save, payload, blocking=False)))
        ck.wait()

        real_fsync = storage_mod.os.fsync
        storage_mod.os.fsync = lambda fd: None  # what the save costs without durability, like copytree
        try:
            rec("save_nofsync", timed(partial(ck.save, src)))
        finally:
            storage_mod.os.fsync = real_fsync
        shutil.rmtree(work / f"ck{r}")
        print(f"  run {r + 1}/{repeat} done", file=sys.stderr)

    med = {k: statistics.median(v) for k, v in res.items()}

    def rate(k: str) -> float:
        return gib / med[k]

    ct, cts = med["copytree"], med["copytree_fsync"]
    print(f"medians of {repeat} runs")
    print(f"copytree             {ct:7.2f} s  {rate('copytree'):6.2f} GiB/s")
    print(f"copytree + fsync     {cts:7.2f} s  {rate('copytree_fsync'):6.2f} GiB/s   (durable baseline)")
    print(f"save (blocking)      {med['save']:7.2f} s  {rate('save'):6.2f} GiB/s   ratio to copytree + fsync {cts / med['save']:.2f}  (target >= 0.8), to copytree {ct / med['save']:.2f}")
    print(f"save (no fsync)      {med['save_nofsync']:7.2f} s  {rate('save_nofsync'):6.2f} GiB/s   ratio to copytree {ct / med['save_nofsync']:.2f}")
    print(f"load (verified)      {med['load']:7.2f} s  {rate('load'):6.2f} GiB/s   ratio to copytree {ct / med['load']:.2f}  (target >= 0.8)")
    print(f"blocked by save(blocking=False), snapshot     {med['save_async_blocked']:6.3f} s = {med['save_async_blocked'] / med['save']:6.1%} of a blocking save  (target <= 5%)")
    print(f"blocked by save(blocking=False, snapshot=False) {med['save_nosnap_blocked']:6.3f} s = {med['save_nosnap_blocked'] / med['save']:6.1%}")
    print(f"blocked by save(bytes, blocking=False)        {med['bytes_async_blocked']:6.3f} s = {med['bytes_async_blocked'] / med['bytes_blocking']:6.1%} of a blocking bytes save ({len(payload) >> 20} MiB)")


def _rank_main(work: str, rank: int, world: int, size: int, jobs: mp.Queue, done: mp.Queue) -> None:
    """One rank of the sharded benchmark: its part in memory, then each job when told to start."""
    part = os.urandom(min(size, 1 << 20)) * max(1, size >> 20)
    ckpt = Checkpoint.for_path(f"{work}/ck", attempt=1, rank=rank, world_size=world, keep_last=1, cache_dir=f"{work}/cache-{rank}")
    step = 0
    while True:
        job = jobs.get()
        if job is None:
            return
        kind, start_at = job
        while time.time() < start_at:  # every rank starts at the same instant
            time.sleep(0.0005)
        if kind == "shard":
            step += 1
            ckpt.save(part, step=step, shard=True)
            end = time.time()
            ckpt.wait()  # keep_last's removal of the previous one runs after the save: done before the next figure
        else:
            path = f"{work}/plain-{rank}.bin"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view[: 64 << 20]) :]
            if kind == "plain_fsync":
                os.fsync(fd)
            os.close(fd)
            end = time.time()
        done.put(end)  # the figure is the gang's: until the last rank is done


def run_shards(work: Path, total: int, ranks: int, repeat: int) -> None:
    """Sharded save of `total` bytes over `ranks` processes against each writing its part plainly."""
    work.mkdir(parents=True)
    ctx = mp.get_context("fork")
    jobs = [ctx.Queue() for _ in range(ranks)]
    done: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(str(work), r, ranks, total // ranks, jobs[r], done)) for r in range(ranks)]
    for p in procs:
        p.start()
    res: dict[str, list[float]] = {}
    try:
        for r in range(repeat):
            for kind in ("plain", "plain_fsync", "shard"):
                os.sync()
                start_at = time.time() + 0.3
                for q in jobs:
                    q.put((kind, start_at))
                ends = [done.get(timeout=600) for _ in range(ranks)]
                res.setdefault(kind, []).append(max(ends) - start_at)  # until the last rank returns
            print(f"  sharded run {r + 1}/{repeat} done", file=sys.stderr)
    finally:
        for q in jobs:
            q.put(None)
        for p in procs:
            p.join(60)
    med = {k: statistics.median(v) for k, v in res.items()}
    gib = total / (1 << 30)
    print(f"sharded save of {total >> 20} MiB over {ranks} ranks, medians of {repeat} runs")
    print(f"plain writes             {med['plain']:7.2f} s  {gib / med['plain']:6.2f} GiB/s")
    print(f"plain writes + fsync     {med['plain_fsync']:7.2f} s  {gib / med['plain_fsync']:6.2f} GiB/s   (durable baseline)")
    print(f"save(shard=True)         {med['shard']:7.2f} s  {gib / med['shard']:6.2f} GiB/s   ratio to plain + fsync {med['plain_fsync'] / med['shard']:.2f}  (target >= 0.8), to plain {med['plain'] / med['shard']:.2f}")



# ---- gangrun.torch: how long save_state(blocking=False) holds the training loop ----------------------
#
# A state dict of the same size as the tree (16 tensors), saved by one process (no process group) to
# the same disk. The loop is held by a non-blocking save for the staging (the copy to host memory)
# plus opening the save; the rest runs on the writer thread. Target: held <= 5% of a blocking save.
# The first non-blocking save also allocates the staging buffers, later ones reuse them: both shown.


def torch_main() -> int:
    import importlib.util

    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1G")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args, _ = ap.parse_known_args()
    if importlib.util.find_spec("torch") is None:
        print("gangrun.torch: torch is not installed (the 'torch' extra); skipped")
        return 0
    work = Path(tempfile.mkdtemp(prefix="gangrun-bench-torch-", dir=args.dir))
    try:
        return run_torch(work, parse_size(args.size), args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_torch(work: Path, total: int, repeat: int) -> int:
    import torch
    from gangrun.torch import save_state, wait

    n = 16
    state = {f"layer{i}": torch.rand(total // n // 4) for i in range(n)}  # float32
    nbytes = sum(t.numel() * 4 for t in state.values())
    ck = Checkpoint.for_path(str(work / "torch"), attempt=1, keep_last=2)
    res: dict[str, list[float]] = {}

    def rec(name: str, seconds: float) -> None:
        res.setdefault(name, []).append(seconds)

    staging: list[float] = []

    def save_async() -> None:
        info = save_state(state, step=0, blocking=False, checkpoint=ck)
        assert info is not None
        staging.append(info.staging_seconds)

    first = timed(save_async)
    first_staging = staging.pop()
    wait()
    for r in range(repeat):
        rec("blocking", timed(lambda: save_state(state, step=r, blocking=True, checkpoint=ck)))
        rec("held", timed(save_async))
        rec("async_total", timed(wait, clean=False) + res["held"][-1])
        print(f"  torch run {r + 1}/{repeat} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in res.items()}
    blocking = med["blocking"]
    print(f"gangrun.torch state dict: {n} tensors, {nbytes / (1 << 20):.0f} MiB, one process")
    print(f"save_state(blocking=True)            {blocking:7.3f} s  {nbytes / (1 << 30) / blocking:6.2f} GiB/s")
    print(f"held by save_state(blocking=False)   {med['held']:7.3f} s = {med['held'] / blocking:6.1%} of a blocking save  (target <= 5%)")
    print(f"  of which staging to host memory    {statistics.median(staging):7.3f} s")
    print(f"  first save (allocates the buffers) {first:7.3f} s = {first / blocking:6.1%}, staging {first_staging:.3f} s")
    print(f"non-blocking save, start to commit   {med['async_total']:7.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main() or torch_main())
