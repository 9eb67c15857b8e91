"""The public surface is a list, and this test keeps it honest: every name in `__all__`, nothing else."""

from __future__ import annotations

import subprocess
import sys

import gangrun

PUBLIC = ["BackendError", "Checkpoint", "ClusteredTask", "Context", "GangrunError", "SpecError", "TaskRun",
          "UsageError", "WaitTimeout", "attach", "context", "purge_checkpoints", "submit"]


def test_all_is_sorted_and_is_exactly_the_public_names() -> None:
    assert gangrun.__all__ == sorted(gangrun.__all__)
    assert gangrun.__all__ == PUBLIC


def test_every_exported_name_resolves_and_nothing_else_is_public() -> None:
    for name in gangrun.__all__:
        assert getattr(gangrun, name) is not None, name
    assert set(gangrun.__all__) <= set(dir(gangrun))
    assert not [n for n in dir(gangrun) if not n.startswith("_") and n not in PUBLIC and not _is_module(n)]


def _is_module(name: str) -> bool:
    return type(getattr(gangrun, name)).__name__ == "module"  # subpackages (gangrun.checkpoint, gangrun.cli)


def test_import_gangrun_in_a_worker_does_not_load_the_launching_api_or_a_backend() -> None:
    code = ("import sys, gangrun; gangrun.context; "
            "print(sorted(m for m in sys.modules if m.startswith(('gangrun._api', 'gangrun._backends', 'yaml'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
