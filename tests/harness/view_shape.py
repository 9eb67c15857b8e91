"""Hold a JSON document to a TypedDict of `gangrun._core.view_types`: every key it has is declared, every
required key is there, and so on down its nested documents. What the type checker does for the code,
at run time for what the code produced (a key renamed on one side only fails here)."""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict


def check_shape(doc: Any, tp: Any, where: str = "view") -> None:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if doc is None and type(None) in get_args(tp):
            return
        problems = []
        for option in (a for a in get_args(tp) if a is not type(None)):
            try:
                check_shape(doc, option, where)
                return
            except AssertionError as e:
                problems.append(str(e))
        raise AssertionError(f"{where}: fits none of {tp}: {problems}")
    if is_typeddict(tp):
        assert isinstance(doc, dict), f"{where}: {doc!r} is not a {tp.__name__}"
        hints = get_type_hints(tp)
        missing, undeclared = tp.__required_keys__ - set(doc), set(doc) - set(hints)
        assert not missing and not undeclared, \
            f"{where}: {tp.__name__} misses {sorted(missing)}, does not declare {sorted(undeclared)}"
        for key, value in doc.items():
            check_shape(value, hints[key], f"{where}.{key}")
        return
    if origin is list:
        assert isinstance(doc, list), f"{where}: {doc!r} is not a list"
        for i, item in enumerate(doc):
            check_shape(item, get_args(tp)[0], f"{where}[{i}]")
        return
    if origin is dict:
        assert isinstance(doc, dict), f"{where}: {doc!r} is not a mapping"
        for key, value in doc.items():
            assert isinstance(key, str), f"{where}: key {key!r}"
            check_shape(value, get_args(tp)[1], f"{where}.{key}")
        return
    if tp in (Any, object):
        return
    if tp is float:
        assert isinstance(doc, int | float) and not isinstance(doc, bool), f"{where}: {doc!r} is not a number"
        return
    if tp is int:
        assert isinstance(doc, int) and not isinstance(doc, bool), f"{where}: {doc!r} is not an int"
        return
    assert isinstance(doc, tp), f"{where}: {doc!r} is not {tp.__name__}"
