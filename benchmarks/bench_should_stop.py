"""What one `ctx.should_stop()` costs on gloo, where it is one all_reduce of a one-element tensor.

    python -m benchmarks.bench_should_stop                    # 2 and 4 ranks, 2000 calls each
    python -m benchmarks.bench_should_stop --ranks 2 --calls 500

Starts the ranks as processes of this machine (gloo over loopback, one thread each), and on every
rank: 200 warm-up calls, then `--calls` timed calls of `ctx.should_stop()`, then as many bare
`dist.all_reduce` calls of the same one-element tensor, for comparison. Prints, per world size, the
median and 90th percentile of one call on rank 0 in microseconds, and the load average at the
start and the end (the figures are only as quiet as the machine).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from typing import Any

WARMUP = 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _percentiles(ns: list[int]) -> tuple[float, float]:
    us = sorted(n / 1000 for n in ns)
    return statistics.median(us), us[int(len(us) * 0.9)]


def _rank(rank: int, world: int, port: int, calls: int, out: Any) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch
    import torch.distributed as dist

    import gangrun

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = gangrun.context()
    for _ in range(WARMUP):
        ctx.should_stop()
    dist.barrier()
    stop: list[int] = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        ctx.should_stop()
        stop.append(time.perf_counter_ns() - t)
    dist.barrier()
    flag = torch.zeros(1, dtype=torch.int32)
    bare: list[int] = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        bare.append(time.perf_counter_ns() - t)
    if rank == 0:
        out.put((_percentiles(stop), _percentiles(bare)))
    # Both ranks done before either tears down: rank 0 hosts the rendezvous store, and a rank still
    # talking to it while rank 0 exits can abort (std::terminate in the store's thread).
    dist.barrier()
    dist.destroy_process_group()


def measure(world: int, calls: int) -> tuple[tuple[float, float], tuple[float, float]]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(_rank, args=(world, _free_port(), calls, out), nprocs=world, join=True, start_method="spawn")
    result: tuple[tuple[float, float], tuple[float, float]] = out.get()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}, cpus: {os.cpu_count()}")
    for world in args.ranks:
        (stop_med, stop_p90), (bare_med, bare_p90) = measure(world, args.calls)
        print(f"{world} ranks: should_stop() median {stop_med:.0f} us (p90 {stop_p90:.0f} us); "
              f"bare all_reduce median {bare_med:.0f} us (p90 {bare_p90:.0f} us)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
