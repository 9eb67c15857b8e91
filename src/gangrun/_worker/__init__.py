"""The code that runs in a worker, never in the control plane (`.importlinter` holds both ways).

    context.py      `gangrun.context()`: rank, world size, attempt, the checkpoint, the stop notice
    launch.py       the pod's launcher behind `python -m gangrun.launch -- <command...>`
    live_report.py  what the launcher serves while the command runs: its newest checkpoint, the start id
    frameworks.py   what the framework integrations (gangrun.transformers, gangrun.lightning) share

The checkpoint internals (`gangrun._ckpt`) and the SDKs (`gangrun.checkpoint`, `gangrun.torch`, ...)
run in a worker too. What a worker and the control plane agree on is outside this package: the
environment (`_core/worker_env.py`), the checkpoint root (`_core/checkpoint_root.py`), the stop causes
(`_core/stop_causes.py`) and the report a launcher leaves in a pod (`gangrun/_checkpoint_report.py`,
which the Kubernetes backend reads back).
"""
