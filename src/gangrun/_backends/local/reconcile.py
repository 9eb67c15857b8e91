"""One task's reconcile: the Kueue and JobSet twins move, the engine decides, one write, one action.

    sync(rec)   Kueue's job reconciler and the JobSet controller, on the twins: kill overdue workers,
                suspend a gang whose Workload is Evicted (W2), give quota back once no worker is left
                (W6), start the workers of an admitted gang (W8), tail the checkpoint events file
    step(rec)   observe the twins → `decide` → timeline events → persist state, twins and events in
                ONE transaction → carry out the action (idempotent, keyed by (task, attempt))

Admission itself (which Workloads get quota, which are preempted) is `admission.plan`, applied by
the controller between the two.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from gangrun._backends.local.admission import Resources
from gangrun._backends.local.config import Config, Paths
from gangrun._backends.local.gang import DELETE, GangTwin, Launch, Spawn
from gangrun._backends.local.store import Store
from gangrun._backends.local.tasks import TaskRecord, utc
from gangrun._backends.local.workload import WorkloadTwin
from gangrun._core import jobset
from gangrun._core.conditions import TRUE, Condition
from gangrun._core.engine import Action, ActionKind, decide
from gangrun._core.observation import observed
from gangrun._core.phases import Phase
from gangrun._core.spec import TaskSpec
from gangrun._core.timeline import Event, EventType, transition_events


@dataclass(frozen=True, kw_only=True)
class Ctx:
    store: Store
    paths: Paths
    config: Callable[[], Config]
    spawn: Spawn


def launch_for(rec: TaskRecord, paths: Paths) -> Launch:
    """The workers' argv, directory and attempt-wide environment (INTERFACE.md, "Inside a worker")."""
    spec, n = rec.spec, rec.state.attempt
    root = paths.checkpoint_root(rec.name, spec.checkpoint_uri)
    run = paths.run(rec.name, n)
    env = dict(os.environ)
    env.update(spec.env)
    env.update({
        "GANGRUN_TASK": rec.name, "GANGRUN_ATTEMPT": str(n), "GANGRUN_BACKEND": "local",
        "GANGRUN_HOME": str(paths.home), "NNODES": str(spec.nodes), "NPROC_PER_NODE": str(spec.nproc_per_node),
        "WORLD_SIZE": str(spec.world_size), "LOCAL_WORLD_SIZE": str(spec.nproc_per_node),
        "MASTER_ADDR": "127.0.0.1",
        "GANGRUN_CHECKPOINT_PATH": f"{root}/attempt-{n}",
        "GANGRUN_PREV_CHECKPOINT_PATH": f"{root}/attempt-{n - 1}" if n > 1 else "",
        "GANGRUN_STOP_FILE": str(run / "stop.json"), "GANGRUN_EVENTS_FILE": str(run / "events.jsonl"),
        "GANGRUN_GRACE_PERIOD": f"{spec.termination_grace.total_seconds():g}",
    })
    env.setdefault("PYTHONUNBUFFERED", "1")  # worker output reaches its log as it is printed
    return Launch(argv=list(spec.command), cwd=rec.doc.get("cwd") or os.getcwd(), env=env,
                  logs=paths.logs(rec.name, n), max_restarts=spec.failure_policy.max_restarts,
                  grace=spec.termination_grace.total_seconds())


def notice_writer(rec: TaskRecord, paths: Paths, cause: str, message: str) -> Callable[[float], None]:
    """Write the stop notice (B3) atomically before the workers get SIGTERM."""
    def write(deadline: float) -> None:
        run = paths.run(rec.name, rec.gang.attempt if rec.gang else rec.state.attempt)
        run.mkdir(parents=True, exist_ok=True)
        tmp = run / f".stop.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"cause": cause, "message": message, "deadline": deadline}))
        os.replace(tmp, run / "stop.json")

    return write


def gang_request(spec: TaskSpec) -> tuple[Resources, Resources]:
    """(per node, whole gang): what submit checks against the quota is what the Workload asks for."""
    per_node = Resources(cpu=spec.resources.cpu, memory=spec.resources.memory, gpu=spec.resources.gpu)
    return per_node, per_node.scaled(spec.nodes)


def new_twins(rec: TaskRecord, config: Config, attempt: int) -> tuple[GangTwin, WorkloadTwin]:
    spec = rec.spec
    gang = GangTwin(task=rec.name, attempt=attempt, nodes=spec.nodes, nproc=spec.nproc_per_node)
    gang.conditions.append(Condition(type=jobset.SUSPENDED, status=TRUE, reason=jobset.SUSPENDED_JOBS,
                                     message=jobset.MSG_SUSPENDED))
    pc = spec.priority_class or config.default_priority_class
    wl = WorkloadTwin(task=rec.name, attempt=attempt, queue=spec.queue, priority=config.priority_of(pc),
                      priority_class=pc, resources=gang_request(spec)[1].for_json(), order=rec.seq)
    return gang, wl


def sync(rec: TaskRecord, ctx: Ctx, now: float) -> None:
    dt = utc(now)
    tail_checkpoints(rec, ctx.paths)
    g, wl = rec.gang, rec.workload
    if g is None:
        return
    grace = rec.spec.termination_grace.total_seconds()
    current = g.attempt == rec.state.attempt and not rec.terminal
    if not current and g.stopping != DELETE and rec.state.phase is not Phase.SUCCEEDED:
        # Leftover of an ended attempt (also after a crash between the write and the action).
        rec.note_lost("AttemptEnded", now)
        g.stop(DELETE, grace, notice=notice_writer(rec, ctx.paths, "AttemptEnded", rec.state.info.reason))
    g.kill_overdue(now)
    if wl is not None and current and not g.lost:
        ev = wl.evicted
        if wl.reserved and ev is not None and not g.suspended:  # W2: stop the job
            rec.note_lost(ev.reason, now)
            g.suspend(grace, notice_writer(rec, ctx.paths, ev.reason, ev.message), now=dt)
        elif wl.reserved and ev is None and g.suspended and not (g.stopping or g.completed or g.failed):
            run = ctx.paths.run(rec.name, g.attempt)
            run.mkdir(parents=True, exist_ok=True)  # the SDK appends checkpoint events here
            (run / "stop.json").unlink(missing_ok=True)
            g.resume(launch_for(rec, ctx.paths), ctx.spawn, now=dt)  # W8: start the job
        if not g.suspended:
            wl.pods_ready(g.observe().jobs_ready == 1, recovering=g.restarts > 0, now=dt)
    if wl is not None and not wl.finished and not g.live:
        if g.stopping == DELETE or g.lost or rec.state.phase is Phase.SUCCEEDED:
            wl.finish(succeeded=g.completed, message=_finish_message(rec, g), now=dt)
        elif wl.reserved and wl.evicted is not None:  # W6: quota back, requeued as Kueue does
            wl.release(at=now, now=dt, backoff_base=ctx.config().pods_ready_backoff)
    if wl is not None and not wl.reserved:
        wl.backoff_finished(now_ts=now, now=dt)
    rec.note_up(now)


def _finish_message(rec: TaskRecord, g: GangTwin) -> str:
    if g.completed:
        return jobset.MSG_COMPLETED
    return f"the gang of attempt {g.attempt} was deleted: {rec.state.info.reason}"


def tail_checkpoints(rec: TaskRecord, paths: Paths) -> None:
    """Turn the SDK's `checkpoint_committed` lines of the current attempt into timeline events."""
    n = rec.gang.attempt if rec.gang is not None else rec.state.attempt
    f = paths.run(rec.name, n) / "events.jsonl"
    offsets = rec.acct.setdefault("ckptOffsets", {})
    off = offsets.get(str(n), 0)
    try:
        size = f.stat().st_size
    except OSError:
        return
    if size <= off:
        return
    with open(f, "rb") as fh:
        fh.seek(off)
        data = fh.read(size - off)
    end = data.rfind(b"\n") + 1  # a line still being written is read next time
    offsets[str(n)] = off + end
    for line in data[:end].splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("type") != "checkpoint_committed":
            continue
        t = float(doc.get("time") or 0)
        step = doc.get("step")
        rec.acct["lastCheckpoint"] = {"attempt": doc.get("attempt", n), "step": step, "seq": doc.get("seq"),
                                      "time": t, "uri": doc.get("uri")}
        what = f"step {step}" if step is not None else f"seq {doc.get('seq')}"
        rec.add(Event(time=utc(t), type=EventType.CHECKPOINT, attempt=doc.get("attempt", n),
                      message=f"checkpoint committed ({what}) by rank {doc.get('rank', 0)}",
                      data={"step": step, "seq": doc.get("seq"), "uri": doc.get("uri")}))


def observe(rec: TaskRecord):
    g, wl, n = rec.gang, rec.workload, rec.state.attempt
    gang = g.observe() if g is not None and g.attempt == n and not g.lost and g.stopping != DELETE else None
    return observed(gang, wl.observed() if wl is not None and wl.attempt == n else None)


def step(rec: TaskRecord, ctx: Ctx, now: float) -> bool:
    """Decide, persist in one transaction, act. Returns whether the action changed the twins."""
    dt = utc(now)
    before = rec.state
    d = decide(rec.spec.policy(), before, observe(rec), now=dt)
    record(rec, before, d.state, d.action, now)
    rec.wake_at = d.wake_at.timestamp() if d.wake_at else None
    persist(rec, ctx.store)
    return act(rec, d.action, ctx, now)


def record(rec: TaskRecord, before, after, action: Action, now: float) -> None:
    """Adopt the engine's new state and add its timeline events (with who preempted whom)."""
    for e in transition_events(before, after, action, now=utc(now)):
        if e.type is EventType.PREEMPTED and rec.workload is not None and rec.workload.preempted_by:
            e = replace(e, message=f"preempted by task {rec.workload.preempted_by}; {e.message}",
                        data={**e.data, "preemptor": rec.workload.preempted_by})
        rec.add(e)
    rec.state = after
    if after.phase.terminal and not before.phase.terminal:
        rec.acct["endedAt"] = now


def persist(rec: TaskRecord, store: Store) -> bool:
    row = rec.to_row()
    snapshot = repr(row)
    if snapshot == rec.saved and not rec.events:
        return False
    store.save(row, rec.events)
    rec.events, rec.saved = [], snapshot
    return True


def act(rec: TaskRecord, action: Action, ctx: Ctx, now: float) -> bool:
    g = rec.gang
    grace = rec.spec.termination_grace.total_seconds()
    if action.kind is ActionKind.CREATE_GANG:
        if g is not None and (g.attempt == action.attempt or g.live):
            return False  # exists already, or the old attempt's workers are still stopping
        rec.gang, rec.workload = new_twins(rec, ctx.config(), action.attempt)
        rec.note_queued(now, admitted=False)
        return True
    if action.kind in (ActionKind.RETRY, ActionKind.FAIL, ActionKind.ABORT):
        if g is None or g.attempt != action.attempt or g.stopping == DELETE:
            return False
        cause = "Aborted" if action.kind is ActionKind.ABORT else (action.code or "AttemptEnded")
        rec.note_lost(cause, now)
        g.stop(DELETE, grace, notice=notice_writer(rec, ctx.paths, cause, action.message))
        return True
    if action.kind is ActionKind.SUCCEED and rec.workload is not None:
        return rec.workload.finish(succeeded=True, message=jobset.MSG_COMPLETED, now=utc(now))
    return False
