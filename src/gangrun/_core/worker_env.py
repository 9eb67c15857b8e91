"""The worker environment contract: the one place that says which variables a worker sees, and their values.

Both backends build a worker's environment here, so the same script sees the same variables on
either. The contract splits in two, because on Kubernetes part of it is only known inside the pod:

    gang_env(...)     the same for every worker of the gang: task, attempt, sizes, rendezvous address,
                      checkpoint locations, stop notice and events files, grace period
    process_env(...)  one worker process: its node rank (the pod's completion index on Kubernetes),
                      local rank, the gang's restart round, the start's id, and what follows from
                      them (RANK, GROUP_RANK, TORCHELASTIC_RUN_ID)
    worker_env(...)   both, with concrete values: what the local backend gives each process

The Kubernetes renderer writes `gang_env` into the pod template as literal values and points
NODE_RANK and JOBSET_RESTART_ATTEMPT at the pod's own annotations; `gangrun.launch`, the first
process of every worker pod, then calls `process_env` with those, so the rules for the derived
variables exist once. With nprocPerNode > 1 the launcher runs torchrun, which derives the same
per-process values by the same rules (RANK = NODE_RANK × NPROC_PER_NODE + LOCAL_RANK).

`submitter_env(environ)` is what a local task keeps of the environment of the client that submitted it:
the base its workers start from (see docs/local-backend.md, "The workers' environment").

`user_env(spec)` is the user's own variables (spec.env, then the podTemplate worker container's plain
`env` values), which never share a name with the contract (the manifest refuses that).

Outside a gang (plain `python`, or torchrun on its own) a script has no checkpoint root from a
backend: `standalone_checkpoint_root` names the folder its checkpoints go to instead.
"""

from __future__ import annotations

import posixpath
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the spec imports this module for the reserved names
    from gangrun._core.spec import TaskSpec

# -- names ------------------------------------------------------------------------------------------

GANGRUN_TASK = "GANGRUN_TASK"
GANGRUN_ATTEMPT = "GANGRUN_ATTEMPT"
GANGRUN_GANG = "GANGRUN_GANG"  # the gang's name (the JobSet's on Kubernetes): half of the rendezvous id
NNODES = "NNODES"
NPROC_PER_NODE = "NPROC_PER_NODE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
WORLD_SIZE = "WORLD_SIZE"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
CHECKPOINT_PATH = "GANGRUN_CHECKPOINT_PATH"
PREV_CHECKPOINT_PATH = "GANGRUN_PREV_CHECKPOINT_PATH"
RESUME_FROM = "GANGRUN_RESUME_FROM"  # spec.checkpoint.resumeFrom as a URI: loaded when the task has nothing of its own
STOP_FILE = "GANGRUN_STOP_FILE"
EVENTS_FILE = "GANGRUN_EVENTS_FILE"
# The `type` of each line the SDK appends to EVENTS_FILE (gangrun._ckpt.events writes them; the local
# backend reads the file, a pod's launcher folds the lines into its report, gangrun._checkpoint_report).
EVENT_COMMITTED, EVENT_FIRST_STEP, EVENT_RESUME = "checkpoint_committed", "first_step", "resume_from"
GRACE_PERIOD = "GANGRUN_GRACE_PERIOD"
DEFAULT_GRACE_SECONDS = 30  # spec.terminationGracePeriod when unset, and what a worker assumes without the variable

NODE_RANK = "NODE_RANK"
GROUP_RANK = "GROUP_RANK"
RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
RESTART_ATTEMPT = "JOBSET_RESTART_ATTEMPT"
RUN_ID = "TORCHELASTIC_RUN_ID"
# One start of the gang (an admission, a readmission, a restart): the same on every worker of that start
# and new at the next. Every rank loads the checkpoint rank 0 chose for it (gangrun._ckpt.resume_point).
GANGRUN_START = "GANGRUN_START"
# torchrun's own, read by the SDK when a script runs under torchrun outside a gang (torchrun sets
# them inside a gang too, to the same values as gangrun's NNODES and JOBSET_RESTART_ATTEMPT).
GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE"
TORCHELASTIC_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"  # local only: Kubernetes' device plugin picks the GPUs
POD_NAMESPACE = "POD_NAMESPACE"  # Kubernetes only, from the downward API
TERMINATION_LOG = "GANGRUN_TERMINATION_LOG"  # Kubernetes only: where the launcher leaves the newest checkpoint
REPORT_PORT = "GANGRUN_REPORT_PORT"  # Kubernetes only: where the launcher serves it while the worker runs
# Kubernetes only: the pod's stop-notice annotation as a file, which the launcher merges into STOP_FILE
# with the notices the controller POSTs to NOTICE_PATH on REPORT_PORT
STOP_ANNOTATION_FILE = "GANGRUN_STOP_ANNOTATION_FILE"
NOTICE_PATH = "/stop-notice"
# Kubernetes only, with failurePolicy.restartStrategy InPlace: how long (seconds) a failed worker's launcher
# waits for the controller's order to restart in place (POST RESTART_PATH) before it ends its pod; GET
# READY_PATH is the pod's readiness probe (503 while it waits), GET ROUND_PATH its round and failure
IN_PLACE_WAIT = "GANGRUN_IN_PLACE_WAIT"
READY_PATH, ROUND_PATH, RESTART_PATH = "/ready", "/round", "/restart"
# With InPlace, a launcher stopped by SIGTERM (its pod deleted) exits LOST_EXIT, which the Job's
# podFailurePolicy ignores: the Job replaces that one pod, and the gang restarts in place around it.
# REPLACED (the Job's count of such ignored failures of this index, from the pod's annotation) > 0 tells
# the replacement's launcher to wait for the controller's order of the round to join.
LOST_EXIT = 75  # EX_TEMPFAIL
REPLACED = "GANGRUN_REPLACED"

GANG_VARS = (GANGRUN_TASK, GANGRUN_ATTEMPT, GANGRUN_GANG, NNODES, NPROC_PER_NODE, LOCAL_WORLD_SIZE, WORLD_SIZE,
             MASTER_ADDR, MASTER_PORT, CHECKPOINT_PATH, PREV_CHECKPOINT_PATH, RESUME_FROM, STOP_FILE, EVENTS_FILE,
             GRACE_PERIOD)
PROCESS_VARS = (NODE_RANK, GROUP_RANK, RANK, LOCAL_RANK, RESTART_ATTEMPT, RUN_ID, GANGRUN_START)
# Names no manifest may set: gangrun gives them to every worker. CUDA_VISIBLE_DEVICES is not among
# them: a gang without GPUs keeps whatever the user sets.
RESERVED = frozenset(GANG_VARS + PROCESS_VARS + (POD_NAMESPACE, TERMINATION_LOG, REPORT_PORT, STOP_ANNOTATION_FILE,
                                                IN_PLACE_WAIT, REPLACED))

DEFAULT_MASTER_PORT = 29500


# -- values -----------------------------------------------------------------------------------------


def grace_seconds(spec: TaskSpec) -> str:
    """The grace period as the SDK reads it: seconds, without a needless `.0`."""
    return f"{spec.termination_grace.total_seconds():g}"


def gang_env(spec: TaskSpec, *, attempt: int, gang: str, master_addr: str, master_port: int | None,
             checkpoint_path: str, prev_checkpoint_path: str, stop_file: str, events_file: str,
             resume_from: str = "") -> dict[str, str]:
    """The variables every worker of the gang shares. `master_port` None: set per round (local).
    `resume_from`: spec.checkpoint.resumeFrom resolved to a URI (`checkpoint_root.resume_source`)."""
    env = {
        GANGRUN_TASK: spec.name,
        GANGRUN_ATTEMPT: str(attempt),
        GANGRUN_GANG: gang,
        NNODES: str(spec.nodes),
        NPROC_PER_NODE: str(spec.nproc_per_node),
        LOCAL_WORLD_SIZE: str(spec.nproc_per_node),
        WORLD_SIZE: str(spec.world_size),
        MASTER_ADDR: master_addr,
        **({MASTER_PORT: str(master_port)} if master_port is not None else {}),
        CHECKPOINT_PATH: checkpoint_path,
        PREV_CHECKPOINT_PATH: prev_checkpoint_path,
        **({RESUME_FROM: resume_from} if resume_from else {}),
        STOP_FILE: stop_file,
        EVENTS_FILE: events_file,
        GRACE_PERIOD: grace_seconds(spec),
    }
    return env


def run_id(gang: str, restart_attempt: int) -> str:
    """The rendezvous id of one restart round: a restarted gang never joins the previous round's."""
    return f"{gang}-{restart_attempt}"


def new_start() -> str:
    """A fresh id for one start of a gang (GANGRUN_START): minted once per start, by the local
    backend for every worker, on Kubernetes by the first node's launcher for the others."""
    return secrets.token_hex(6)


def process_env(*, nproc_per_node: int, node_rank: int, local_rank: int, restart_attempt: int,
                gang: str, start: str) -> dict[str, str]:
    """The variables of one worker process (torchrun's names and rules). `start`: this start's id."""
    return {
        NODE_RANK: str(node_rank),
        GROUP_RANK: str(node_rank),
        RANK: str(node_rank * nproc_per_node + local_rank),
        LOCAL_RANK: str(local_rank),
        RESTART_ATTEMPT: str(restart_attempt),
        RUN_ID: run_id(gang, restart_attempt),
        **({GANGRUN_START: start} if start else {}),
    }


def node_env(*, node_rank: int, restart_attempt: int, gang: str, start: str) -> dict[str, str]:
    """The per-node part alone, for a node whose processes torchrun starts (it sets RANK and LOCAL_RANK)."""
    env = process_env(nproc_per_node=1, node_rank=node_rank, local_rank=0, restart_attempt=restart_attempt, gang=gang,
                      start=start)
    del env[RANK], env[LOCAL_RANK]
    return env


def worker_env(spec: TaskSpec, *, attempt: int, gang: str, node_rank: int, local_rank: int, restart_attempt: int,
               master_addr: str, master_port: int, checkpoint_path: str, prev_checkpoint_path: str, stop_file: str,
               events_file: str, gpus: Sequence[int] | None = None, resume_from: str = "",
               start: str = "") -> dict[str, str]:
    """The whole contract for one process, with concrete values. `gpus`: this node's GPU indices
    (local backend; see `gangrun._core.gpus`), None to leave CUDA_VISIBLE_DEVICES alone."""
    env = gang_env(spec, attempt=attempt, gang=gang, master_addr=master_addr, master_port=master_port,
                   checkpoint_path=checkpoint_path, prev_checkpoint_path=prev_checkpoint_path, stop_file=stop_file,
                   events_file=events_file, resume_from=resume_from)
    env.update(process_env(nproc_per_node=spec.nproc_per_node, node_rank=node_rank, local_rank=local_rank,
                           restart_attempt=restart_attempt, gang=gang, start=start))
    if gpus is not None:
        env[CUDA_VISIBLE_DEVICES] = ",".join(str(g) for g in gpus)  # gangrun._core.gpus assigns them
    return env


def user_env(spec: TaskSpec) -> dict[str, str]:
    """The user's own variables that apply on both backends: spec.env, then the worker container's
    plain `env` values of spec.podTemplate (a `valueFrom` needs a cluster; see `local_ignored`)."""
    from gangrun._core.pod_merge import worker_plain_env

    return {**spec.env, **worker_plain_env(spec.pod_template)}


def submitter_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a local task keeps of its submitter's environment: every variable except gangrun's own (the
    contract's names and any `GANGRUN_*`), which gangrun sets for each worker and which, captured from a
    shell that is itself a worker, would be another gang's values."""
    return {k: v for k, v in environ.items() if k not in RESERVED and not k.startswith("GANGRUN_")}


# -- outside a gang -----------------------------------------------------------------------------------

#: Where a script run outside a gang keeps its checkpoints, under the folder it runs in.
STANDALONE_CHECKPOINTS = ".gangrun/checkpoints"


def script_name(argv0: str) -> str:
    """The name a script goes by: ``train.py`` -> ``train``; a package run with ``-m`` by its folder's
    name (``pkg/__main__.py`` -> ``pkg``); ``python -c``, the interactive prompt and odd characters
    give ``python`` or a cleaned name, so the result is always a plain folder name."""
    if argv0 in ("", "-", "-c", "-m"):
        return "python"
    path = argv0.replace("\\", "/").rstrip("/")
    base = posixpath.basename(path)
    stem = base[:-3] if base.endswith(".py") else base
    if stem == "__main__":
        stem = posixpath.basename(posixpath.dirname(path))
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-")
    return stem or "python"


def standalone_checkpoint_root(cwd: str, argv0: str) -> str:
    """The checkpoint root of a script run outside a gang: ``<cwd>/.gangrun/checkpoints/<script name>``.
    The same script run again in the same folder finds its earlier runs' checkpoints there."""
    return posixpath.join(cwd, STANDALONE_CHECKPOINTS, script_name(argv0))
