"""The files a Flyte task's gang shares with its caller, and what a rank does with them.

A local run writes FOLDER/call.pkl: first the caller's `sys.path` (plain pickle, so that the task's
module imports from where the caller imported it), then the task's function and its inputs, pickled
with cloudpickle as Flyte's own Elastic plugin pickles them (the function by value: its module's name
is bound to the task, not to the function; the modules it uses by name). Every rank calls the
function; rank 0 writes what it returned to FOLDER/result.pkl, and a rank whose function raised
writes the error to FOLDER/error-A-R-rank-N.txt (A the attempt, R the whole-gang restart within it)
before exiting 1 with the traceback in its log: the caller reports only the errors of the gang's
last start, never a stale one from an earlier attempt. A value that cannot be pickled cannot reach
the caller, and no rerun changes that: rank 0 writes why to FOLDER/result-error.txt and exits 0, so
the gang is not retried for it and the caller raises that one error. A function that returns
because its gang is being stopped (it saw the stop notice: a preemption, a drain) leaves no result:
the gang runs again and returns later. A rerun of the same rank (a readmission) writes them again.

On a cluster, every rank runs Flyte's entrypoint, which reads the inputs and writes the outputs at the
paths of its arguments; ranks other than 0 get an `--outputs-path` of their own, so rank 0's outputs
are the task's.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gangrun._ckpt import notice
from gangrun._worker.context import context

CALL = "call.pkl"
RESULT = "result.pkl"
RESULT_ERROR = "result-error.txt"
OUTPUTS_FLAG = "--outputs-path"


def error_file(rank: int, *, attempt: int, restart: int) -> str:
    return f"error-{attempt}-{restart}-rank-{rank}.txt"


def write_call(folder: Path, func: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    import cloudpickle  # Flyte's dependency: this module is imported by workers that may not need it

    with open(folder / CALL, "wb") as f:
        pickle.dump([p or os.getcwd() for p in sys.path], f)
        cloudpickle.dump((func, kwargs), f)


def read_result(folder: Path) -> Any:
    with open(folder / RESULT, "rb") as f:
        return pickle.load(f)


def read_result_error(folder: Path) -> str | None:
    """Why rank 0's value could not be handed back (it does not pickle), or None."""
    path = folder / RESULT_ERROR
    return path.read_text().strip() if path.exists() else None


def read_errors(folder: Path, *, attempt: int) -> dict[int, str]:
    """Each failed rank's error, by rank, from the newest whole-gang restart of `attempt` that has any: an
    earlier attempt's or restart's errors are not why this one ended."""
    found: dict[int, dict[int, str]] = {}
    for p in folder.glob(f"error-{attempt}-*-rank-*.txt"):
        _, _, restart, _, rank = p.stem.split("-")
        found.setdefault(int(restart), {})[int(rank)] = p.read_text().strip()
    return dict(sorted(found[max(found)].items())) if found else {}


def rank_args(args: Sequence[str], rank: int) -> list[str]:
    """Flyte's entrypoint arguments for `rank`: rank 0's as given; another rank writes its outputs beside them."""
    out = list(args)
    if rank != 0:
        for i, a in enumerate(out[:-1]):
            if a == OUTPUTS_FLAG:
                out[i + 1] = f"{out[i + 1].rstrip('/')}/rank-{rank}"
    return out


def run_call(folder: Path, rank: int) -> int:
    with open(folder / CALL, "rb") as f:
        path = pickle.load(f)
        sys.path[:0] = [p for p in path if p not in sys.path]
        func, kwargs = pickle.load(f)
    try:
        value = func(**kwargs)
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
    except Exception as e:
        ctx = context()
        name = error_file(rank, attempt=ctx.attempt or 1, restart=ctx.restart_attempt)
        _write(folder / name, f"{type(e).__name__}: {e}".encode())
        raise
    if rank == 0 and notice.STATE.notice is None:  # a stopped gang's value is not the task's: it runs again
        import cloudpickle

        try:
            data = cloudpickle.dumps(value)
        except Exception as e:  # pickling raises whatever the object's __reduce__ raises
            _write(folder / RESULT_ERROR, f"its return value, a {_type_name(value)}, cannot be pickled "
                                          f"({type(e).__name__}: {e}); a local run's outputs must pickle".encode())
            return 0
        _write(folder / RESULT, data)
        (folder / RESULT_ERROR).unlink(missing_ok=True)  # an earlier attempt's: this attempt's value is the one
    return 0


def _type_name(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
