"""What can be saved and how it comes back: bytes, a file, a directory tree (empty dirs included)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangrun import Checkpoint
from gangrun._errors import UsageError


def tree(root: Path) -> dict[str, bytes | None]:
    """A directory as {relative path: content, or None for a directory}."""
    out: dict[str, bytes | None] = {}
    for p in sorted(root.rglob("*")):
        out[p.relative_to(root).as_posix()] = None if p.is_dir() else p.read_bytes()
    return out


def make_tree(root: Path, spec: dict[str, bytes | None]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in spec.items():
        p = root / rel
        if content is None:
            p.mkdir(parents=True, exist_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content)
    return root


def test_bytes_round_trip_gives_a_file(store) -> None:
    ckpt = store(1)
    ckpt.save(b"\x00state\xff", step=3)
    path = store(1).load()
    assert path.is_file() and path.read_bytes() == b"\x00state\xff"


def test_file_round_trip_keeps_its_name(store, tmp_path) -> None:
    src = tmp_path / "model.pt"
    src.write_bytes(os.urandom(3000))
    store(1).save(src)
    path = store(1).load()
    assert path.name == "model.pt" and path.read_bytes() == src.read_bytes()


def test_directory_round_trip_preserves_structure_and_empty_dirs(store, tmp_path) -> None:
    spec = {"a/b/c.bin": os.urandom(5000), "a/empty": None, "deep/er/still-empty": None, "top.txt": b"", "x": b"1"}
    src = make_tree(tmp_path / "state", spec)
    store(1).save(src, step=10)
    path = store(1).load()
    assert path.is_dir() and tree(path) == tree(src)


def test_empty_directory_round_trips_as_empty_directory(store, tmp_path) -> None:
    (tmp_path / "nothing").mkdir()
    store(1).save(tmp_path / "nothing")
    path = store(1).load()
    assert path.is_dir() and list(path.iterdir()) == []


names = st.text(alphabet="abcxyz019_-.", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))
specs = st.dictionaries(
    st.lists(names, min_size=1, max_size=3).map("/".join),
    st.one_of(st.none(), st.binary(max_size=300)),
    max_size=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=specs)
def test_any_directory_tree_round_trips(tmp_path, spec) -> None:
    base = tmp_path / uuid.uuid4().hex
    try:
        src = make_tree(base / "src", spec)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        return  # a path used both as a file and as a folder: not a tree
    Checkpoint.for_path(str(base / "ck"), attempt=1).save(src)
    path = Checkpoint.for_path(str(base / "ck"), attempt=1, cache_dir=base / "cache").load()
    assert tree(path) == tree(src)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(12, TypeError, id="not-bytes-or-path"),
        pytest.param("/definitely/not/here", UsageError, id="missing-path"),
    ],
)
def test_save_refuses_what_it_cannot_save(store, data, error) -> None:
    with pytest.raises(error):
        store(1).save(data)


def test_step_must_be_an_int(store) -> None:
    with pytest.raises(TypeError):
        store(1).save(b"x", step="7")


def test_asyncio_forms_round_trip(store) -> None:
    async def main() -> tuple[bytes, str | None]:
        await store(1).asave(b"async-state", step=4)
        ckpt = store(1)
        path = await ckpt.aload()
        return path.read_bytes(), ckpt.loaded_from

    assert asyncio.run(main()) == (b"async-state", "own")


def test_non_writer_rank_saves_nothing_and_says_so(store, capsys) -> None:
    ckpt = store(1, rank=3)
    assert ckpt.save(b"x") is None and ckpt.save(b"y") is None
    assert capsys.readouterr().err.count("rank 3 does not write checkpoints") == 1
    assert store(1).load() is None
    assert store(1, rank=3, writer=True).save(b"z").seq == 1
