"""What the workers of one (task, attempt) are started with: the local counterpart of rendering a JobSet.

`launch(...)` gives the argv, working directory and attempt-wide environment; `worker_env(...)` adds
what differs per worker and per restart round (INTERFACE.md, "Inside a worker").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gangrun._backends.local.config import Paths
from gangrun._backends.local.gang import GangTwin, Worker
from gangrun._core.spec import TaskSpec


@dataclass(frozen=True, kw_only=True)
class Launch:
    argv: list[str]
    cwd: str
    env: dict[str, str]  # the daemon's, the spec's and the attempt-wide gangrun variables
    logs: Path  # logs/<task>/attempt-<N>


def launch(name: str, spec: TaskSpec, attempt: int, *, cwd: str, paths: Paths) -> Launch:
    root = paths.checkpoint_root(name, spec.checkpoint_uri)
    run = paths.run(name, attempt)
    env = dict(os.environ)
    env.update(spec.env)
    env.update({
        "GANGRUN_TASK": name, "GANGRUN_ATTEMPT": str(attempt), "GANGRUN_BACKEND": "local",
        "GANGRUN_HOME": str(paths.home), "NNODES": str(spec.nodes), "NPROC_PER_NODE": str(spec.nproc_per_node),
        "WORLD_SIZE": str(spec.world_size), "LOCAL_WORLD_SIZE": str(spec.nproc_per_node),
        "MASTER_ADDR": "127.0.0.1",
        "GANGRUN_CHECKPOINT_PATH": f"{root}/attempt-{attempt}",
        "GANGRUN_PREV_CHECKPOINT_PATH": f"{root}/attempt-{attempt - 1}" if attempt > 1 else "",
        "GANGRUN_STOP_FILE": str(run / "stop.json"), "GANGRUN_EVENTS_FILE": str(run / "events.jsonl"),
        "GANGRUN_GRACE_PERIOD": f"{spec.termination_grace.total_seconds():g}",
    })
    env.setdefault("PYTHONUNBUFFERED", "1")  # worker output reaches its log as it is printed
    return Launch(argv=list(spec.command), cwd=cwd or os.getcwd(), env=env, logs=paths.logs(name, attempt))


def worker_env(launch: Launch, gang: GangTwin, worker: Worker) -> dict[str, str]:
    env = dict(launch.env)
    env.update({"JOBSET_RESTART_ATTEMPT": str(gang.restarts), "NODE_RANK": str(worker.node),
                "RANK": str(worker.rank), "LOCAL_RANK": str(worker.local_rank), "GROUP_RANK": str(worker.node),
                "MASTER_PORT": str(gang.port)})
    return env


def log_path(launch: Launch, gang: GangTwin, worker: Worker) -> Path:
    return launch.logs / f"restart-{gang.restarts}" / f"rank-{worker.rank}.log"
