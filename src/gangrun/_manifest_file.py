"""Reading a manifest file: bytes → UTF-8 text → a YAML or JSON document → `TaskSpec`.

The pure model (`gangrun._core.spec`) takes an already-parsed document; this module is the I/O in
front of it, and it is where hostile input is bounded, so that a manifest costs at most
`MAX_BYTES` of reading and a parse that cannot blow up:

- the file (or stdin, for `-`) is read up to `MAX_BYTES` and refused beyond it;
- the text must be UTF-8;
- YAML aliases (`*name`) are refused: one short alias chain expands to gigabytes (an "alias bomb"),
  and a task manifest has no need for them;
- nesting deeper than `spec.DEPTH_MAX` is refused while parsing, before Python's recursion limit;
- a key given twice in one mapping is refused instead of the last one silently winning;
- YAML timestamps stay strings (Kubernetes reads manifests as JSON, where `2024-01-01` is a string).

Every problem is a `SpecError` of one line, naming the field where there is one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from gangrun._core.spec import DEPTH_MAX, TaskSpec, parse_manifest
from gangrun._errors import SpecError

MAX_BYTES = 1 << 20  # 1 MiB: the API server's own limit on an object is about 1.5 MB
STDIN = "-"


def load_manifest(path: str | Path, *, stdin: BinaryIO | None = None) -> TaskSpec:
    """Read, parse and validate the manifest at `path` (`-`: standard input). Raises SpecError."""
    where = str(path)
    data = _read(where, stdin)
    doc = parse_document(data, where=where, json_=where.endswith(".json"))
    # A relative workingDir is taken from the manifest's folder; for stdin, from the current one.
    return parse_manifest(doc, source="" if where == STDIN else where)


def parse_document(data: bytes, *, where: str = STDIN, json_: bool = False) -> Any:
    """The document in `data` (JSON when `json_`, else YAML, of which JSON is a subset)."""
    if len(data) > MAX_BYTES:
        raise SpecError("", f"{where}: larger than {MAX_BYTES // 1024} KiB; a manifest is a few lines")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError("", f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    text = text.removeprefix("\ufeff")  # a byte order mark some editors write
    if json_:
        return _json(text, where)
    return _yaml(text, where)


def _read(where: str, stdin: BinaryIO | None) -> bytes:
    # Read one byte past the cap: enough to know the input is too large without reading all of it.
    if where == STDIN:
        return (stdin or sys.stdin.buffer).read(MAX_BYTES + 1)
    try:
        with open(where, "rb") as f:
            return f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpecError("", f"{where}: no such file") from None
    except OSError as e:
        raise SpecError("", f"{where}: {e.strerror or e}") from None


# -- JSON -------------------------------------------------------------------------------------------


class _Pairs(dict[str, Any]):
    """A JSON object that had a key twice; `duplicate` is that key. Found by `_duplicate_path`."""

    duplicate: str = ""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            dup = _Pairs(out)
            dup.duplicate = key
            return dup
        out[key] = value
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a manifest can hold")


def _json(text: str, where: str) -> Any:
    try:
        doc = json.loads(text, object_pairs_hook=_object, parse_constant=_refuse_constant)
    except RecursionError:
        raise SpecError("", f"{where}: nested more than {DEPTH_MAX} levels deep") from None
    except ValueError as e:  # JSONDecodeError, NaN/Infinity, an integer of thousands of digits
        raise SpecError("", f"{where}: not valid JSON: {_one_line(e)}") from None
    path = _duplicate_path(doc, "", 0)
    if path is not None:
        raise SpecError(path, "is given twice; each key may appear once")
    return doc


def _duplicate_path(v: Any, path: str, depth: int) -> str | None:
    if depth > DEPTH_MAX:
        raise SpecError(path, f"is nested more than {DEPTH_MAX} levels deep")
    if isinstance(v, _Pairs):
        return _join(path, v.duplicate)
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for key, item in items:
        found = _duplicate_path(item, f"{path}[{key}]" if isinstance(key, int) else _join(path, key), depth + 1)
        if found is not None:
            return found
    return None


# -- YAML -------------------------------------------------------------------------------------------


# libyaml when present: the pure-Python parser takes seconds on a large file.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _scan(text: str, where: str) -> None:
    """Walk the parser's event stream (iterative, in C) before building anything from it.

    Refuses aliases, whose expansion is exponential in the input's size, and nesting deeper than
    `DEPTH_MAX`, before a recursive composer or constructor sees it.
    """
    depth = 0
    for event in yaml.parse(text, Loader=_SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise SpecError("", f"{where}: {_line(event)}: YAML aliases (*{event.anchor}) are not accepted in a "
                                "manifest; write the value out")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > DEPTH_MAX + 1:  # the root collection is level 1 here and level 0 in the core
                raise SpecError("", f"{where}: {_line(event)}: nested more than {DEPTH_MAX} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _line(event: yaml.Event) -> str:
    return f"line {event.start_mark.line + 1}" if event.start_mark else "input"


def _yaml(text: str, where: str) -> Any:
    loader: yaml.SafeLoader | None = None
    try:
        _scan(text, where)
        loader = _SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, "")
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError("", f"{where}: not valid YAML{at}: {_one_line(e.problem or e.context or e)}") from None
    except yaml.reader.ReaderError as e:
        raise SpecError("", f"{where}: not valid YAML: {e.reason} (#x{e.character:04x} at offset {e.position})") \
            from None
    except yaml.YAMLError as e:
        raise SpecError("", f"{where}: not valid YAML: {_one_line(e)}") from None
    except (ValueError, OverflowError, TypeError) as e:  # a bad !!timestamp, an int of thousands of digits
        # The first clause only: Python's own advice after the ';' is not for manifest authors.
        raise SpecError("", f"{where}: not valid YAML: {_one_line(str(e).split(';')[0])}") from None
    finally:
        if loader is not None:
            loader.dispose()


_TIMESTAMP, _STR, _INT = "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:str", "tag:yaml.org,2002:int"
_DIGITS_MAX = 100  # far beyond any bound a field has; Python refuses to convert more than 4,300


def _check_nodes(node: yaml.Node, path: str) -> None:
    """Refuse a mapping with a key twice and an integer of hundreds of digits, naming them, and keep
    dates as text (Kubernetes reads manifests as JSON, where `2024-01-01` is a string). Nesting is
    already bounded by `_scan`."""
    if isinstance(node, yaml.ScalarNode) and node.tag == _TIMESTAMP:
        node.tag = _STR
    elif isinstance(node, yaml.ScalarNode) and node.tag == _INT and len(node.value) > _DIGITS_MAX:
        raise SpecError(path, f"a number of {len(node.value)} digits (line {node.start_mark.line + 1}) "
                              "is more than any field takes")
    elif isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else ""
            where = _join(path, name)
            if isinstance(key, yaml.ScalarNode):
                if name in seen:
                    raise SpecError(where, f"is given twice (line {key.start_mark.line + 1}); each key may appear once")
                seen.add(name)
            _check_nodes(key, path)
            _check_nodes(value, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_nodes(item, f"{path}[{i}]")


def _join(path: str, key: str) -> str:
    shown = key if key.isprintable() and len(key) <= 60 else repr(key[:60])
    return f"{path}.{shown}" if path else shown


def _one_line(e: object) -> str:
    """A parser's message on one line: PyYAML's span several lines with a caret drawing."""
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:300] + "…"
