"""A Python worker run in a fork of its launcher: one interpreter start per worker, not two.

In a pod `gangrun.launch` stays its command's parent. When the command is this very interpreter running
a script or a module (`python train.py ...`, `python -m pkg.train ...`), a second interpreter would only
start Python and import gangrun again. The launcher forks instead, and the copy runs the command with
`runpy` as python would have:

    python_command(args, env, executable=..., launcher_env=...) → PythonCommand, or None: run it as a
                               subprocess (another interpreter, an option such as -u/-c/-X, a PYTHON*
                               variable the worker's environment sets differently, not a .py file)
    Waiting.fork(command)    → in the launcher: a forked copy that waits for its environment; in the
                               copy this call never returns: it runs the command (or leaves, when the
                               launcher gives up before starting it)
    waiting.go(env)          → the copy starts the command with `env` as os.environ; `waiting` is then
                               the child the launcher waits for and forwards signals to
    waiting.abort()          → the copy leaves without running anything (the launcher failed first)

The fork happens first thing, while the launcher has one thread (fork copies only the calling thread,
so a lock another thread held would stay locked in the copy forever): the launcher then starts its
report server, waits for rank 0's name and asks rank 0 for the start id, while the copy waits.

What python would do, the copy does: sys.argv (the script's absolute path, or the module's file,
then the arguments; python keeps argv[0] as given),
sys.path[0] (the script's folder, or the current folder for -m), `__main__`. Its end is python's: the
command's exceptions leave the copy through the launcher's `raise SystemExit(main())`, so the
interpreter handles them as it would the script's (SystemExit's code, 1 and the traceback for an
uncaught exception, the signal's status for a KeyboardInterrupt), then joins non-daemon threads, runs
atexit handlers (multiprocessing's) and flushes stdout/stderr. The traceback starts at the command's
own frames (the launcher's and runpy's are left out).
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn


@dataclass(frozen=True)
class PythonCommand:
    """What `python <script> args` or `python -m <module> args` runs: exactly one of path/module."""

    argv: tuple[str, ...]  # sys.argv as python sets it (for -m, runpy puts the module's file in argv[0])
    path: str | None = None
    module: str | None = None


def _python_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def _same_interpreter(program: str, path: str | None, executable: str) -> bool:
    """`program` (as the command names it, looked up on `path`) is `executable`: the same file in the
    same folder (a virtualenv's bin/python3 links to the base interpreter, which is another Python)."""
    found = program if os.sep in program else shutil.which(program, path=path)
    if not found or not executable:
        return False
    try:
        return (os.path.samefile(found, executable)
                and os.path.realpath(os.path.dirname(os.path.abspath(found)))
                == os.path.realpath(os.path.dirname(os.path.abspath(executable))))
    except OSError:
        return False


def python_command(args: Sequence[str], env: Mapping[str, str], *, executable: str,
                   launcher_env: Mapping[str, str]) -> PythonCommand | None:
    """The Python command `args` is, if a fork of the launcher (`executable`, started with `launcher_env`)
    can run it as python would; None when it must run as a subprocess."""
    if len(args) < 2 or not _same_interpreter(args[0], env.get("PATH"), executable):
        return None
    if _python_vars(env) != _python_vars(launcher_env):  # PYTHONPATH & co. act only as an interpreter starts
        return None
    first, rest = args[1], list(args[2:])
    if first.startswith("-m"):
        module = first[2:] or (rest.pop(0) if rest else "")
        return PythonCommand(argv=("-m", *rest), module=module) if module and not module.startswith("-") else None
    if first.startswith("-") or not first.endswith(".py"):  # options, -c, stdin, a folder or a zip: python's job
        return None
    return PythonCommand(argv=(first, *rest), path=first)


_STOPS = (signal.SIGTERM, signal.SIGINT)


class Waiting:
    """The launcher's forked copy, waiting for its environment; then the running command."""

    def __init__(self, pid: int, go_fd: int) -> None:
        self.pid = pid
        self._go_fd: int | None = go_fd
        self.returncode: int | None = None

    @classmethod
    def fork(cls, command: PythonCommand) -> Waiting:
        """Fork; the launcher gets the copy, the copy runs `command` once told to (it never returns)."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # what the launcher wrote must not be written twice
        read_fd, go_fd = os.pipe()
        pid = os.fork()
        if pid:
            os.close(read_fd)
            return cls(pid, go_fd)
        os.close(go_fd)
        _run_when_told(command, read_fd)

    def go(self, env: Mapping[str, str]) -> Waiting:
        self._send(json.dumps(dict(env)).encode())
        return self

    def abort(self) -> None:
        self._send(b"")
        self.wait()

    def _send(self, data: bytes) -> None:
        if self._go_fd is None:
            return
        try:
            with open(self._go_fd, "wb") as f:
                f.write(data)
        except OSError:
            pass  # the copy is gone (a signal): wait() says how it ended
        self._go_fd = None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # never signal a pid that may have been reused
            os.kill(self.pid, signum)

    def wait(self) -> int:
        """Its end as subprocess says it: the exit code, or -N for signal N."""
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _run_when_told(command: PythonCommand, read_fd: int) -> NoReturn:
    before = {sig: signal.getsignal(sig) for sig in _STOPS}
    for sig in _STOPS:  # stopped while waiting: leave quietly, as the interpreter not yet started would
        signal.signal(sig, signal.SIG_DFL)
    with open(read_fd, "rb") as f:
        data = f.read()
    if not data:
        os._exit(0)  # the launcher gave up before the command started; nothing of it ran
    for sig, handler in before.items():
        signal.signal(sig, handler)
    run(command, json.loads(data))
    raise SystemExit(0)


def run(command: PythonCommand, env: Mapping[str, str]) -> None:
    """Run `command` in this process as python would, with `env` as the environment."""
    os.environ.clear()
    os.environ.update(env)
    sys.argv[:] = list(command.argv)
    folder = os.getcwd() if command.module else os.path.dirname(os.path.realpath(command.path or "."))
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.insert(0, folder)
    sys.excepthook = _from_the_command(sys.excepthook)
    if command.module:
        runpy.run_module(command.module, run_name="__main__", alter_sys=True)
    else:
        # python gives a script an absolute __file__ (and keeps argv[0] as given; runpy sets it to this)
        runpy.run_path(os.path.abspath(command.path or ""), run_name="__main__")


# The frames above the command's own: python's traceback of a script starts at the script.
_OURS = frozenset({runpy.run_path.__code__.co_filename, __file__,
                   os.path.join(os.path.dirname(__file__), "launch.py"),
                   os.path.join(os.path.dirname(os.path.dirname(__file__)), "launch.py")})


_Hook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


def _from_the_command(hook: _Hook) -> _Hook:
    def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        own = tb
        while own is not None and own.tb_frame.f_code.co_filename in _OURS:
            own = own.tb_next
        if own is not None:
            value = value.with_traceback(own)  # what the hook prints, not only what it is given
        hook(kind, value, own or tb)

    return excepthook
