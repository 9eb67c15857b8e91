"""Worker launcher for the Kubernetes image: `python -m gangrun.launch -- <command...>`.

Every worker pod of a gang runs it (the JobSet's container command, see `render.py`). It:

1. derives `NODE_RANK` from the Indexed Job's completion index, and `RANK`/`LOCAL_RANK` for one
   process per node;
2. waits until the rank-0 DNS name (`MASTER_ADDR`) resolves: the headless Service publishes pods as
   they are created, so early workers would otherwise fail their first connect. The wait is bounded
   (`GANGRUN_DNS_TIMEOUT`, default 300s) and fails with a message naming the host;
3. runs the command directly (exec) for `NPROC_PER_NODE=1`, or under torchrun with a static
   rendezvous whose id is `<jobset>-<restart attempt>`, so a whole-gang restart never joins the
   previous round's rendezvous;
4. forwards SIGTERM/SIGINT to the child when it cannot exec (torchrun, or when it is PID 1: a PID 1
   without a handler ignores SIGTERM, and the workers need it to checkpoint before the grace period
   ends).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from gangrun._core.exit_status import exit_status

DEFAULT_DNS_TIMEOUT = 300.0
EXIT_DNS = 3
EXIT_USAGE = 2


def worker_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment the command runs with: `env` plus the derived rank variables."""
    out = dict(env)
    node_rank = out.get("NODE_RANK") or out.get("JOB_COMPLETION_INDEX") or "0"
    out["NODE_RANK"] = node_rank
    nnodes = int(out.get("NNODES") or 1)
    nproc = int(out.get("NPROC_PER_NODE") or 1)
    out.setdefault("WORLD_SIZE", str(nnodes * nproc))
    out.setdefault("JOBSET_RESTART_ATTEMPT", "0")
    if nproc == 1:
        out["RANK"] = node_rank
        out["LOCAL_RANK"] = "0"
    return out


def torchrun_argv(env: Mapping[str, str], command: Sequence[str]) -> list[str]:
    gang = env.get("GANGRUN_JOBSET") or env.get("GANGRUN_TASK", "gangrun")
    rdzv_id = f"{gang}-{env.get('JOBSET_RESTART_ATTEMPT', '0')}"
    return [sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={env.get('NNODES', '1')}", f"--nproc-per-node={env['NPROC_PER_NODE']}",
            f"--node-rank={env['NODE_RANK']}", f"--master-addr={env.get('MASTER_ADDR', '127.0.0.1')}",
            f"--master-port={env.get('MASTER_PORT', '29500')}", f"--rdzv-id={rdzv_id}", *command]


def wait_for_dns(host: str, *, timeout: float, resolve: Callable[[str], object] = socket.gethostbyname,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
    """Return once `host` resolves; raise TimeoutError naming it after `timeout` seconds."""
    deadline = clock() + timeout
    delay = 0.25
    while True:
        try:
            resolve(host)
            return
        except OSError as e:
            if clock() >= deadline:
                raise TimeoutError(f"rank-0 host {host} did not resolve within {timeout:.0f}s ({e}); "
                                   f"is the JobSet's headless Service there (network.enableDNSHostnames)?") from None
        sleep(delay)
        delay = min(delay * 2, 5.0)


def _run_forwarding(argv: list[str], env: dict[str, str]) -> int:
    child = subprocess.Popen(argv, env=env)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    return exit_status(child.wait())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        args = args[args.index("--") + 1:]
    if not args:
        print("usage: python -m gangrun.launch -- <command...>", file=sys.stderr)
        return EXIT_USAGE
    env = worker_environment(os.environ)
    master = env.get("MASTER_ADDR", "")
    if master and int(env.get("NNODES") or 1) > 1:
        try:
            wait_for_dns(master, timeout=float(env.get("GANGRUN_DNS_TIMEOUT") or DEFAULT_DNS_TIMEOUT))
        except TimeoutError as e:
            print(f"gangrun.launch: {e}", file=sys.stderr)
            return EXIT_DNS
    if int(env.get("NPROC_PER_NODE") or 1) > 1:
        return _run_forwarding(torchrun_argv(env, args), env)
    if os.getpid() == 1:
        return _run_forwarding(args, env)
    try:
        os.execvpe(args[0], args, env)
    except OSError as e:
        print(f"gangrun.launch: cannot run {args[0]}: {e.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
