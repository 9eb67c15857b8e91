"""One function per CLI command: each calls the Python API (`gangrun._api`) and prints; no logic of its own."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import yaml

from gangrun._api import ClusteredTask, TaskRun, attach, open_backend, purge_checkpoints
from gangrun._api import submit as submit_task
from gangrun._backends.base import Backend
from gangrun._core.pod_merge import local_ignored
from gangrun._core.priority_boost import BoostPolicy
from gangrun._core.spec import TaskSpec
from gangrun._core.units import format_bytes, format_duration
from gangrun._core.view_types import ListedView
from gangrun._errors import UsageError
from gangrun.cli import output
from gangrun.cli.follow import TERMINAL, follow_run

if TYPE_CHECKING:  # for the annotation only: backends are imported when used, as in backend()
    from gangrun._backends.local import LocalBackend


def backend(args: argparse.Namespace) -> Backend:
    """The backend named by --backend (the kubernetes flags apply to it only); opening it never dials."""
    if args.backend == "kubernetes":
        return open_backend("kubernetes", kubeconfig=args.kubeconfig, context=args.context,
                            namespace=args.namespace)
    return open_backend("local")


def _run(args: argparse.Namespace) -> TaskRun:
    return attach(args.name, backend(args))


def _local(args: argparse.Namespace) -> LocalBackend:
    if args.backend != "local":
        raise UsageError("`gangrun local` commands act on the local backend; drop --backend kubernetes")
    from gangrun._backends.local import LocalBackend

    return LocalBackend()


def _json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "text") == "json"


def validate(args: argparse.Namespace) -> int:
    spec = ClusteredTask.from_file(args.file).spec
    if _json(args):
        output.emit_json({"valid": True, "name": spec.name, "spec": spec_summary(spec)})
    else:
        s = spec_summary(spec)
        what = repr(spec.name) if spec.name else f"with a name generated from {spec.generate_name!r}"
        print(f"{args.file}: valid ClusteredTask {what}: "
              f"{s['nodes']} node(s) x {s['nprocPerNode']} process(es), "
              f"retries {s['retries']}, maxRestarts {s['maxRestarts']}, "
              f"resumeAfterPreemption {str(s['resumeAfterPreemption']).lower()}, "
              f"restartOnDisruption {str(s['restartOnDisruption']).lower()}, queue {s['queue']}, "
              f"terminationGracePeriod {format_duration(spec.termination_grace)}")
        for line in [*output.run_lines(s), *output.pod_template_lines(s)]:
            print(f"  {line}")
    return 0


def spec_summary(spec: TaskSpec) -> dict[str, Any]:
    return {"name": spec.name, "generateName": spec.generate_name or None, "nodes": spec.nodes,
            "nprocPerNode": spec.nproc_per_node, "command": list(spec.command),
            "resources": {"cpu": str(spec.resources.cpu), "memory": str(spec.resources.memory),
                          "gpu": spec.resources.gpu},
            "retries": spec.retries, "maxSystemRetries": spec.max_system_retries,
            "maxRuntime": spec.max_runtime.total_seconds() if spec.max_runtime else None,
            "maxRestarts": spec.failure_policy.max_restarts,
            "resumeAfterPreemption": spec.failure_policy.resume_after_preemption,
            "restartOnDisruption": spec.failure_policy.restart_on_disruption,
            "minNodes": spec.least_nodes, "resizeCooldown": spec.resize_cooldown.total_seconds(),
            "terminationGracePeriod": spec.termination_grace.total_seconds(),
            "workingDir": spec.working_dir, "image": spec.image or None, "env": dict(spec.env),
            "queue": spec.queue, "priorityClass": spec.priority_class, "checkpointUri": spec.checkpoint_uri,
            "resumeFrom": spec.resume_from or None,
            "shmSize": str(spec.shm_size) if spec.shm_size is not None else None, "gpuResource": spec.gpu_resource,
            "podTemplate": spec.pod_template or None, "ignoredLocally": local_ignored(spec.pod_template)}


def submit(args: argparse.Namespace) -> int:
    run_ = submit_task(ClusteredTask.from_file(args.file), backend(args))
    output.emit_json({"name": run_.name}) if _json(args) else print(run_.name)
    return 0


def run(args: argparse.Namespace) -> int:
    run_ = submit_task(ClusteredTask.from_file(args.file), backend(args))
    if _json(args):
        view = run_.wait()
        output.emit_json(view)
    else:
        print(output.prefixed(output.TIMELINE, f"submitted {run_.name} to the {args.backend} backend"), flush=True)
        view = follow_run(run_, rank=args.rank)
    return 0 if view["phase"] == "Succeeded" else 1


def get(args: argparse.Namespace) -> int:
    views: list[ListedView] = [_run(args).status()] if args.name else backend(args).list()
    if _json(args):
        output.emit_json(views[0] if args.name else views)
    elif views:
        print(output.task_rows(views))
    else:
        print("no tasks")
    return 0


def describe(args: argparse.Namespace) -> int:
    be = backend(args)
    view, events_ = be.get(args.name), be.events(args.name)  # Event objects, for the text layout
    if _json(args):
        output.emit_json({**view, "events": [e.for_json() for e in events_]})
    else:
        print(output.describe(view, events_))
    return 0


def events(args: argparse.Namespace) -> int:
    be = backend(args)
    if not args.follow:
        evs = be.events(args.name)
        if _json(args):
            output.emit_json([e.for_json() for e in evs])
        else:
            for e in evs:
                print(output.event_line(e))
        return 0
    seen = 0  # following: one line per event as it comes, JSON lines with -o json
    while True:
        evs = be.events(args.name)
        for e in evs[seen:]:
            print(json.dumps(e.for_json()) if _json(args) else output.event_line(e), flush=True)
        seen = len(evs)
        if be.get(args.name)["phase"] in TERMINAL:
            return 0
        time.sleep(0.5)


def logs(args: argparse.Namespace) -> int:
    for line in _run(args).log_lines(rank=args.rank, attempt=args.attempt, round=args.round, follow=args.follow):
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
        if args.follow:  # as it comes; otherwise the output is buffered, a log of any size a chunk at a time
            sys.stdout.flush()
    return 0


def cancel(args: argparse.Namespace) -> int:
    run_ = _run(args)
    requested = run_.cancel()
    # On Kubernetes a cancel is a request the controller carries out (if one runs): say so until it has.
    phase = run_.status()["phase"] if requested else ""
    done = phase == "Aborted"
    if _json(args):
        output.emit_json({"name": args.name, "requested": requested, "cancelled": done, "phase": phase or None})
    elif not requested:
        print(f"{args.name}: already ended")
    else:
        print(f"{args.name}: cancelled" if done else
              f"{args.name}: cancel requested; the task is {phase} until its controller stops it")
    return 0


def delete(args: argparse.Namespace) -> int:
    be = backend(args)
    if args.purge and not _exists(be, args.name):  # a deleted task's kept checkpoints
        removed = purge_checkpoints(args.name, be, force=args.force)
        if _json(args):
            output.emit_json({"name": args.name, "deleted": False, "purged": True, "removed": removed})
        else:
            print(f"{args.name}: no such task; removed the checkpoints deleted tasks of that name kept, at "
                  + ", ".join(removed))
        return 0
    deleted = attach(args.name, be).delete(force=args.force, purge=args.purge)
    if _json(args):
        output.emit_json({"name": args.name, "deleted": deleted, **({"purged": deleted} if args.purge else {})})
    elif not deleted:
        print(f"{args.name}: already gone")
    else:
        print(f"{args.name}: deleted" + (" with its checkpoints" if args.purge else
                                         " (its checkpoints are kept; --purge removes them)"))
    return 0


def _exists(be: Backend, name: str) -> bool:
    try:
        be.get(name)
    except UsageError:
        return False
    return True


def ui(args: argparse.Namespace) -> int:
    from gangrun._ui import serve

    server = serve(backend(args), host=args.host, port=args.port, allow_hosts=args.allow_host)
    print(f"gangrun ui: {server.url}  ({args.backend} backend; Ctrl-C stops it)", flush=True)
    if server.exposed:
        print(f"gangrun: warning: the page listens on every address ({args.host}): anyone who can reach this machine "
              "can read every task and its logs, and the page has no login", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def render(args: argparse.Namespace) -> int:
    from gangrun._backends.kube import render_jobset

    spec = ClusteredTask.from_file(args.file).spec
    if not spec.name:  # the API server makes the name at submit: show where it goes
        spec = replace(spec, name=f"{spec.generate_name}xxxxx")
        print(f"gangrun: the task's name is generated at submit; shown here as {spec.name}", file=sys.stderr)
    doc = render_jobset(spec, attempt=args.attempt)
    if args.output == "json":
        output.emit_json(doc)
    else:
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
    return 0


def controller(args: argparse.Namespace) -> int:
    boost = _boost_policy(args)  # a bad band is the user's mistake, said before connecting to anything
    try:
        from gangrun._backends.kube import run_controller
    except ImportError as e:
        raise UsageError(f"the controller needs extra packages: pip install 'gangrun[kubernetes]' ({e})") from None
    namespace = None if args.all_namespaces else args.namespace
    return run_controller(kubeconfig=args.kubeconfig, namespace=namespace, metrics_port=args.metrics_port,
                          health_port=args.health_port, leader_election=args.leader_election,
                          lease_namespace=args.lease_namespace, identity=args.identity,
                          workers=args.workers, boost=boost,
                          report_period=args.report_period if args.live_reports else None)


def _boost_policy(args: argparse.Namespace) -> BoostPolicy | None:
    """The band of `--priority-boost`, or None when it is off. Raises UsageError naming the flag."""
    if not args.priority_boost:
        return None
    return BoostPolicy(low=args.boost_min, high=args.boost_max, steps=tuple(_steps(args.boost_steps)),
                       starved_max=args.boost_starved_max)


def _steps(text: str) -> list[float]:
    """`--boost-steps 30,120,600`. Raises UsageError naming the flag."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--boost-steps: expected comma-separated numbers, got {text!r}") from None


# -- local ------------------------------------------------------------------------------------------


def _print_status(args: argparse.Namespace, status: dict[str, Any]) -> None:
    if _json(args):
        output.emit_json(status)
        return
    if not status.get("running", True):
        print("local control plane: not running")
        return
    quota, used = status.get("quota", {}), status.get("used", {})
    print("local control plane: running" + (f" (pid {status['pid']})" if status.get("pid") else ""))
    for res in ("cpu", "memory", "gpu"):
        if res in quota:
            show = format_bytes if res == "memory" else str
            print(f"  {res:<7} {show(used.get(res, 0))} of {show(quota[res])} in use")
    if status.get("queues"):
        print(f"  queues: {', '.join(status['queues'])}")
    if status.get("metrics"):
        print(f"  metrics: {status['metrics']}")
    gangs = status.get("gangs", [])
    if gangs:
        rows = [[g.get("task", ""), str(g.get("attempt", "")), g.get("state", ""),
                 str(g.get("priority", "")) + (f"+{g['boost']}" if g.get("boost") else ""),
                 str(g.get("queuePosition") or "")] for g in gangs]
        print(output.table(rows, ["TASK", "ATTEMPT", "WORKLOAD", "PRIORITY", "QUEUE POSITION"]))
    for task, why in (status.get("tooBig") or {}).items():
        print(f"  warning: {task} can never be admitted under this quota: {why}")
    for task, why in (status.get("unreadable") or {}).items():
        print(f"  warning: {task}: {why}; `gangrun delete {task}` removes it")


def local_up(args: argparse.Namespace) -> int:
    _print_status(args, _local(args).up(cpu=args.cpu, memory=args.memory, gpu=args.gpu,
                                        metrics_port=args.metrics_port, priority_boost=args.priority_boost,
                                        boost_steps=None if args.boost_steps is None else _steps(args.boost_steps)))
    return 0


def local_down(args: argparse.Namespace) -> int:
    stopped = _local(args).down()
    output.emit_json({"stopped": stopped}) if _json(args) else print(
        "local control plane stopped" if stopped else "local control plane was not running")
    return 0


def local_status(args: argparse.Namespace) -> int:
    _print_status(args, _local(args).status())
    return 0


def _local_act(args: argparse.Namespace, verb: str, call: Callable[[], object]) -> int:
    call()
    output.emit_json({"name": args.name, "done": verb}) if _json(args) else print(f"{args.name}: {verb}")
    return 0


def local_evict(args: argparse.Namespace) -> int:
    return _local_act(args, f"evicted ({args.reason})", lambda: _local(args).evict(args.name, args.reason))


def local_deactivate(args: argparse.Namespace) -> int:
    return _local_act(args, "deactivated", lambda: _local(args).deactivate(args.name))


def local_activate(args: argparse.Namespace) -> int:
    return _local_act(args, "activated", lambda: _local(args).activate(args.name))
