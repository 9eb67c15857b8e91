"""`Gang`: the plugin config of a Flyte task that runs as a gangrun gang, and the manifest it stands for.

Everything here is pure: a `Gang` and the Flyte task's own settings (its name, retries, resources)
become one validated `gangrun.ClusteredTask`, through the same parser as `gangrun validate`, so a bad
value fails when the `Gang` is made and the error names the manifest field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangrun._api.task import ClusteredTask
from gangrun._errors import SpecError

__all__ = ["Gang", "gang_name_prefix", "resources_of"]

NAME_PREFIX_MAX = 40  # the backend appends a unique suffix; leave room in a 63-character name
_NOT_NAME = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, kw_only=True)
class Gang:
    """Run every call of the task as a gangrun `ClusteredTask` of `nodes` × `nproc_per_node` ranks.

    `retries` are gangrun's user retries; None takes the Flyte task's own `retries=` (Flyte itself
    then retries nothing, so a failure is never retried twice). Preemption, node loss and the
    gang's own restarts never use them. `resources` are per node (``{"cpu": "1", "memory": "1Gi"}``);
    None takes the task environment's `flyte.Resources`, else gangrun's default. `min_nodes` is the
    manifest's `spec.minNodes`: below `nodes` the gang is elastic (docs/elastic.md; on either
    backend). `options` are any other
    `gangrun.ClusteredTask` keyword (`termination_grace_period`, `max_runtime`, `checkpoint_uri`,
    `env`, `image`, `max_system_retries`, ...).
    """

    nodes: int
    nproc_per_node: int = 1
    resume_after_preemption: bool = True
    retries: int | None = None
    max_restarts: int = 0
    queue: str | None = None
    priority_class: str | None = None
    resources: Mapping[str, Any] | None = None
    min_nodes: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        taken = sorted(set(self.options) & (set(_OWN_KEYWORDS) | set(_SET_BY_PLUGIN)))
        if taken:
            key = taken[0]
            raise SpecError(f"Gang.options.{key}",
                            _SET_BY_PLUGIN.get(key) or f"is a field of Gang itself: give {key}= to Gang")
        self.manifest(name_prefix="check", command=["true"])  # validates every field now, naming it

    def manifest(self, *, name_prefix: str, command: Sequence[str], retries: int = 0,
                 resources: Mapping[str, Any] | None = None, **more: Any) -> ClusteredTask:
        """The `ClusteredTask` of one call: `command` on every rank, `retries` unless the Gang sets its own,
        `resources` unless the Gang sets its own; `more` are further manifest keywords (working_dir, env)."""
        return ClusteredTask(
            generate_name=gang_name_prefix(name_prefix), nodes=self.nodes, nproc_per_node=self.nproc_per_node,
            command=list(command), resume_after_preemption=self.resume_after_preemption,
            retries=self.retries if self.retries is not None else retries, max_restarts=self.max_restarts,
            queue=self.queue, priority_class=self.priority_class,
            min_nodes=self.min_nodes,
            resources=dict(self.resources) if self.resources is not None else (dict(resources) if resources else None),
            **{**self.options, **more})


_OWN_KEYWORDS = ("nodes", "nproc_per_node", "resume_after_preemption", "retries", "max_restarts", "queue",
                 "priority_class", "resources", "min_nodes")
# Manifest keywords the plugin sets itself, none of them a field of Gang: why each cannot be given.
_SET_BY_PLUGIN = {
    "name": "cannot be set: each call's gang is named after the Flyte task (with a unique suffix)",
    "generate_name": "cannot be set: each call's gang is named after the Flyte task (with a unique suffix)",
    "command": "cannot be set: the task's function is every rank's command",
}


def gang_name_prefix(task_name: str) -> str:
    """A Flyte task name ("train.train", "my_env.Fit") as the generateName of its gangs: "train-train-"."""
    base = _NOT_NAME.sub("-", task_name.lower()).strip("-")[:NAME_PREFIX_MAX].rstrip("-")
    if not base or not base[0].isalpha():
        base = f"flyte-{base}".rstrip("-")
    return base + "-"


def resources_of(flyte_resources: Any) -> dict[str, Any] | None:
    """gangrun's per-node resources from a `flyte.Resources` (cpu, memory, gpu; a (request, limit) pair
    counts its request). None when it sets none of them. A GPU given as a device model is refused: gangrun
    asks for a count, so such a task names its resources in `Gang(resources=...)`."""
    if flyte_resources is None:
        return None
    out: dict[str, Any] = {}
    for key in ("cpu", "memory", "gpu"):
        value = getattr(flyte_resources, key, None)
        if isinstance(value, tuple):
            value = value[0]
        if value is None:
            continue
        if key == "gpu" and not isinstance(value, int):
            raise SpecError("Gang.resources", f"the task's GPU is {value!r}; gangrun asks for a number of GPUs "
                                              "per node: give Gang(resources={'gpu': N, ...})")
        out[key] = value if key == "gpu" else str(value)
    return out or None
