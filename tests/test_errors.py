"""The error tree holds only errors gangrun raises: a class nothing raises or catches is dead code."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from gangrun import _errors

SRC = Path(_errors.__file__).resolve().parent
CLASSES = [name for name, obj in vars(_errors).items()
           if inspect.isclass(obj) and obj.__module__ == _errors.__name__]


@pytest.mark.parametrize("name", CLASSES)
def test_every_error_class_is_used_outside_its_definition(name: str) -> None:
    users = [p for p in SRC.rglob("*.py") if p.name != "_errors.py" and name in p.read_text()]
    assert users, f"{name} is defined in gangrun._errors but nothing in the package uses it"


def test_the_docstring_tree_names_every_class() -> None:
    doc = _errors.__doc__ or ""
    assert [c for c in CLASSES if c not in doc] == []
