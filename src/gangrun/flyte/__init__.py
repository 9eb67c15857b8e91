"""Run a Flyte 2 task as a gangrun gang: every rank runs the task, rank 0's return value is the result.

    import flyte, gangrun.flyte

    env = flyte.TaskEnvironment(name="train", plugin_config=gangrun.flyte.Gang(nodes=2))

    @env.task(retries=2)
    def train(epochs: int) -> float: ...

    flyte.with_runcontext(mode="local").run(train, epochs=3)   # a gang on the local backend

Importing this package registers `Gang` with the Flyte SDK's task plugin registry, so a
`TaskEnvironment` with a `Gang` makes `GangTask`s. `gangrun.flyte.connector` is the Flyte connector
that runs the same tasks on a Kubernetes cluster with gangrun's controller (Flyte's connector service
finds it through the `flyte.connectors` entry point). It needs the `flyte` extra
(``pip install 'gangrun[flyte]'``); the rest of gangrun never imports Flyte.
"""

from __future__ import annotations

try:
    import flyte as _flyte  # noqa: F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("gangrun.flyte needs the Flyte SDK: pip install 'gangrun[flyte]'") from e

from gangrun.flyte._gang import Gang
from gangrun.flyte._task import GangTask

__all__ = ["Gang", "GangTask"]
