"""A rank of a connector's gang that its gang stops while it runs, through Flyte's own entrypoint (`a0`,
as in a pod): the stop notice reaches a plain function, which Flyte calls on a thread of its own, and the
rank ends with status 143 without writing outputs, so rank 0's value at a stop never becomes the task's
(gangrun.flyte._task.run_rank)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from .conftest import require_flyte

require_flyte()

from flyte._internal.runtime.convert import convert_from_native_to_inputs  # noqa: E402
from flyte._internal.runtime.io import upload_inputs  # noqa: E402

from gangrun.flyte.connector import clustered_task_doc  # noqa: E402

from . import connector_calls, gang_tasks  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def test_a_rank_stopped_while_its_function_runs_exits_143_and_writes_no_outputs(tmp_path: Path) -> None:
    run_base = tmp_path / "run"
    prefix = run_base / "a0"
    prefix.mkdir(parents=True)
    task = gang_tasks.stopped_while_running
    inputs = asyncio.run(convert_from_native_to_inputs(task.native_interface))
    asyncio.run(upload_inputs(inputs, str(prefix / "inputs.pb")))
    doc = clustered_task_doc(connector_calls.template(task, str(prefix)),
                             connector_calls.execution_metadata(str(run_base), service_account=""), None)
    spec = doc["spec"]
    # What the backend gives rank 0 of a 2-rank gang (a clustered worker to Flyte), on this interpreter.
    env = {**os.environ, **spec["env"], "GANGRUN_TASK": "stopped", "GANGRUN_ATTEMPT": "1", "RANK": "0",
           "WORLD_SIZE": "2", "NNODES": "2", "NODE_RANK": "0", "TORCHELASTIC_RUN_ID": "stopped",
           "GANGRUN_GRACE_PERIOD": "20", "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    command = [sys.executable, *spec["command"][1:]]  # python -m gangrun.flyte._worker flyte a0 ...
    r = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert "saw the stop notice; returning early" in out, out  # the hook ran: the handler was installed
    assert r.returncode == 143, out  # stopped, not done: never a success, never a crash
    assert sorted(p.name for p in prefix.iterdir()) == ["inputs.pb"], out  # no outputs.pb, no error.pb
