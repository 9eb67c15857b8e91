"""Checkpoint throughput and blocked time, each against a baseline measured in the same run.

    python -m benchmarks.bench_checkpoint                        # 1 GiB, 5 runs, every figure
    python -m benchmarks.bench_checkpoint --size 64M --repeat 3   # small and quick
    python -m benchmarks.bench_checkpoint --only torch            # one section: save, shards or torch

Measures, in one run and on the same disk (a temporary directory, removed afterwards), and prints
the load average at the start and the end (the figures are only as quiet as the machine):

- save throughput of `Checkpoint.save(dir)` (copy + CRC-32C + fsync + manifest + rename) and load
  throughput of `load()` (copy + verify), against `shutil.copytree` of the same tree. The durable
  baseline, the one the save must reach (>= 0.8), is copytree followed by one `os.sync()`: the same
  bytes on disk, as a committed save has them. copytree followed by an fsync of every file and
  directory, one after another, is printed too. The "no fsync" figure writes through the page cache
  only, like copytree alone.
- sharded save: `--ranks` processes (default 4) each save their part of the state (`--size` in
  all) with `save(part, step=n, shard=True)`, against the same processes each writing its part with
  plain file writes and an fsync. The durable baseline (target >= 0.8) writes a new file each time
  and removes the previous one, as a checkpoint must (it cannot overwrite the one it replaces and
  stay atomic); rewriting one file in place, with and without fsync, is printed too. On this kind of
  virtual machine the difference is real: memory freed a few seconds earlier is handed back to the
  host, and writing new files into the page cache touches it afresh at up to 6x the cost, while a
  rewrite in place reuses the pages it just truncated.
- how long a training loop is blocked by `save(blocking=False)` versus a blocking save: with the
  default snapshot (the tree is copied aside before save returns: a memory-speed copy, which cannot
  be 5% of a save that runs at copy speed; see `Checkpoint.save`), without a snapshot
  (`snapshot=False`, the caller keeps the files unchanged until the save commits), and for a bytes
  object of the same size.
- gangrun.torch: how long `save_state(blocking=False)` holds the loop (target <= 5% of a blocking
  `save_state`), with the staging to host memory shown apart, against a plain copy of the same
  tensors into preallocated memory (`Tensor.copy_` into buffers already touched once), the physical
  floor of what the loop must wait for (target: held <= 1.2x that copy).

Before every timed figure the page cache is flushed (`os.sync()`, untimed), and the background
retention of the previous save is waited for, so no figure pays for the one before it.
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


def timed(fn, *, clean: bool = True) -> float:
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


def copytree_sync(src: Path, dst: Path) -> None:
    """The other durable baseline: a plain copy, then one os.sync() for everything (which a library
    cannot use: it would flush every other process's writes too)."""
    shutil.copytree(src, dst)
    os.sync()


def _spread(res: dict[str, list[float]]) -> str:
    """Every run of each figure, so that a reader sees how noisy the medians are."""
    return "; ".join(f"{k}: " + " ".join(f"{x:.2f}" for x in v) for k, v in res.items())


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1G", help="tree size, e.g. 1G, 256M (default 1G)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is reported")
    ap.add_argument("--ranks", type=int, default=4, help="processes of the sharded save (default 4)")
    ap.add_argument("--only", choices=["save", "shards", "torch"], default=None, help="run one section only")
    ap.add_argument("--dir", default=None, help="where to put the temporary directory (default: system temp)")
    args = ap.parse_args()
    total = parse_size(args.size)
    work = Path(tempfile.mkdtemp(prefix="gangrun-bench-", dir=args.dir))
    print(f"start: {load_line()}")
    try:
        if args.only in (None, "save"):
            run(work / "save", total, args.repeat)
        if args.only in (None, "shards"):
            run_shards(work / "shards", total, args.ranks, args.repeat)
        if args.only in (None, "torch"):
            run_torch(work / "torch", total, args.repeat)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
        print(f"end: {load_line()}")


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
        ck = Checkpoint.for_path(str(work / f"ck{r}"), attempt=1, keep_last=None, cache_dir=work / f"cache{r}")

        def save(ck: Checkpoint = ck) -> None:
            rec("save", timed(partial(ck.save, src)))
            ck.wait()  # retention runs after a save returns, in the background: not in the next figure

        def baseline(name: str, copy, dst: Path = dst) -> None:  # type: ignore[no-untyped-def]
            rec(name, timed(partial(copy, src, dst)))
            shutil.rmtree(dst)

        # The save and its baselines in a rotating order: on a virtual machine one figure's
        # writeback, and the memory another figure freed, change the next figure's speed, and no
        # figure should always come after the same one.
        figures = [save, partial(baseline, "copytree", shutil.copytree),
                   partial(baseline, "copytree_fsync", copytree_fsync), partial(baseline, "copytree_sync", copytree_sync)]  # fmt: skip
        for figure in figures[r % 4 :] + figures[: r % 4]:
            figure()
        loader = Checkpoint.for_path(str(work / f"ck{r}"), attempt=1, cache_dir=work / f"cache{r}")
        with contextlib.redirect_stderr(io.StringIO()):  # the "loaded checkpoint" line, once per run
            rec("load", timed(loader.load))
        shutil.rmtree(work / f"cache{r}")

        rec("save_async_blocked", timed(partial(ck.save, src, blocking=False)))
        rec("save_async_total", timed(ck.wait, clean=False) + res["save_async_blocked"][-1])
        rec("save_nosnap_blocked", timed(partial(ck.save, src, blocking=False, snapshot=False)))
        ck.wait()
        rec("bytes_blocking", timed(partial(ck.save, payload)))
        ck.wait()
        rec("bytes_async_blocked", timed(partial(ck.save, payload, blocking=False)))
        ck.wait()

        real_fsync = storage_mod.os.fsync
        storage_mod.os.fsync = lambda fd: None  # what the save costs without durability, like copytree
        try:
            rec("save_nofsync", timed(partial(ck.save, src)))
            ck.wait()
        finally:
            storage_mod.os.fsync = real_fsync
        shutil.rmtree(work / f"ck{r}")
        print(f"  run {r + 1}/{repeat} done", file=sys.stderr)

    med = {k: statistics.median(v) for k, v in res.items()}

    def rate(k: str) -> float:
        return gib / med[k]

    ct, cts, cto = med["copytree"], med["copytree_fsync"], med["copytree_sync"]
    print(f"medians of {repeat} runs ({_spread({k: res[k] for k in ('copytree', 'copytree_sync', 'save')})})")
    print(f"copytree             {ct:7.2f} s  {rate('copytree'):6.2f} GiB/s")
    print(f"copytree + fsync     {cts:7.2f} s  {rate('copytree_fsync'):6.2f} GiB/s   (durable: every file and folder fsynced, one after another)")
    print(f"copytree + os.sync() {cto:7.2f} s  {rate('copytree_sync'):6.2f} GiB/s   (durable baseline: one sync of everything)")
    print(f"save (blocking)      {med['save']:7.2f} s  {rate('save'):6.2f} GiB/s   ratio to copytree + os.sync() {cto / med['save']:.2f}  (target >= 0.8), to copytree + fsync {cts / med['save']:.2f}, to copytree {ct / med['save']:.2f}")
    print(f"save (no fsync)      {med['save_nofsync']:7.2f} s  {rate('save_nofsync'):6.2f} GiB/s   ratio to copytree {ct / med['save_nofsync']:.2f}")
    print(f"load (verified)      {med['load']:7.2f} s  {rate('load'):6.2f} GiB/s   ratio to copytree {ct / med['load']:.2f}  (target >= 0.8)")
    print(f"blocked by save(blocking=False), snapshot     {med['save_async_blocked']:6.3f} s = {med['save_async_blocked'] / med['save']:6.1%} of a blocking save  (a copy of the tree: see save()'s docstring)")
    print(f"blocked by save(blocking=False, snapshot=False) {med['save_nosnap_blocked']:6.3f} s = {med['save_nosnap_blocked'] / med['save']:6.1%}")
    print(f"blocked by save(bytes, blocking=False)        {med['bytes_async_blocked']:6.3f} s = {med['bytes_async_blocked'] / med['bytes_blocking']:6.1%} of a blocking bytes save ({len(payload) >> 20} MiB)")


def _rank_main(work: str, rank: int, world: int, size: int, jobs: mp.Queue, done: mp.Queue) -> None:
    """One rank of the sharded benchmark: its part in memory, then each job when told to start."""
    part = os.urandom(min(size, 1 << 20)) * max(1, size >> 20)
    ckpt = Checkpoint.for_path(f"{work}/ck", attempt=1, rank=rank, world_size=world, keep_last=1, cache_dir=f"{work}/cache-{rank}")
    step = 0
    new_files = 0
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
            new_files += kind == "new_fsync"
            path = f"{work}/new-{rank}-{new_files}.bin" if kind == "new_fsync" else f"{work}/plain-{rank}.bin"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view[: 64 << 20]) :]
            if kind != "plain":
                os.fsync(fd)
            os.close(fd)
            end = time.time()
            if kind == "new_fsync" and new_files > 1:  # the previous one goes once this one is in, as keep_last=1 does
                os.unlink(f"{work}/new-{rank}-{new_files - 1}.bin")
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
        # Two untimed rounds first: the first saves into fresh files measured 2-3x slower than
        # the rest here (the page cache has to make room), which the baseline, rewriting one file
        # in place, pays only once.
        for r in range(-2, repeat):
            kinds = ["plain", "plain_fsync", "new_fsync", "shard"]
            for kind in kinds[r % 4 :] + kinds[: r % 4]:  # rotated, as in run()
                os.sync()
                start_at = time.time() + 0.3
                for q in jobs:
                    q.put((kind, start_at))
                ends = [done.get(timeout=600) for _ in range(ranks)]
                if r >= 0:
                    res.setdefault(kind, []).append(max(ends) - start_at)  # until the last rank returns
            print(f"  sharded run {r + 1}/{repeat} done", file=sys.stderr)
    finally:
        for q in jobs:
            q.put(None)
        for p in procs:
            p.join(60)
    med = {k: statistics.median(v) for k, v in res.items()}
    gib = total / (1 << 30)
    print(f"sharded save of {total >> 20} MiB over {ranks} ranks, medians of {repeat} runs ({_spread(res)})")
    print(f"plain writes, one file rewritten       {med['plain']:7.2f} s  {gib / med['plain']:6.2f} GiB/s")
    print(f"plain writes + fsync, one file rewritten {med['plain_fsync']:5.2f} s  {gib / med['plain_fsync']:6.2f} GiB/s")
    print(f"plain writes + fsync, a new file each  {med['new_fsync']:7.2f} s  {gib / med['new_fsync']:6.2f} GiB/s   (durable baseline)")
    print(f"save(shard=True)                       {med['shard']:7.2f} s  {gib / med['shard']:6.2f} GiB/s   ratio to new file + fsync "
          f"{med['new_fsync'] / med['shard']:.2f}  (target >= 0.8), to rewrite + fsync {med['plain_fsync'] / med['shard']:.2f}, to rewrite {med['plain'] / med['shard']:.2f}")  # fmt: skip


# ---- gangrun.torch: how long save_state(blocking=False) holds the training loop ----------------------
#
# A state dict of the same size as the tree (16 tensors), saved by one process (no process group) to
# the same disk. The loop is held by a non-blocking save for the staging (the copy to host memory)
# plus opening the save; the rest runs on the writer thread. Target: held <= 5% of a blocking save,
# and <= 1.2x a plain copy of the same tensors into preallocated, already touched memory (the floor:
# no staging can copy the state faster than memory does). The first non-blocking save also allocates
# the staging buffers, later ones reuse them: both shown.


def run_torch(work: Path, total: int, repeat: int) -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        print("gangrun.torch: torch is not installed (the 'torch' extra); skipped")
        return
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

    plain = {k: torch.empty_like(v) for k, v in state.items()}

    def plain_copy() -> None:
        for k, v in state.items():
            plain[k].copy_(v)

    plain_copy()  # touches every page once, as the first save does with the staging buffers
    first = timed(save_async)
    first_staging = staging.pop()
    wait()
    for r in range(repeat):
        rec("plain_copy", timed(plain_copy))
        rec("blocking", timed(partial(save_state, state, step=r, blocking=True, checkpoint=ck)))
        wait()  # retention runs after a save returns, in the background: not in the next figure
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
    copy = med["plain_copy"]
    print(f"plain copy into preallocated memory  {copy:7.3f} s  {nbytes / (1 << 30) / copy:6.2f} GiB/s")
    print(f"  held / plain copy                  {med['held'] / copy:7.2f}x  (target <= 1.2x); "
          f"staging / plain copy {statistics.median(staging) / copy:.2f}x")
    print(f"non-blocking save, start to commit   {med['async_total']:7.3f} s")


if __name__ == "__main__":
    sys.exit(main())
