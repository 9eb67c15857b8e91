"""What the workers of one (task, attempt) are started with: the local counterpart of rendering a JobSet.

`launch(...)` gives the argv, working directory and the environment every worker of the gang shares
(the submitting client's, captured at submit; the user's `spec.env` over it; the gang's part of the
worker contract, `gangrun._core.worker_env`, over that: nothing of the daemon's own environment);
`worker_env(...)` adds what differs per worker and per restart round: its ranks, the round's
MASTER_PORT and start id (each start of the gang is a round: an admission, a readmission, a restart)
and, for a gang with GPUs, its node's CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gangrun._backends.local.config import Paths
from gangrun._backends.local.gang import GangTwin, Worker, gang_name
from gangrun._core import worker_env as contract
from gangrun._core.checkpoint_root import attempt_path, resume_source
from gangrun._core.spec import TaskSpec

MASTER_ADDR = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class Launch:
    argv: list[str]
    cwd: str
    env: dict[str, str]  # the submitter's, the user's and the gang's part of the contract
    logs: Path  # logs/<task>/attempt-<N>
    nproc_per_node: int = 1
    gpus: tuple[tuple[int, ...], ...] = ()  # per node, the GPUs the gang was admitted with (none: not set)


def launch(name: str, identity: str, spec: TaskSpec, attempt: int, *, cwd: str, paths: Paths,
           submitter_env: dict[str, str] | None, executable: str | None = None,
           gpus: Sequence[Sequence[int]] = ()) -> Launch:
    """`identity`: the task's id (its checkpoints, logs and run files are keyed by it); `submitter_env`:
    the environment captured at submit (None only for a task stored by a gangrun that captured none,
    which keeps the daemon's); `executable`: the command's argv[0] as resolved at submit."""
    root = paths.checkpoint_root(name, identity, spec.checkpoint_uri)
    run = paths.run(name, identity, attempt)
    env = dict(os.environ) if submitter_env is None else dict(submitter_env)
    env.update(contract.user_env(spec))
    env.update(contract.gang_env(
        spec, attempt=attempt, gang=gang_name(name, attempt), master_addr=MASTER_ADDR, master_port=None,
        checkpoint_path=attempt_path(root, attempt), prev_checkpoint_path=attempt_path(root, attempt - 1),
        stop_file=str(run / "stop.json"), events_file=str(run / "events.jsonl"),
        resume_from=resume_source(spec.resume_from, paths.checkpoint_base(spec.checkpoint_uri))))
    env.update({"GANGRUN_BACKEND": "local", "GANGRUN_HOME": str(paths.home)})
    env.setdefault("PYTHONUNBUFFERED", "1")  # worker output reaches its log as it is printed
    argv = [executable or spec.command[0], *spec.command[1:]]
    return Launch(argv=argv, cwd=cwd or os.getcwd(), env=env, logs=paths.logs(name, identity, attempt),
                  nproc_per_node=spec.nproc_per_node, gpus=tuple(tuple(n) for n in gpus))


def resolve_executable(command: str, *, path: str | None, cwd: str) -> str | None:
    """The program `command` (a manifest's argv[0]) names: a path (with a `/`) relative to the task's
    working directory, else the first executable match on `path` (the submitter's PATH), as the shell
    finds it; None when there is none (the workers then fail to start, and say so)."""
    if "/" in command:
        found = os.path.join(cwd, command)
        return os.path.abspath(found) if os.path.isfile(found) and os.access(found, os.X_OK) else None
    hit = shutil.which(command, path=path if path is not None else os.defpath)
    return os.path.abspath(hit) if hit else None


def worker_env(launch: Launch, gang: GangTwin, worker: Worker, *, start: str) -> dict[str, str]:
    """`start`: the id of the round being started (`contract.new_start`), the same for all its workers."""
    env = dict(launch.env)
    env.update(contract.process_env(nproc_per_node=launch.nproc_per_node, node_rank=worker.node,
                                    local_rank=worker.local_rank, restart_attempt=gang.restarts, gang=gang.name,
                                    start=start))
    env[contract.MASTER_PORT] = str(gang.port)
    if launch.gpus:
        env[contract.CUDA_VISIBLE_DEVICES] = ",".join(str(g) for g in launch.gpus[worker.node])
    return env


def log_path(launch: Launch, gang: GangTwin, worker: Worker) -> Path:
    return launch.logs / f"restart-{gang.restarts}" / f"rank-{worker.rank}.log"
