"""What every rank of a gang the `gangrun` connector makes runs, with real processes on the local backend:
the ClusteredTask the connector builds from Flyte's task template and create request (Flyte's entrypoint
`a0` with the template's arguments, the environment Flyte gives a task's pod) runs through Flyte's own
runtime on every rank, and rank 0 writes the task's outputs. The e2e test runs the connector against a
cluster whose kwok nodes run no containers; this is the same command and environment, run.

The object store is a folder here (Flyte's storage takes local paths); the pods' image does not apply on
the local backend, nor would a service account (the request names none here).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from .conftest import require_flyte

require_flyte()

from flyte._internal.runtime.convert import convert_from_native_to_inputs, convert_outputs_to_native  # noqa: E402
from flyte._internal.runtime.io import load_outputs, upload_inputs  # noqa: E402

import gangrun  # noqa: E402
from gangrun.flyte.connector import clustered_task_doc  # noqa: E402

from . import connector_calls, gang_tasks  # noqa: E402

pytestmark = pytest.mark.slow
TIMEOUT = 120.0
TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def test_every_rank_runs_flytes_entrypoint_with_a_flyte_pods_environment_and_rank_0_writes_the_outputs(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_base = tmp_path / "run"  # the run's prefix in the object store
    prefix = run_base / "a0"  # this action's: its inputs and outputs
    prefix.mkdir(parents=True)
    task = gang_tasks.hello
    inputs = asyncio.run(convert_from_native_to_inputs(task.native_interface, greeting="hi"))
    asyncio.run(upload_inputs(inputs, str(prefix / "inputs.pb")))
    doc = clustered_task_doc(connector_calls.template(task, str(prefix)),
                             connector_calls.execution_metadata(str(run_base), service_account=""), None)
    # The image's PATH and packages: this interpreter's `python` and `a0`, gangrun and the task's module.
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SRC), str(TESTS)]))

    run = gangrun.submit(gangrun.ClusteredTask.from_dict(doc), "local")
    final = run.wait(timeout=TIMEOUT)
    logs = {rank: run.logs(rank=rank) for rank in (0, 1)}
    assert final["phase"] == "Succeeded", f"{final.get('reason')}\n{logs}"
    for rank in (0, 1):
        assert f"hi from rank {rank} of 2 (attempt 1)" in logs[rank]  # the function ran on every rank
        assert "Flyte runtime completed for action a0 with run name r1" in logs[rank]  # through Flyte's entrypoint
    outputs = asyncio.run(load_outputs(str(prefix / "outputs.pb")))
    value = asyncio.run(convert_outputs_to_native(task.native_interface, outputs))
    assert value == "hi from rank 0 of 2 (attempt 1)"  # rank 0's return value is the task's output
    assert sorted(p.name for p in prefix.iterdir()) == ["inputs.pb", "outputs.pb"]  # no other rank wrote one
