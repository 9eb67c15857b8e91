"""Who and where a worker is: `gangrun.context()`, read from the worker environment a backend sets.

Inside a gang the backend sets ``GANGRUN_TASK``, ``GANGRUN_ATTEMPT``, ``JOBSET_RESTART_ATTEMPT``,
``NNODES``, ``NODE_RANK``, ``NPROC_PER_NODE``, ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``, ``GANGRUN_CHECKPOINT_PATH`` and ``GANGRUN_PREV_CHECKPOINT_PATH``.

Outside one (no ``GANGRUN_TASK``) the same script still runs: `context()` answers with ``in_gang``
False (the context is falsy), the ranks torchrun sets when it started the process (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``GROUP_WORLD_SIZE``,
``TORCHELASTIC_RESTART_COUNT``), or a single process under plain ``python``, and a checkpoint in a
local folder (``GANGRUN_CHECKPOINT_PATH`` when set, else ``.gangrun/checkpoints/<script name>``
under the current folder; see `gangrun._core.worker_env`), which the first load or save names in
one log line. Its attempt is 1 on every run, so a second run of the script loads the newest
checkpoint of the first. torchrun's names come before gangrun's NPROC_PER_NODE / NODE_RANK /
NNODES, which a gang sets to the same values: they are what the launcher of this very process said.

A malformed variable raises `WorkerEnvError` naming it, rather than a worker silently training as
the wrong rank.

In a gang, `context()` called from the main thread also installs the SIGTERM stop notice
(`stop_requested`, `on_stop`; see gangrun._ckpt.notice).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gangrun._ckpt import events, notice
from gangrun._ckpt.layout import split_attempt_path
from gangrun._core import worker_env as wenv
from gangrun._core.checkpoint_root import attempt_name, attempt_path
from gangrun._errors import WorkerEnvError
from gangrun.checkpoint import Checkpoint

__all__ = ["Context", "StopNotice", "context"]

StopNotice = notice.StopNotice

_VARS = (
    wenv.GANGRUN_TASK, wenv.GANGRUN_ATTEMPT, wenv.RESTART_ATTEMPT, wenv.NNODES, wenv.NODE_RANK, wenv.NPROC_PER_NODE,
    wenv.RANK, wenv.LOCAL_RANK, wenv.WORLD_SIZE, wenv.MASTER_ADDR, wenv.MASTER_PORT, wenv.CHECKPOINT_PATH,
    wenv.PREV_CHECKPOINT_PATH, wenv.RESUME_FROM, wenv.EVENTS_FILE, wenv.STOP_FILE, wenv.GRACE_PERIOD,
    wenv.LOCAL_WORLD_SIZE, wenv.GROUP_RANK, wenv.GROUP_WORLD_SIZE, wenv.TORCHELASTIC_RESTART_COUNT, wenv.GANGRUN_START,
    wenv.RUN_ID,
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
    checkpoint: Checkpoint | None = None  # outside a gang: a local folder (see the module docstring)
    events_file: str | None = None  # where the SDK reports checkpoints and the first step to the backend

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

        Once it answered True, the process does not exit 0: a clean exit becomes 143 (stopped, not
        done), so the rank runs again when its gang does.
        """
        self.progress()
        local = self.stop_requested
        if "torch.distributed" not in sys.modules:
            return local
        from gangrun.torch import _gang

        if not _gang.initialized():
            return local
        from gangrun.torch._stop import agree

        if agree(local):
            notice.stopped()  # a peer's stop: this rank must not exit 0 either (notice.py)
            return True
        return False

    def progress(self, step: int | None = None) -> None:
        """Tell gangrun that training is making progress (call it once per step, or at least once after
        loading). The first call after the load marks the end of the gang's restoring time, which is
        not counted as productive; later calls cost a set lookup. A save or a `should_stop()` call
        says the same, so most loops need not call this."""
        events.first_step(self.events_file, task=self.task, attempt=self.attempt, rank=self.rank, step=step)

    @property
    def stop_notice(self) -> StopNotice | None:
        """Cause, message and deadline of the stop, once requested (cause None while the backend has not
        said; a cause it writes after the signal shows here once written)."""
        return notice.STATE.told()

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
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        install_stop_handler: bool | None = None,
        standalone_root: str | None = None,
    ) -> Context:
        """Read a context from `env` (default os.environ). `install_stop_handler`: None = only in a
        gang; True = always (main thread); False = never. `standalone_root`: where checkpoints go
        outside a gang when GANGRUN_CHECKPOINT_PATH is not set (None: no checkpoint there);
        `context()` passes ``.gangrun/checkpoints/<script name>`` under the current folder."""
        env = os.environ if env is None else env
        ctx = _parse(env, standalone_root)
        if install_stop_handler or (install_stop_handler is None and ctx.in_gang):
            notice.install(env)
        return ctx


_cache: tuple[tuple[str | None, ...], Context] | None = None


def context() -> Context:
    """This process's context (cached; read again if the worker environment changes)."""
    global _cache
    key = tuple(os.environ.get(v) for v in _VARS)
    if _cache is None or _cache[0] != key:
        _cache = (key, Context.from_env(os.environ, standalone_root=_standalone_root()))
    return _cache[1]


@functools.cache
def _standalone_root() -> str:
    """Decided once: a script that changes its folder later keeps its checkpoints where they started."""
    return wenv.standalone_checkpoint_root(os.getcwd(), sys.argv[0] if sys.argv else "")


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


def _first_int(
    env: Mapping[str, str], names: tuple[str, str], default: int, *, minimum: int = 0, maximum: int | None = None
) -> int:
    """The first of `names` that is set (torchrun's name, then gangrun's), checked under its own name."""
    for name in names:
        if env.get(name, "").strip():
            return _int(env, name, default, minimum=minimum, maximum=maximum)
    return default


def _parse(env: Mapping[str, str], standalone_root: str | None = None) -> Context:
    task = env.get("GANGRUN_TASK", "").strip() or None
    attempt = _int(env, "GANGRUN_ATTEMPT", 1, minimum=1) if task else 1
    nproc = _first_int(env, (wenv.LOCAL_WORLD_SIZE, wenv.NPROC_PER_NODE), 1, minimum=1)
    world = _int(env, "WORLD_SIZE", 0, minimum=1)
    # Without a node count (plain torchrun sets GROUP_WORLD_SIZE; older ones do not), the world size
    # says it when it is a whole number of nodes.
    guess = world // nproc if world and world % nproc == 0 else 1
    nnodes = _first_int(env, (wenv.GROUP_WORLD_SIZE, wenv.NNODES), guess, minimum=1)
    world = world or nnodes * nproc
    rank = _int(env, "RANK", 0, maximum=world - 1)
    node_rank = _first_int(env, (wenv.GROUP_RANK, wenv.NODE_RANK), 0, minimum=0, maximum=nnodes - 1)
    local_rank = _int(env, "LOCAL_RANK", 0, maximum=nproc - 1)
    restart = _first_int(env, (wenv.RESTART_ATTEMPT, wenv.TORCHELASTIC_RESTART_COUNT), 0, minimum=0)
    port = env.get("MASTER_PORT", "").strip()
    ckpt = None
    path = env.get("GANGRUN_CHECKPOINT_PATH", "").strip()
    if not task:
        ckpt = _standalone_checkpoint(path, standalone_root, rank=rank, world=world, restart=restart,
                                      start=_torchrun_start(env, nnodes=nnodes, restart=restart))
    elif path:
        split = split_attempt_path(path)
        if split is None or split[1] != attempt:
            raise WorkerEnvError(wenv.CHECKPOINT_PATH, f"must end in {attempt_name(attempt)}, got {path!r}")
        prev = env.get("GANGRUN_PREV_CHECKPOINT_PATH", "").strip()
        if prev and split_attempt_path(prev) != (split[0], attempt - 1):
            # Earlier attempts are found by the layout rule; a different PREV means the backend and
            # the SDK disagree on the layout, which would silently lose progress.
            want = attempt_path(split[0], attempt - 1)
            raise WorkerEnvError(wenv.PREV_CHECKPOINT_PATH, f"must be {want}, got {prev!r}")
        ckpt = Checkpoint(
            split[0], attempt=attempt, task=task, rank=rank, world_size=world,
            restart_attempt=restart, events_file=env.get(wenv.EVENTS_FILE) or None,
            resume_from=env.get("GANGRUN_RESUME_FROM", "").strip() or None,
            start=env.get(wenv.GANGRUN_START, "").strip() or None,
        )  # fmt: skip
    if task:
        notice.grace_period(env)  # a malformed grace period is reported now, not at the SIGTERM
    return Context(
        in_gang=task is not None,
        task=task,
        attempt=attempt if task else None,
        restart_attempt=restart,
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        node_rank=node_rank,
        nnodes=nnodes,
        nproc_per_node=nproc,
        master_addr=env.get("MASTER_ADDR", "").strip() or None,
        master_port=_int(env, "MASTER_PORT", 0, minimum=1, maximum=65535) if port else None,
        checkpoint=ckpt,
        events_file=(env.get(wenv.EVENTS_FILE) or None) if task else None,
    )


def _torchrun_start(env: Mapping[str, str], *, nnodes: int, restart: int) -> str | None:
    """Outside a gang, the id of a torchrun start on one node: its ranks are children of one agent, so
    the agent's pid and start time (which no later process shares) with torchrun's restart count name
    the start. None elsewhere (several nodes' agents, or no agent): each process then chooses alone."""
    if not env.get(wenv.RUN_ID) or nnodes != 1:
        return None
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/stat", "rb") as f:
            started = f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None
    return f"torchrun-{ppid}-{started}-{restart}"


def _standalone_checkpoint(path: str, default: str | None, *, rank: int, world: int, restart: int,
                           start: str | None = None) -> Checkpoint | None:
    """Outside a gang: GANGRUN_CHECKPOINT_PATH (a root, or a ``<root>/attempt-<N>`` folder) or
    `default`, attempt 1 unless the path names another. Its first load or save says where it is."""
    root = path or default
    if not root:
        return None
    if "://" not in root:
        root = os.path.abspath(root)
    split = split_attempt_path(root)
    root, attempt = split if split is not None else (root, 1)
    ckpt = Checkpoint(root, attempt=attempt, rank=rank, world_size=world, restart_attempt=restart, start=start)
    how = "GANGRUN_CHECKPOINT_PATH" if path else "set GANGRUN_CHECKPOINT_PATH to choose another place"
    ckpt._where = f"gangrun: not in a gangrun task: checkpoints go to {root} ({how})"
    return ckpt
