"""`gangrun logs -f` on Kubernetes: follow an attempt's worker pods, each round's as they come.

A gang runs in new pods after a whole-gang restart and after a Kueue readmission (the Job
controller creates them again), and a gang's pods do not all start at the same instant. So the
follower lists the attempt's pods every `poll` seconds and opens one log stream (`follow=true`) per
pod the first time it sees the pod's container started, and hands on the lines of every open stream
as they come. Each pod is streamed once, from its first line, so nothing is printed twice; a pod
that starts while others stream is not held back until they end.

It ends once `ended()` says the attempt is over (the task ended, or moved to a later attempt) and
every stream opened has ended. A stream that fails (an API error) ends it too, once the streams open
then have ended: the first error is raised, so that `logs -f` fails as `logs` does instead of going
on, or ending with exit 0.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator

from gangrun._errors import ApiError

Pods = Callable[[], list[tuple[int, str]]]  # (node index, pod name) of the pods whose containers started
Stream = Callable[[str], Iterator[str]]  # a pod's log lines, following


def follow(*, pods: Pods, ended: Callable[[], bool], stream: Stream, prefix: bool, poll: float) -> Iterator[str]:
    """Yield the lines of every pod `pods()` lists, `[rank N] `-prefixed when `prefix`, until the
    attempt has `ended()` and every stream opened has ended."""
    lines: queue.Queue[str | ApiError | None] = queue.Queue()
    opened: set[str] = set()
    open_streams = 0
    failed: ApiError | None = None

    def pump(rank: int, pod: str) -> None:
        try:
            for line in stream(pod):
                lines.put(f"[rank {rank}] {line}" if prefix else line)
        except ApiError as e:
            lines.put(e)
        finally:
            lines.put(None)

    listed_at = -poll
    while True:
        if time.monotonic() - listed_at >= poll:  # the API is asked once per `poll`, however busy the streams
            listed_at = time.monotonic()
            # Read the end before the pods: a round listed after the attempt ended is still streamed.
            done = ended()
            for rank, pod in pods():
                if pod not in opened:
                    opened.add(pod)
                    open_streams += 1
                    threading.Thread(target=pump, args=(rank, pod), daemon=True, name=f"gangrun-log-{pod}").start()
            if done and not open_streams:
                break
        try:
            item = lines.get(timeout=max(poll - (time.monotonic() - listed_at), 0.001))
        except queue.Empty:
            continue
        while True:  # everything there is now, then look for new pods again
            if item is None:
                open_streams -= 1
            elif isinstance(item, ApiError):
                failed = failed or item
            else:
                yield item
            try:
                item = lines.get_nowait()
            except queue.Empty:
                break
        if failed is not None and not open_streams:  # a stream that broke ends the follow, once the others did
            raise failed
    if failed is not None:
        raise failed
