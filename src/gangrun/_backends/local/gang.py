"""The local twin of one attempt's JobSet: a gang of worker processes with JobSet's semantics.

A gang is `nodes × nprocPerNode` workers laid out as the Kubernetes backend lays out its JobSet: one
replicated job `workers` whose pods are the nodes. The rules, as JobSet applies them:

- created suspended (Kueue's webhook does that); `resume()` once admitted starts every worker of a
  round together; `suspend()` stops them all (stop notice, SIGTERM, SIGKILL at the deadline) and
  exits seen during a stop are never failures (B4: Kueue deletes pods, it does not fail them);
- a non-zero exit while running: if `restarts < maxRestarts`, `RestartingJobSet=True`, restarts + 1,
  the others are stopped and the whole gang starts again once they are gone; otherwise
  `Failed=True/ReachedMaxRestarts`;
- a worker lost to its node (`disrupt()`, as a drained or reclaimed node kills its pods) restarts the
  gang without counting towards maxRestarts (`restarts_count_towards_max` stays), as JobSet's
  `RestartJobSetAndIgnoreMaxRestarts` does for a Job failed by a DisruptionTarget pod; its peers get
  a stop notice with cause `NodeDisruption` (with `restartOnDisruption: false` it is a plain failure);
- `Completed=True/AllJobsCompleted` when every worker exited 0;
- an elastic gang changes size (`gangrun._core.elastic`): readmitted at another size, its next round
  has that many nodes; grown while running, it is stopped (stop notice cause `Resize`) and starts
  again at the new size in the same attempt. A resize is a restart (a new rendezvous) that counts
  towards no budget: `resizes` says how many of `restarts` were resizes.

The twin is a plain value persisted as JSON (`gang_storage.py`). It never touches a process or reads
a clock: every transition takes `now` and returns the `Effect`s the shell carries out (start a round,
signal process groups, write the stop notice). `observe()` is the engine's `Gang`.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from gangrun._core import jobset, stop_causes
from gangrun._core.conditions import FALSE, TRUE, Condition, find_condition, set_condition
from gangrun._core.elastic import RESIZE
from gangrun._core.observation import Disruption, Gang


class StopReason(StrEnum):
    """Why the workers of a gang are being stopped, which says what happens once the last is gone."""

    SUSPEND = "Suspend"  # Kueue took the gang back: it waits, suspended, for re-admission
    RESTART = "Restart"  # a whole-gang restart: the next round starts
    FAIL = "Fail"  # the JobSet failed: nothing starts again
    DELETE = "Delete"  # the attempt ended (or the task was cancelled): the gang is gone for good
    RESIZE = "Resize"  # an elastic gang stops at a checkpoint to start again at another size


@dataclass(frozen=True)
class StartRound:
    """Start every worker of the gang's current restart round (the shell picks the port and spawns)."""


@dataclass(frozen=True)
class Signal:
    pgids: tuple[int, ...]
    signal: int


@dataclass(frozen=True)
class WriteNotice:
    """The stop notice (B3) the workers read before SIGTERM: why, and by when they must be gone."""

    cause: str
    message: str
    deadline: datetime


Effect = StartRound | Signal | WriteNotice
NODE_DISRUPTION = stop_causes.NODE_DISRUPTION  # the stop notice's cause for the peers of a worker lost to its node
DISRUPTION_REASON = "EvictionByEvictionAPI"  # the DisruptionTarget reason of a drained node's pods


def gang_name(task: str, attempt: int) -> str:
    """The gang of attempt N is `<task>-a<N>` (the JobSet of attempt N is named alike on Kubernetes)."""
    return f"{task}-a{attempt}"


@dataclass(kw_only=True)
class Worker:
    rank: int
    node: int
    local_rank: int
    pid: int = 0  # also its process group id
    started: int = 0  # /proc start time, to recognise the process after a daemon restart
    running: bool = False
    exit_code: int | None = None


@dataclass(kw_only=True)
class GangTwin:
    task: str
    attempt: int
    nodes: int
    nproc: int
    max_restarts: int = 0
    restart_on_disruption: bool = True  # failurePolicy.restartOnDisruption: a lost node's restart is not counted
    suspended: bool = True
    conditions: list[Condition] = field(default_factory=list)
    restarts: int = 0
    restarts_count_towards_max: int = 0
    workers: list[Worker] = field(default_factory=list)
    stopping: StopReason | None = None
    kill_at: datetime | None = None
    port: int = 0
    first_failure: str = ""
    pending_failure: str = ""
    disruption: Disruption | None = None  # the newest worker lost to its node, and the round it was in
    disrupted_node: int = -1  # the node it ran on
    lost: bool = False  # its workers vanished with an earlier daemon
    lost_why: str = ""  # how (recovery.STOPPED_BY_DOWN, ...), for the attempt's reason
    events_offset: int = 0  # how far the SDK's checkpoint events file of this attempt has been read
    resizes: int = 0  # restarts that were resizes of an elastic gang (counted towards nothing)
    resize_to: int = 0  # the size a stop for a resize restarts at
    generation: int = field(default=0, compare=False)  # bumped by every change: the shell persists on a bump

    def __post_init__(self) -> None:
        if not self.workers:
            self._lay_out(self.nodes)
        if not self.conditions:
            self.conditions.append(Condition(type=jobset.SUSPENDED, status=TRUE, reason=jobset.SUSPENDED_JOBS,
                                             message=jobset.MSG_SUSPENDED))

    @property
    def name(self) -> str:
        return gang_name(self.task, self.attempt)

    @property
    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.running]

    @property
    def completed(self) -> bool:
        return self._is(jobset.COMPLETED)

    @property
    def failed(self) -> bool:
        return self._is(jobset.FAILED)

    @property
    def deleted(self) -> bool:
        return self.stopping is StopReason.DELETE

    @property
    def size(self) -> int:
        """The nodes it runs at, or is stopping to restart at."""
        return self.resize_to if self.stopping is StopReason.RESIZE else self.nodes

    @property
    def up(self) -> bool:
        """Every worker of the current round is running and nothing is stopping them."""
        return not self.suspended and self.stopping is None and all(w.running for w in self.workers)

    def _lay_out(self, nodes: int) -> None:
        self.nodes = nodes
        self.workers = [Worker(rank=n * self.nproc + i, node=n, local_rank=i)
                        for n in range(nodes) for i in range(self.nproc)]

    def job_name(self, node: int) -> str:
        return f"{self.name}-workers-{node}"

    def _is(self, type_: str) -> bool:
        cond = find_condition(self.conditions, type_)
        return cond is not None and cond.is_true

    def _set(self, type_: str, status: str, reason: str, message: str, now: datetime) -> bool:
        cond = Condition(type=type_, status=status, reason=reason, message=message)
        return set_condition(self.conditions, cond, now=now)

    def touch(self) -> None:
        """Record that the twin changed (every transition that changes it calls this)."""
        self.generation += 1

    # -- JobSet controller ---------------------------------------------------------------------------

    def resume(self, *, now: datetime, nodes: int | None = None) -> list[Effect]:
        """Admitted: unsuspend and start every worker of the current restart round (on `nodes` nodes, the
        size an elastic gang was admitted at)."""
        if self.live or self.completed or self.failed or self.stopping is not None:
            return []
        self.touch()
        if nodes is not None and nodes != self.nodes:
            self._lay_out(nodes)
        self.suspended = False
        self._set(jobset.SUSPENDED, FALSE, jobset.RESUME_JOBS, jobset.MSG_RESUMED, now)
        return self._new_round()

    def _new_round(self) -> list[Effect]:
        self.first_failure = ""
        for w in self.workers:
            w.running, w.exit_code, w.pid, w.started = False, None, 0, 0
        return [StartRound()]

    def round_started(self, port: int, started: dict[int, tuple[int, int]], *, cannot_start: str,
                      grace: timedelta, now: datetime) -> list[Effect]:
        """The shell started the round: `started` maps rank → (pid, start time); `cannot_start` says why
        the rest could not be (a worker that can never start, e.g. a missing executable)."""
        self.touch()
        self.port = port
        for rank, (pid, start) in started.items():
            w = self.workers[rank]
            w.pid, w.started, w.running = pid, start, True
        if cannot_start:
            self.pending_failure = cannot_start
            return self.stop(StopReason.FAIL, grace=grace, now=now)
        return []

    def suspend(self, *, cause: str, message: str, grace: timedelta, now: datetime) -> list[Effect]:
        """Kueue took the gang back: suspended, every worker told why and stopped."""
        if self.suspended and self.stopping in (StopReason.SUSPEND, StopReason.DELETE):
            return []
        self.touch()
        self.suspended = True
        self._set(jobset.SUSPENDED, TRUE, jobset.SUSPENDED_JOBS, jobset.MSG_SUSPENDED, now)
        if self._is(jobset.RESTARTING):
            self._set(jobset.RESTARTING, FALSE, jobset.JOBSET_SUSPENDED, jobset.MSG_SUSPENDED, now)
        if self.stopping is StopReason.DELETE:
            return []
        return self.stop(StopReason.SUSPEND, grace=grace, now=now, notice=(cause, message))

    def resize(self, nodes: int, *, message: str, grace: timedelta, now: datetime) -> list[Effect]:
        """A running elastic gang is given another size: stop at a checkpoint, start again at `nodes`."""
        if nodes == self.nodes or self.suspended or self.stopping is not None or self.completed or self.failed:
            return []
        self.touch()
        self.resize_to = nodes
        self.restarts += 1
        self.resizes += 1
        self._set(jobset.RESTARTING, TRUE, RESIZE, message, now)
        effects = self.stop(StopReason.RESIZE, grace=grace, now=now, notice=(RESIZE, message))
        return effects + (self._stopped(now=now) if not self.live else [])

    def stop(self, why: StopReason, *, grace: timedelta, now: datetime,
             notice: tuple[str, str] | None = None) -> list[Effect]:
        """SIGTERM every live worker (after the stop notice, if any); SIGKILL them at the deadline."""
        self.touch()
        self.stopping = why
        live = self.live
        if not live:
            return []
        deadline = now + grace
        if self.kill_at is None or deadline < self.kill_at:
            self.kill_at = deadline
        effects: list[Effect] = []
        if notice is not None:
            effects.append(WriteNotice(cause=notice[0], message=notice[1], deadline=deadline))
        effects.append(Signal(tuple(w.pid for w in live), signal.SIGTERM))
        return effects

    def kill_overdue(self, *, now: datetime) -> list[Effect]:
        if self.kill_at is None or now < self.kill_at or not self.live:
            return []
        return [Signal(tuple(w.pid for w in self.live), signal.SIGKILL)]

    def disrupt(self, node: int, *, reason: str, message: str, now: datetime) -> list[Effect]:
        """The node of `node` is lost: its workers are killed at once, as a reclaimed node kills its pods."""
        victims = self._lose(node, reason=reason, message=message)
        return [Signal(tuple(w.pid for w in victims), signal.SIGKILL)] if victims else []

    def drain(self, node: int, *, why: str, grace: timedelta, now: datetime) -> list[Effect]:
        """The node of `node` is about to go: every worker gets the stop notice (NodeMaintenance) and SIGTERM,
        saves in the grace period, and the gang restarts, not counted, as JobSet restarts a gang whose pods
        were evicted from a drained node."""
        name = f"local-node-{node}"
        if not self._lose(node, reason=DISRUPTION_REASON, message=f"Eviction API: evicting ({name}: {why})"):
            return []
        return self._restart(node, stop_causes.node_maintenance(name, why), counted=False, grace=grace, now=now)

    def _lose(self, node: int, *, reason: str, message: str) -> list[Worker]:
        """Record that the workers of `node` are lost to a disruption (charged to no budget); returns them,
        none when the node runs none or the gang is stopping already."""
        victims = [w for w in self.workers if w.node == node and w.running]
        if not victims or self.stopping is not None:
            return []
        self.touch()
        self.disruption = Disruption(reason=reason, message=message, restart_attempt=self.restarts,
                                     worker=f"rank {victims[0].rank} (node {node})")
        self.disrupted_node = node
        return victims

    def _restart(self, node: int, notice: tuple[str, str], *, counted: bool, grace: timedelta,
                 now: datetime) -> list[Effect]:
        """JobSet restarts the gang for the Job of `node`: the restart is counted when JobSet decides it
        (`counted`: also towards maxRestarts), and every worker gets `notice`."""
        self.restarts += 1
        if counted:
            self.restarts_count_towards_max += 1
        self._set(jobset.RESTARTING, TRUE, jobset.DEFAULT_FAILURE_POLICY,
                  jobset.restarting_message(self.job_name(node)), now)
        return self.stop(StopReason.RESTART, grace=grace, now=now, notice=notice)

    def lost_with_its_node(self, rank: int) -> bool:
        """Whether worker `rank` of this round is one a node disruption killed."""
        return self._disrupted and self.workers[rank].node == self.disrupted_node

    @property
    def _disrupted(self) -> bool:
        """A worker of this round was lost to its node (and the restart for it has not happened yet)."""
        return self.disruption is not None and self.disruption.restart_attempt >= self.restarts

    def exited(self, rank: int, code: int, *, grace: timedelta, now: datetime) -> list[Effect]:
        """One worker exited with `code`: JobSet's failure policy, or the end of a stop."""
        w = self.workers[rank]
        if not w.running:
            return []
        self.touch()
        w.running, w.exit_code = False, code
        if self.stopping is not None:
            return self._stopped(now=now) if not self.live else []
        if code != 0:
            self.first_failure = f"worker rank {w.rank} (node {w.node}) exited with code {code}"
            if self._disrupted and self.restart_on_disruption:  # not the application's fault: not counted
                assert self.disruption is not None
                notice = stop_causes.node_lost(self.disruption.reason, self.disruption.message)
                effects = self._restart(w.node, notice, counted=False, grace=grace, now=now)
            elif self.restarts_count_towards_max < self.max_restarts:
                notice = stop_causes.worker_failed(self.first_failure, restart_left=True)
                effects = self._restart(w.node, notice, counted=True, grace=grace, now=now)
            else:
                self._set(jobset.FAILED, TRUE, jobset.REACHED_MAX_RESTARTS,
                          jobset.reached_max_restarts_message(self.job_name(w.node)), now)
                notice = stop_causes.worker_failed(self.first_failure, restart_left=False)
                effects = self.stop(StopReason.FAIL, grace=grace, now=now, notice=notice)
            return effects + (self._stopped(now=now) if not self.live else [])
        if all(x.exit_code == 0 for x in self.workers):
            self._set(jobset.COMPLETED, TRUE, jobset.ALL_JOBS_COMPLETED, jobset.MSG_COMPLETED, now)
        return []

    def _stopped(self, *, now: datetime) -> list[Effect]:
        """The last worker of a stop is gone."""
        self.touch()
        why, self.kill_at = self.stopping, None
        if why is StopReason.DELETE:
            return []  # stays deleted
        self.stopping = None
        if why is StopReason.RESIZE:
            self._lay_out(self.resize_to)
        if why in (StopReason.RESTART, StopReason.RESIZE) and not self.suspended:
            self._set(jobset.RESTARTING, FALSE, jobset.JOBS_READY, jobset.MSG_JOBS_READY, now)
            return self._new_round()
        return []

    def workers_gone(self, *, now: datetime) -> list[Effect]:
        """Recovery: the daemon that ran these workers died, and they with it (PR_SET_PDEATHSIG).

        A stop that was in progress is finished (a suspension keeps its attempt, a restart starts its
        next round); a gang that was simply running is lost, which the engine reads as a deletion.
        """
        if not self.live:
            return []
        self.touch()
        for w in self.live:
            w.running, w.exit_code = False, 137
        if self.stopping is None:
            self.lost = True
            return []
        return self._stopped(now=now)

    # -- views ---------------------------------------------------------------------------------------

    def observe(self) -> Gang:
        n = len(self.workers)
        running = len(self.live)
        launched = sum(1 for w in self.workers if w.running or w.exit_code is not None)
        round_failed = any(w.exit_code not in (None, 0) for w in self.workers) and not self.suspended
        return Gang(
            suspended=self.suspended,
            conditions=tuple(self.conditions),
            restarts=self.restarts,
            restarts_count_towards_max=self.restarts_count_towards_max,
            resizes=self.resizes,
            expected_workers=n,
            scheduled_workers=0 if self.suspended else launched,
            ready_workers=0 if self.suspended else running + sum(1 for w in self.workers if w.exit_code == 0),
            jobs_ready=1 if self.up else 0,
            jobs_succeeded=1 if self.completed else 0,
            jobs_failed=1 if round_failed and not (self._disrupted and self.restart_on_disruption) else 0,
            first_failure=self.first_failure,
            pending_failure=self.pending_failure,
            disruption=self.disruption,
        )
