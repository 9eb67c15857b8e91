"""Who and where a worker is: `gangrun.context()`, read from the worker environment a backend sets.

Inside a gang the backend sets ``GANGRUN_TASK``, ``GANGRUN_ATTEMPT``, ``JOBSET_RESTART_ATTEMPT``,
``NNODES``, ``NODE_RANK``, ``NPROC_PER_NODE``, ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``, ``GANGRUN_CHECKPOINT_PATH`` and ``GANGRUN_PREV_CHECKPOINT_PATH``.
Outside one (no ``GANGRUN_TASK``), `context()` still answers: ``in_gang`` is False, the context is
falsy, ranks describe a single process and there is no checkpoint. A malformed variable raises
`WorkerEnvError` naming it, rather than a worker silently training as the wrong rank.

In a gang, `context()` called from the main thread also installs the SIGTERM stop notice
(`stop_requested`, `on_stop`; see gangrun._ckpt.notice).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gangrun._ckpt import notice
from gangrun._ckpt.events import EVENTS_FILE_ENV
from gangrun._ckpt.layout import split_attempt_path
from gangrun._errors import WorkerEnvError
from gangrun.checkpoint import Checkpoint

__all__ = ["Context", "StopNotice", "context"]

StopNotice = notice.StopNotice

_VARS = (
    "GANGRUN_TASK", "GANGRUN_ATTEMPT", "JOBSET_RESTART_ATTEMPT", "NNODES", "NODE_RANK", "NPROC_PER_NODE",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GANGRUN_CHECKPOINT_PATH",
    "GANGRUN_PREV_CHECKPOINT_PATH", "GANGRUN_RESUME_FROM", EVENTS_FILE_ENV, notice.STOP_FILE_ENV, notice.GRACE_ENV,
)  # fmt: skip


@dataclass(frozen=True)
class Context:
    """The worker's place in its gang. Falsy outside a gang."""

    in_gang: bool = False
    task: str | None = None
    attempt: int | None = None  # 1-based; None outside a gang
    restart_attempt: int = 0  # JOBSET_RESTART_ATTEMPT: whole-gang restarts inside this attempt
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    node_rank: int = 0
    nnodes: int = 1
    nproc_per_node: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    checkpoint: Checkpoint | None = None

    def __bool__(self) -> bool:
        return self.in_gang

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that writes checkpoints."""
        return self.rank == 0

    @property
    def stop_requested(self) -> bool:
        """True once the gang is being stopped (SIGTERM). Reading it tells gangrun that this program
        handles the stop itself: it gets until shortly before the deadline to save and exit."""
        return notice.stop_requested()

    def should_stop(self) -> bool:
        """Whether the gang is stopping, answered alike on every rank at the same step.

        With torch.distributed initialised this is a collective: an all_reduce (MAX) of every rank's
        `stop_requested`, so all ranks leave the loop at the same step even when SIGTERM reached
        only one of them, and the final (sharded) save has every rank in it. Call it from the
        training loop on every rank at the same steps (every step, or every k-th with the same k).

        Without torch.distributed it is this process's own `stop_requested`: there is no group to
        ask without a collective of its own, and scripts without one do not wait on each other, so
        a rank that stops alone strands nobody. torch is never imported for this.
        """
        local = self.stop_requested
        if "torch.distributed" not in sys.modules:
            return local
        from gangrun.torch import _gang

        if not _gang.initialized():
            return local
        from gangrun.torch._stop import agree

        return agree(local)

    @property
    def stop_notice(self) -> StopNotice | None:
        """Cause, message and deadline of the stop, once requested (cause None if the backend did not say)."""
        return notice.STATE.notice

    def on_stop(self, fn: Callable[[StopNotice], object]) -> None:
        """Call `fn(notice)` once when a stop is requested, from the ``gangrun-stop`` thread (not from
        the signal handler). Keep it short: set a flag your loop checks, then save from the loop.
        Installs the SIGTERM handler if this is the main thread and it is not installed yet."""
        self.install_stop_handler()
        notice.on_stop(fn)

    def install_stop_handler(self) -> bool:
        """Turn SIGTERM into the stop notice (main thread only). Returns whether it is installed."""
        return notice.install()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, install_stop_handler: bool | None = None) -> Context:
        """Read a context from `env` (default os.environ). `install_stop_handler`: None = only in a
        gang; True = always (main thread); False = never."""
        env = os.environ if env is None else env
        ctx = _parse(env)
        if install_stop_handler or (install_stop_handler is None and ctx.in_gang):
            notice.install(env)
        return ctx


_cache: tuple[tuple[str | None, ...], Context] | None = None


def context() -> Context:
    """This process's context (cached; read again if the worker environment changes)."""
    global _cache
    key = tuple(os.environ.get(v) for v in _VARS)
    if _cache is None or _cache[0] != key:
        _cache = (key, Context.from_env(os.environ))
    return _cache[1]


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise WorkerEnvError(name, f"expected an integer, got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise WorkerEnvError(name, f"must be {bound}, got {value}")
    return value


def _parse(env: Mapping[str, str]) -> Context:
    task = env.get("GANGRUN_TASK", "").strip() or None
    attempt = _int(env, "GANGRUN_ATTEMPT", 1, minimum=1)
    nnodes = _int(env, "NNODES", 1, minimum=1)
    nproc = _int(env, "NPROC_PER_NODE", 1, minimum=1)
    world = _int(env, "WORLD_SIZE", nnodes * nproc, minimum=1)
    rank = _int(env, "RANK", 0, maximum=world - 1)
    node_rank = _int(env, "NODE_RANK", 0, maximum=nnodes - 1)
    local_rank = _int(env, "LOCAL_RANK", 0, maximum=nproc - 1)
    port = env.get("MASTER_PORT", "").strip()
    ckpt = None
    path = env.get("GANGRUN_CHECKPOINT_PATH", "").strip() if task else ""
    if path:
        split = split_attempt_path(path)
        if split is None or split[1] != attempt:
            raise WorkerEnvError("GANGRUN_CHECKPOINT_PATH", f"must end in attempt-{attempt}, got {path!r}")
        prev = env.get("GANGRUN_PREV_CHECKPOINT_PATH", "").strip()
        if prev and split_attempt_path(prev) != (split[0], attempt - 1):
            # Earlier attempts are found by the layout rule; a different PREV means the backend and
            # the SDK disagree on the layout, which would silently lose progress.
            want = f"{split[0]}/attempt-{attempt - 1}"
            raise WorkerEnvError("GANGRUN_PREV_CHECKPOINT_PATH", f"must be {want}, got {prev!r}")
        ckpt = Checkpoint(
            split[0], attempt=attempt, task=task, rank=rank, world_size=world,
            restart_attempt=_int(env, "JOBSET_RESTART_ATTEMPT", 0), events_file=env.get(EVENTS_FILE_ENV) or None,
            resume_from=env.get("GANGRUN_RESUME_FROM", "").strip() or None,
        )  # fmt: skip
    if task:
        notice.grace_period(env)  # a malformed grace period is reported now, not at the SIGTERM
    return Context(
        in_gang=task is not None,
        task=task,
        attempt=attempt if task else None,
        restart_attempt=_int(env, "JOBSET_RESTART_ATTEMPT", 0),
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        node_rank=node_rank,
        nnodes=nnodes,
        nproc_per_node=nproc,
        master_addr=env.get("MASTER_ADDR", "").strip() or None,
        master_port=_int(env, "MASTER_PORT", 0, minimum=1, maximum=65535) if port else None,
        checkpoint=ckpt,
    )
