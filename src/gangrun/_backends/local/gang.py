"""Process gangs with JobSet's semantics: the local twin of one attempt's JobSet.

A gang is `nodes × nprocPerNode` worker processes, laid out as Flyte lays out its JobSet: one
replicated job `workers` whose pods are the nodes. The rules, as JobSet applies them:

- created suspended (Kueue's webhook does that); `resume()` once admitted starts every worker together
  with a fresh MASTER_PORT; `suspend()` stops them all (SIGTERM with a stop notice, SIGKILL at the
  deadline) and exits seen while suspended are not failures (B4: Kueue deletes pods, it does not
  fail them);
- a non-zero exit while running: if `restarts < maxRestarts`, `RestartingJobSet=True`, restarts + 1,
  the others are stopped and the whole gang starts again when they are gone; otherwise
  `Failed=True/ReachedMaxRestarts` (a failurePolicy is always set, as the Kubernetes backend does);
- `Completed=True/AllJobsCompleted` when every worker exited 0.

The twin holds only plain values (persisted as JSON); the daemon owns the live processes and gives
`resume()` a `spawn` callable. `observe()` turns the twin into the engine's `Gang`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from gangrun._backends.local import launcher
from gangrun._backends.local.workload import condition_from_json, condition_json
from gangrun._core import jobset
from gangrun._core.conditions import FALSE, TRUE, Condition, find_condition, set_condition
from gangrun._core.observation import Gang

# Why the workers of a gang are being stopped; what happens when the last one is gone.
SUSPEND, RESTART, FAIL, DELETE = "suspend", "restart", "fail", "delete"


@dataclass(kw_only=True)
class Worker:
    rank: int
    node: int
    local_rank: int
    pid: int = 0  # also its process group id
    started: int = 0  # /proc start time, to recognise the process after a daemon restart
    running: bool = False
    exit_code: int | None = None
    exited_at: float | None = None


@dataclass(frozen=True, kw_only=True)
class Launch:
    """Everything needed to start the workers of one (task, attempt): built by the daemon from the spec."""

    argv: list[str]
    cwd: str
    env: dict[str, str]  # base env: the daemon's, the spec's and the attempt-wide gangrun variables
    logs: Any  # Path of logs/<task>/attempt-<N>
    max_restarts: int
    grace: float


Spawn = Callable[["GangTwin", Worker, Launch, dict[str, str]], tuple[int, int]]  # → (pid, start time)


@dataclass(kw_only=True)
class GangTwin:
    task: str
    attempt: int
    nodes: int
    nproc: int
    suspended: bool = True
    conditions: list[Condition] = field(default_factory=list)
    restarts: int = 0
    workers: list[Worker] = field(default_factory=list)
    stopping: str = ""
    kill_at: float | None = None
    port: int = 0
    first_failure: str = ""
    pending_failure: str = ""
    up_since: float | None = None  # all workers of the current round running since: work lost counts from here
    lost: bool = False  # its workers vanished with an earlier daemon

    def __post_init__(self) -> None:
        if not self.workers:
            self.workers = [Worker(rank=n * self.nproc + i, node=n, local_rank=i)
                            for n in range(self.nodes) for i in range(self.nproc)]

    @property
    def name(self) -> str:
        return f"{self.task}-a{self.attempt}"

    @property
    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.running]

    @property
    def completed(self) -> bool:
        return self._is(jobset.COMPLETED)

    @property
    def failed(self) -> bool:
        return self._is(jobset.FAILED)

    def _is(self, type_: str) -> bool:
        cond = find_condition(self.conditions, type_)
        return cond is not None and cond.is_true

    def _set(self, type_: str, status: str, reason: str, message: str, now: datetime) -> bool:
        return set_condition(self.conditions, Condition(type=type_, status=status, reason=reason, message=message),
                             now=now)

    def job_name(self, node: int) -> str:
        return f"{self.name}-workers-{node}"

    # -- JobSet controller ---------------------------------------------------------------------------

    def resume(self, launch: Launch, spawn: Spawn, *, now: datetime) -> bool:
        """Admitted: unsuspend and start every worker of the current restart round."""
        if self.live or self.completed or self.failed or self.stopping:
            return False
        self.suspended = False
        self._set(jobset.SUSPENDED, FALSE, jobset.RESUME_JOBS, jobset.MSG_RESUMED, now)
        self._start_round(launch, spawn)
        return True

    def _start_round(self, launch: Launch, spawn: Spawn) -> None:
        self.port = launcher.free_port()
        self.first_failure = ""
        for w in self.workers:
            w.running, w.exit_code, w.exited_at, w.pid = False, None, None, 0
        for w in self.workers:
            env = dict(launch.env)
            env.update({"JOBSET_RESTART_ATTEMPT": str(self.restarts), "NODE_RANK": str(w.node),
                        "RANK": str(w.rank), "LOCAL_RANK": str(w.local_rank), "GROUP_RANK": str(w.node),
                        "MASTER_PORT": str(self.port)})
            try:
                w.pid, w.started = spawn(self, w, launch, env)
            except OSError as e:  # the command cannot be started at all: a worker that can never start
                self.pending_failure = f"rank {w.rank} cannot start {launch.argv[0]!r}: {e.strerror or e}"
                break
            w.running = True
        if self.pending_failure:
            self.stop(FAIL, launch.grace, notice=None)
        elif all(w.running for w in self.workers):
            self.up_since = time.time()

    def suspend(self, grace: float, notice: Callable[[float], None], *, now: datetime) -> bool:
        """Kueue took the gang back (W2): suspended, every worker told why and stopped."""
        if self.suspended and self.stopping in (SUSPEND, DELETE):
            return False
        self.suspended = True
        self._set(jobset.SUSPENDED, TRUE, jobset.SUSPENDED_JOBS, jobset.MSG_SUSPENDED, now)
        if self._is(jobset.RESTARTING):
            self._set(jobset.RESTARTING, FALSE, jobset.JOBSET_SUSPENDED, jobset.MSG_SUSPENDED, now)
        if self.stopping != DELETE:
            self.stop(SUSPEND, grace, notice=notice)
        return True

    def stop(self, why: str, grace: float, *, notice: Callable[[float], None] | None) -> None:
        """SIGTERM every live worker (after the stop notice) and SIGKILL them at the deadline."""
        self.stopping = why
        self.up_since = None
        if not self.live:
            return
        deadline = time.time() + grace
        if notice is not None:
            notice(deadline)
        if self.kill_at is None or deadline < self.kill_at:
            self.kill_at = deadline
        for w in self.live:
            launcher.signal_group(w.pid, 15)

    def kill_overdue(self, now_ts: float) -> bool:
        if self.kill_at is None or now_ts < self.kill_at or not self.live:
            return False
        for w in self.live:
            launcher.signal_group(w.pid, 9)
        return True

    def exited(self, rank: int, code: int, launch: Launch | None, spawn: Spawn, *, now: datetime) -> None:
        """One worker exited with `code`: JobSet's failure policy, or the end of a stop."""
        w = self.workers[rank]
        w.running, w.exit_code, w.exited_at = False, code, time.time()
        if self.stopping:
            if not self.live:
                self._stopped(launch, spawn, now=now)
            return
        if code != 0:
            job = self.job_name(w.node)
            self.first_failure = f"worker rank {w.rank} (node {w.node}) exited with code {code}"
            if self.restarts < (launch.max_restarts if launch else 0):
                self.restarts += 1  # JobSet counts the restart when it decides it
                self._set(jobset.RESTARTING, TRUE, jobset.DEFAULT_FAILURE_POLICY, jobset.restarting_message(job), now)
                self.stop(RESTART, launch.grace if launch else 0, notice=None)
            else:
                self._set(jobset.FAILED, TRUE, jobset.REACHED_MAX_RESTARTS, jobset.reached_max_restarts_message(job),
                          now)
                self.stop(FAIL, launch.grace if launch else 0, notice=None)
            if not self.live:
                self._stopped(launch, spawn, now=now)
            return
        if all(x.exit_code == 0 for x in self.workers):
            self.up_since = None
            self._set(jobset.COMPLETED, TRUE, jobset.ALL_JOBS_COMPLETED, jobset.MSG_COMPLETED, now)

    def _stopped(self, launch: Launch | None, spawn: Spawn, *, now: datetime) -> None:
        """The last worker of a stop is gone."""
        why, self.stopping, self.kill_at = self.stopping, "", None
        if why == RESTART and not self.suspended and launch is not None:
            self._start_round(launch, spawn)
            if not self.pending_failure:
                self._set(jobset.RESTARTING, FALSE, jobset.JOBS_READY, jobset.MSG_JOBS_READY, now)
        elif why == DELETE:
            self.stopping = DELETE  # stays deleted

    # -- views ---------------------------------------------------------------------------------------

    def observe(self) -> Gang:
        launched = [w for w in self.workers if w.running or w.exit_code is not None]
        n = len(self.workers)
        running = len(self.live)
        round_failed = any(w.exit_code not in (None, 0) for w in self.workers) and not self.suspended
        return Gang(
            suspended=self.suspended,
            conditions=tuple(self.conditions),
            restarts=self.restarts,
            restarts_count_towards_max=self.restarts,
            expected_workers=n,
            scheduled_workers=0 if self.suspended else len(launched),
            ready_workers=0 if self.suspended else running + sum(1 for w in self.workers if w.exit_code == 0),
            jobs_ready=1 if not self.suspended and not self.stopping and running == n else 0,
            jobs_succeeded=1 if self.completed else 0,
            jobs_failed=1 if round_failed else 0,
            first_failure=self.first_failure,
            pending_failure=self.pending_failure,
        )

    def for_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["conditions"] = [condition_json(c) for c in self.conditions]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GangTwin:
        d = dict(d)
        d["workers"] = [Worker(**w) for w in d["workers"]]
        d["conditions"] = [condition_from_json(c) for c in d["conditions"]]
        return cls(**d)
