"""The connector's pure part: a Flyte task template's gang as a manifest, and a gang's phase as Flyte's.

`GangTask.custom_config` ships the gang's manifest with the worker's command but not Flyte's entrypoint
arguments, which only the rendered container has; `manifest_doc` joins them. The manifest travels as
JSON text: Flyte's `custom` is a protobuf Struct, whose numbers are all floats, and `nodes: 2.0` is not
a whole number to the manifest's parser. `flyte_phase` maps
gangrun's phases one to one onto Flyte's `TaskExecution` phases (the names are the same concepts).
A preempted gang waiting for readmission stays `Running` in gangrun (its reason says it waits), so
Flyte sees `RUNNING`, never a failure: a preemption costs the Flyte task no retry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gangrun._errors import SpecError

__all__ = ["PHASES", "flyte_phase", "manifest_doc"]

PHASES = {
    "Queued": "QUEUED",
    "WaitingForResources": "WAITING_FOR_RESOURCES",
    "Initializing": "INITIALIZING",
    "Running": "RUNNING",
    "Succeeded": "SUCCEEDED",
    "Failed": "FAILED",
    "Aborted": "ABORTED",
}


def flyte_phase(phase: str) -> str:
    """The name of Flyte's `TaskExecution.Phase` for a gangrun phase; an unknown one is `UNDEFINED`."""
    return PHASES.get(phase, "UNDEFINED")


def manifest_doc(custom: dict[str, Any], key: str, *, args: Sequence[str], image: str,
                 namespace: str | None) -> dict[str, Any]:
    """The ClusteredTask document of a task template: its custom manifest, the container's arguments
    appended to the command, the container's image unless the manifest names one, and the namespace."""
    text = custom.get(key)
    try:
        doc = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict):
        raise SpecError("custom", f"a gangrun task template carries its manifest as JSON text under {key!r}; "
                                  f"this one has {sorted(custom)}")
    spec = doc["spec"]
    spec["command"] = [*spec.get("command", []), *args]
    if image and not spec.get("image"):
        spec["image"] = image
    if namespace:
        doc.setdefault("metadata", {})["namespace"] = namespace
    return doc
