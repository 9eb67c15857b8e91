"""The `gangrun` command line: a thin layer over the Python API (`gangrun.submit`, `gangrun.TaskRun`).

Exit codes (README.md, "Command line", documents them for users):

    0    success (for `run`: the task Succeeded)
    1    the task ended without succeeding (`run`)
    2    a usage or manifest mistake: a bad flag, an invalid manifest, an unknown task
    3    the backend could not be reached or refused the request: the Kubernetes API server or the
         local control plane (connection, permission, server error)
    130  interrupted

Every error is one line on stderr, `gangrun: error: <message>`, the form argparse uses for a bad
flag; the message names the field, flag, variable or object at fault, never a Python class.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence

from gangrun._api.backends import BACKENDS, backend_name
from gangrun._core.priority_boost import DEFAULT_STEPS
from gangrun._errors import BackendError, GangrunError
from gangrun.cli import commands

EXIT_OK, EXIT_TASK_FAILED, EXIT_ERROR, EXIT_BACKEND, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

Command = Callable[[argparse.Namespace], int]  # one function of gangrun.cli.commands: args -> exit code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangrun", description="Run multi-node training gangs that survive preemption.")
    _backend_options(p, default=True)
    common = argparse.ArgumentParser(add_help=False)
    _backend_options(common, default=False)  # the same flags after the command name: `gangrun get x --backend ...`
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, func: Command, help_: str, *, json_out: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_, parents=[common])
        if json_out:
            sp.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
        sp.set_defaults(func=func)
        return sp

    sp = cmd("validate", commands.validate, "check a manifest and print it with defaults")
    sp.add_argument("file", help="the manifest (YAML or JSON); - reads standard input")
    sp = cmd("run", commands.run, "submit a task and follow its timeline and worker output until it ends; "
                                  "exit 0 only on Succeeded")
    sp.add_argument("file")
    sp.add_argument("--rank", type=_rank_or_all, default="0", help="whose output to show: a global rank or all "
                                                                   "(default 0)")
    sp = cmd("submit", commands.submit, "submit a task and print its name")
    sp.add_argument("file")
    sp = cmd("get", commands.get, "one task or all, with phase and reason")
    sp.add_argument("name", nargs="?")
    sp = cmd("describe", commands.describe, "status, attempts, budgets and the event timeline")
    sp.add_argument("name")
    sp = cmd("events", commands.events, "the task's event timeline")
    sp.add_argument("name")
    sp.add_argument("-f", "--follow", action="store_true", help="keep printing new events until the task ends")
    sp = cmd("logs", commands.logs, "worker output", json_out=False)
    sp.add_argument("name")
    sp.add_argument("--rank", type=_rank_or_all, default=None, help="only this global rank, or all (the default)")
    sp.add_argument("--attempt", type=_at_least(1), default=None, help="this attempt (default: the current one)")
    sp.add_argument("--round", type=_at_least(0), default=None,
                    help="only this whole-gang restart round of the attempt, from 0 (default: every round, oldest "
                         "first)")
    sp.add_argument("-f", "--follow", action="store_true", help="keep printing new output")
    sp = cmd("cancel", commands.cancel, "stop the task (Aborted)")
    sp.add_argument("name")
    sp = cmd("delete", commands.delete, "remove an ended task, its timeline and its logs, so that its name can be "
                                        "used again (its checkpoints are kept unless --purge)")
    sp.add_argument("name")
    sp.add_argument("--force", action="store_true", help="cancel the task first if it has not ended; with --purge, "
                                                         "purge even what a task that has not ended resumes from")
    sp.add_argument("--purge", action="store_true",
                    help="remove the task's checkpoints too (kept by default: spec.checkpoint.resumeFrom loads them); "
                         "of a name no task has any more: the checkpoints deleted tasks of that name kept")
    sp = cmd("ui", commands.ui, "serve a web page of the tasks and each task's timeline", json_out=False)
    sp.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    sp.add_argument("--port", type=_port, default=8265, help="port (default 8265; 0 picks a free one)")
    sp.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="also answer requests for this host name (repeatable; loopback names and IP "
                         "addresses are always answered)")
    sp = cmd("render", commands.render, "print the JobSet an attempt would create on Kubernetes", json_out=False)
    sp.add_argument("file")
    sp.add_argument("--attempt", type=_at_least(1), default=1, help="attempt number (default 1)")
    sp.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    sp = cmd("controller", commands.controller, "run the Kubernetes controller", json_out=False)
    sp.add_argument("--metrics-port", type=int, default=8080)
    sp.add_argument("--health-port", type=int, default=8081)
    sp.add_argument("--leader-election", action=argparse.BooleanOptionalAction, default=True)
    sp.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "gangrun-system"))
    sp.add_argument("--identity", default=None,
                    help="leader election identity (default: the hostname and a random suffix)")
    sp.add_argument("--all-namespaces", action="store_true", help="watch every namespace (default: --namespace or all)")
    sp.add_argument("--workers", type=_at_least(1), default=None,
                    help="reconciles run at once, each with its status write in flight (default 128)")
    sp.add_argument("--priority-boost", action="store_true",
                    help="checkpoint-aware preemption: keep each gang's Workload annotated with "
                         "kueue.x-k8s.io/priority-boost (needs Kueue's PriorityBoost feature gate)")
    sp.add_argument("--boost-min", type=int, default=0, help="the lowest boost written (default 0)")
    sp.add_argument("--boost-max", type=int, default=99,
                    help="the highest boost written (default 99: below a priority class 100 higher)")
    sp.add_argument("--boost-steps", default=",".join(f"{s:g}" for s in DEFAULT_STEPS),
                    help="node-seconds of unsaved work at which the boost steps up, comma-separated "
                         "(default %(default)s)")
    sp.add_argument("--boost-starved-max", type=int, default=3,
                    help="the most boost a waiting gang gets, one per preemption (default 3); running gangs "
                         "start above it")
    sp.add_argument("--live-reports", action=argparse.BooleanOptionalAction, default=True,
                    help="poll the running workers' newest checkpoint, so commits reach the timeline and the "
                         "boost while gangs run (default: on; off: only at each stop)")
    sp.add_argument("--report-period", type=_positive_seconds, default=5.0,
                    help="seconds between polls of the running workers' newest checkpoint (default 5)")

    local = sub.add_parser("local", help="the local control plane", description="the local control plane",
                           parents=[common])
    lsub = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")

    def lcmd(name: str, func: Command, help_: str) -> argparse.ArgumentParser:
        sp = lsub.add_parser(name, help=help_, description=help_, parents=[common])
        sp.add_argument("-o", "--output", choices=["text", "json"], default="text")
        sp.set_defaults(func=func)
        return sp

    sp = lcmd("up", commands.local_up, "start (or reconfigure) the local control plane and its queue's quota")
    sp.add_argument("--cpu", default=None, help="CPU quota, e.g. 8 or 500m (default: this machine's cores)")
    sp.add_argument("--memory", default=None, help="memory quota, e.g. 16Gi (default: this machine's memory)")
    sp.add_argument("--gpu", type=int, default=None, help="GPU quota (default: 0)")
    sp.add_argument("--metrics-port", type=int, default=None,
                    help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: stop serving them)")
    sp.add_argument("--priority-boost", action=argparse.BooleanOptionalAction, default=None,
                    help="checkpoint-aware preemption: among gangs of one priority, preempt the one that would "
                         "lose the least work (default: on)")
    sp.add_argument("--boost-steps", default=None,
                    help="node-seconds of unsaved work at which a gang's boost steps up, comma-separated "
                         f"(default {','.join(f'{s:g}' for s in DEFAULT_STEPS)})")
    lcmd("down", commands.local_down, "stop the local control plane and every gang it runs")
    lcmd("status", commands.local_status, "quota, queue and running gangs")
    sp = lcmd("evict", commands.local_evict, "inject a Kueue eviction into a task's gang")
    sp.add_argument("name")
    sp.add_argument("--reason", required=True,
                    choices=["Preempted", "PodsReadyTimeout", "NodeFailures", "NodeDisruption", "NodeMaintenance"],
                    help="NodeDisruption kills the workers of one node at once, as a lost node does; "
                         "NodeMaintenance tells every worker that one node is about to go, and the gang saves "
                         "and restarts, charged to nothing")
    sp = lcmd("deactivate", commands.local_deactivate, "set the task's workload inactive (spec.active=false)")
    sp.add_argument("name")
    sp = lcmd("activate", commands.local_activate, "set the task's workload active again")
    sp.add_argument("name")
    return p


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type for whole numbers >= `minimum`; argparse reports a bad value naming the flag."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _rank_or_all(text: str) -> int | None:
    """`--rank` of `run` and `logs`: a global rank, or None for `all`."""
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rank (0, 1, ...) or all, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {value}")
    return value


def _backend_options(p: argparse.ArgumentParser, *, default: bool) -> None:
    """Backend flags; sub-commands repeat them with suppressed defaults so they never undo the top level."""
    def d(value: str | None) -> str | None:
        return value if default else argparse.SUPPRESS

    # The default is resolved in main(), so that a bad $GANGRUN_BACKEND is an error naming the variable.
    p.add_argument("--backend", choices=BACKENDS, default=d(None),
                   help="where tasks run (default: $GANGRUN_BACKEND or local)")
    p.add_argument("--kubeconfig", default=d(None),
                   help="kubernetes backend: kubeconfig file (default: the usual lookup)")
    p.add_argument("--context", default=d(None), help="kubernetes backend: kubeconfig context")
    p.add_argument("-n", "--namespace", default=d(None), help="kubernetes backend: namespace")


def exit_code(exc: GangrunError) -> int:
    """3 when the backend failed (unreachable, refused, broken); 2 for the user's own mistakes."""
    return EXIT_BACKEND if isinstance(exc, BackendError) else EXIT_ERROR


def error_line(exc: BaseException) -> str:
    """The one line a user sees: the message, folded onto one line, without the Python class."""
    return "gangrun: error: " + (" ".join(str(exc).split()) or type(exc).__name__)


def _warn(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: object = None,
          line: str | None = None) -> None:
    """A warning is one line on stderr, like an error (`gangrun: warning: ...`)."""
    print(f"gangrun: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    warnings.showwarning = _warn
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "backend", None) is None:
            args.backend = backend_name(None)
        return int(args.func(args) or 0)
    except GangrunError as exc:
        print(error_line(exc), file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `gangrun logs x | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
