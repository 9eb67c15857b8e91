"""Run one function over many files on a few threads: the parallelism of a save, a snapshot and a load.

Threads rather than processes: file I/O, fsync, `os.copy_file_range` and the CRC (crc32c) release the
GIL, so a few threads keep both the CPU and the disk queue busy (concurrent fsyncs let the
filesystem merge journal commits, which is most of what a save of many small files costs).

Not `concurrent.futures`: its executors refuse new work once interpreter shutdown has begun, which is
exactly when the exit flush (writer.py) still has to finish a save. Here a thread that cannot start
only means the calling thread does that share of the work itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Threads per transfer, the calling thread included. Small on purpose: beyond a few concurrent
#: streams a local disk gains nothing, and the machine is shared with training.
WORKERS = max(2, min(8, 2 * (os.cpu_count() or 1)))


def run_all(fn: Callable[[T], R], items: Sequence[T], workers: int = WORKERS) -> list[R]:
    """`[fn(x) for x in items]`, on up to `workers` threads; results in the order of `items`.

    Items are taken in order, so pass the largest first to balance the threads. On the first
    error no new item is started, every thread is joined (nothing is still writing when the
    caller cleans up), and that error is raised.
    """
    n = len(items)
    if workers <= 1 or n <= 1:
        return [fn(x) for x in items]
    results: dict[int, R] = {}  # by index: every one is set when no error was raised
    errors: list[BaseException] = []
    lock = threading.Lock()
    next_index = 0

    def work() -> None:
        nonlocal next_index
        while True:
            with lock:
                if errors or next_index >= n:
                    return
                i = next_index
                next_index += 1
            try:
                results[i] = fn(items[i])
            except BaseException as e:  # kept and raised by the caller, after every thread stopped
                with lock:
                    errors.append(e)
                return

    threads: list[threading.Thread] = []
    try:
        for _ in range(min(workers, n) - 1):
            t = threading.Thread(target=work, name="gangrun-ckpt-io", daemon=True)
            try:
                t.start()
            except RuntimeError:  # interpreter shutting down: the calling thread does the rest
                break
            threads.append(t)
        work()
    except BaseException as e:  # e.g. KeyboardInterrupt in the calling thread: stop the others too
        with lock:
            errors.append(e)
        raise
    finally:
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return [results[i] for i in range(n)]
