"""`ClusteredTask`: a manifest validated as `gangrun validate` and `gangrun submit` validate it.

Built from keywords, every one checked by the same parser and naming the same field in its error:

    task = gangrun.ClusteredTask(generate_name="train-", nodes=2, command=["python", "train.py"],
                                 resources={"cpu": "1", "memory": "1Gi"}, resume_after_preemption=True)

or read from a file (YAML or JSON, `-` for standard input) with `ClusteredTask.from_file(path)`, or
from a parsed document with `ClusteredTask.from_dict(doc)`.

Keywords are the manifest's field names in snake_case (`nproc_per_node` is `spec.nprocPerNode`, and a
field added to the manifest later works the same way); `max_restarts`, `resume_after_preemption` (and
any other `failurePolicy` field) may be given at the top, `checkpoint_uri` stands for
`checkpoint: {uri: ...}` and `resume_from` for `checkpoint: {resumeFrom: ...}` (a task name or a
checkpoint URI to start from); a field given by two keywords is refused, naming both. Durations take
a `timedelta`, seconds, or text such as `"1h30m"`.
"""

from __future__ import annotations

import copy
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from gangrun._core import spec as core_spec
from gangrun._core.spec import TaskSpec, parse_manifest
from gangrun._errors import SpecError
from gangrun._manifest_file import load_manifest

METADATA = {"name": "name", "generate_name": "generateName", "namespace": "namespace", "labels": "labels",
            "annotations": "annotations"}
# failurePolicy's fields, accepted at the top level too (the manifest nests them).
FAILURE_POLICY = ("max_restarts", "resume_after_preemption", "restart_on_disruption")
# checkpoint's fields, by their keywords.
CHECKPOINT = {"checkpoint_uri": "uri", "resume_from": "resumeFrom"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _value(v: Any) -> Any:
    """A Python value as the manifest spells it: durations in seconds, paths and tuples as text and lists."""
    if isinstance(v, timedelta):
        return f"{v.total_seconds():g}s"
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, tuple):
        return [_value(x) for x in v]
    if isinstance(v, list):
        return [_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _value(x) for k, x in v.items()}
    return v


def manifest_from_keywords(options: dict[str, Any]) -> dict[str, Any]:
    """The manifest document that `ClusteredTask(**options)` stands for (not yet validated).

    Two keywords that set the same field (`max_restarts=2` and `failure_policy={"maxRestarts": 1}`,
    `checkpoint_uri` and `checkpoint={"uri": ...}`, `nproc_per_node` and `nprocPerNode`) are refused
    naming both: neither silently wins.
    """
    metadata: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    given: dict[str, str] = {}  # manifest path -> the keyword that set it

    def put(doc: dict[str, Any], path: str, key: str, v: Any, keyword: str) -> None:
        if path in given:
            raise SpecError(path, f"is given twice, as {given[path]} and as {keyword}; give one")
        given[path] = keyword
        doc[key] = v

    nested: list[tuple[str, str, str, Any]] = []  # (mapping, field, keyword, value): after the mappings themselves
    for key, v in options.items():
        if v is None:
            continue
        shown = f"{key}={_clip(v)}"
        if key in METADATA:
            put(metadata, f"metadata.{METADATA[key]}", METADATA[key], _value(v), shown)
        elif key in FAILURE_POLICY:
            nested.append(("failurePolicy", _camel(key), shown, _value(v)))
        elif key in CHECKPOINT:
            nested.append(("checkpoint", CHECKPOINT[key], shown, _value(v)))
        else:
            camel = _camel(key)
            put(spec, f"spec.{camel}", camel, _value(v), shown)
            if isinstance(spec[camel], dict):  # its fields count as given by this keyword
                for field in spec[camel]:
                    given[f"spec.{camel}.{field}"] = f"{key}[{field!r}]={_clip(spec[camel][field])}"
    for parent, field, keyword, v in nested:
        doc = spec.setdefault(parent, {})
        if isinstance(doc, dict):  # anything else is refused by the parser, naming spec.<parent>
            put(doc, f"spec.{parent}.{field}", field, v, keyword)
    return {"apiVersion": core_spec.API_VERSION, "kind": core_spec.KIND, "metadata": metadata, "spec": spec}


def _clip(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:30] + "…" + r[-5:]


class ClusteredTask:
    """A validated `ClusteredTask` manifest, ready for `gangrun.submit`. Raises SpecError naming the field."""

    def __init__(self, *, name: str | None = None, generate_name: str | None = None, **spec: Any) -> None:
        self._spec = parse_manifest(manifest_from_keywords({"name": name, "generate_name": generate_name, **spec}))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ClusteredTask:
        """Read a manifest file (YAML or JSON; "-" is standard input). A relative `workingDir` is relative to
        the file's folder on the local backend."""
        return cls._of(load_manifest(os.fspath(path)))

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ClusteredTask:
        """A manifest already parsed into a dict (the document is copied, never changed)."""
        return cls._of(parse_manifest(copy.deepcopy(doc)))

    @classmethod
    def _of(cls, spec: TaskSpec) -> ClusteredTask:
        task = cls.__new__(cls)
        task._spec = spec
        return task

    @property
    def spec(self) -> TaskSpec:
        """The validated model (gangrun's internal `TaskSpec`)."""
        return self._spec

    @property
    def name(self) -> str:
        """`metadata.name`; "" when the backend will make one from `generate_name`."""
        return self._spec.name

    @property
    def generate_name(self) -> str:
        return self._spec.generate_name

    @property
    def source(self) -> Path | None:
        """The file it was read from, if any."""
        return Path(self._spec.source) if self._spec.source else None

    def to_dict(self) -> dict[str, Any]:
        """The manifest document, as `gangrun validate -o json` would accept it back."""
        return copy.deepcopy(self._spec.raw)

    def __repr__(self) -> str:
        who = f"name={self.name!r}" if self.name else f"generate_name={self.generate_name!r}"
        return f"ClusteredTask({who}, nodes={self._spec.nodes}, command={list(self._spec.command)!r})"
