"""Readers of one field of a parsed document: each checks the value's type and bounds and names the
field's path in its `SpecError` (e.g. `spec.nodes: must be >= 1, got 0`).

The manifest (`spec.py`) reads every field of a `ClusteredTask` through these; what a field may hold
beyond its type (names, the environment, resources, the bounds on counts) is decided there.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gangrun._core.units import parse_duration
from gangrun._errors import SpecError


def kind(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "nothing"}.get(
        type(v), type(v).__name__)


def clip(v: Any) -> str:
    """A value for an error line: a 5,000-digit number stays short (and str() of it would raise)."""
    if isinstance(v, int) and v.bit_length() > 64:
        return "a number with more than 19 digits"
    r = repr(v)
    return r if len(r) <= 60 else r[:40] + "…" + r[-10:]


def at(path: str, key: Any) -> str:
    """The dotted path of `key` under `path`; a key that would break the one-line error is quoted."""
    name = key if isinstance(key, str) and key.isprintable() and 0 < len(key) <= 60 else clip(key)
    return f"{path}.{name}" if path else name


def check_unicode(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise SpecError(path, f"contains {text[e.start]!r}, a lone surrogate that is not valid Unicode") from None


def expect(doc: dict[str, Any], key: str, value: str) -> None:
    if doc.get(key) != value:
        raise SpecError(key, f"must be {value}, got {clip(doc.get(key))}")


def mapping(doc: dict[str, Any], key: str, path: str, default: dict[str, Any] | None = None) -> dict[str, Any]:
    v = doc.get(key, default)
    if v is None and default is None:
        raise SpecError(path, "is required")
    if not isinstance(v, dict):
        raise SpecError(path, f"must be a mapping, got {kind(v)}")
    return v


def no_unknown(doc: dict[str, Any], path: str, known: set[str]) -> None:
    for key in doc:
        if key not in known:
            raise SpecError(at(path, key), f"unknown field (known: {', '.join(sorted(known))})")


def int_field(doc: dict[str, Any], key: str, path: str, *, minimum: int, maximum: int = 1_000_000,
              default: int | None = None, required: bool = False) -> int:
    if key not in doc:
        if required:
            raise SpecError(path, "is required")
        assert default is not None
        return default
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(path, f"must be a whole number, got {clip(v)}")
    if v < minimum:
        raise SpecError(path, f"must be >= {minimum}, got {clip(v)}")
    if v > maximum:
        raise SpecError(path, f"must be <= {maximum}, got {clip(v)}")
    return v


def bool_field(doc: dict[str, Any], key: str, path: str, *, default: bool = False) -> bool:
    v = doc.get(key, default)
    if not isinstance(v, bool):
        raise SpecError(path, f"must be true or false, got {clip(v)}")
    return v


def str_field(doc: dict[str, Any], key: str, path: str, *, default: str) -> str:
    v = doc.get(key, default)
    if not isinstance(v, str):
        raise SpecError(path, f"must be a string, got {kind(v)}")
    return v


def path_field(doc: dict[str, Any], key: str, path: str, *, default: str) -> str:
    v = str_field(doc, key, path, default=default)
    no_nul(v, path)
    return v


def duration_field(doc: dict[str, Any], key: str, path: str, *, default: timedelta | None,
                   positive: bool = False) -> timedelta | None:
    if doc.get(key) is None:
        return default
    try:
        d = parse_duration(doc[key])
    except ValueError as e:
        raise SpecError(path, str(e)) from None
    if positive and d <= timedelta(0):
        raise SpecError(path, f"must be longer than 0s, got {clip(doc[key])}")
    return d


def no_nul(text: str, path: str) -> None:
    """No process argument, variable or path can hold a NUL byte (YAML can spell one as "\\0")."""
    if "\0" in text:
        raise SpecError(path, "contains a NUL byte, which no process argument, variable or path can hold")
