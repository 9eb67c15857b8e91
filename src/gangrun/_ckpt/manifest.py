"""The manifest: the small document written last that makes a save a checkpoint.

It lists every file with its size and checksum and every directory (so empty ones come back), plus
what was saved (`kind`: bytes, file, dir, or sharded with one such part per rank) and the training
step. Readers trust nothing that the manifest does not list, and reject a file whose size or
checksum differs.

A CRC rather than a cryptographic hash: it detects torn and bit-rotted data, which is the threat
here, and must not dominate a save (benchmarks/bench_checkpoint.py). New manifests use CRC-32C
(the `crc32c` package, the CPU's CRC32 instruction where there is one), 14.9 GiB/s measured here
against 3.6 GiB/s for zlib's CRC-32, which had become a third of a sharded save's CPU time. The
file entries keep their field name ``crc32``; the manifest's ``checksum`` says which CRC it holds.

`format` and `checksum` are written in every manifest and checked on read, so a future change of
either is a new value that older readers refuse rather than misread; format 1 / crc32 manifests
(every manifest written before CRC-32C) stay readable.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar, cast

from gangrun._errors import CheckpointError

FORMAT = 1
#: The checksum new saves use.
CHECKSUM = "crc32c"
#: Every checksum a reader can verify: name -> (data, running value) -> new value.
def _crc32c(data: bytes | memoryview, value: int) -> int:
    # Imported on first use: the crc32c package reads its own version through importlib.metadata, tens
    # of milliseconds that every worker would pay at `import gangrun` before it checksums anything.
    import crc32c

    return crc32c.crc32c(data, value)


CHECKSUMS: dict[str, Callable[[bytes | memoryview, int], int]] = {"crc32": zlib.crc32, "crc32c": _crc32c}
#: Manifests written before the field existed.
_LEGACY_CHECKSUM = "crc32"
Kind = Literal["bytes", "file", "dir"]
SaveKind = Literal["bytes", "file", "dir", "sharded"]
_KINDS = ("bytes", "file", "dir")
#: A manifest is a small document; anything bigger is not one of ours (and is not parsed at all).
MAX_BYTES = 64 << 20
#: More parts than any gang has: bounds what a hostile manifest makes a reader allocate and check.
MAX_WORLD_SIZE = 1 << 16
_T = TypeVar("_T")


class ManifestError(CheckpointError):
    """A manifest exists but cannot be read: the checkpoint it commits is unusable."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to data/ (or to the part's folder), '/'-separated
    size: int
    crc32: int


@dataclass(frozen=True)
class Part:
    """One rank's part of a sharded save: what that rank passed to save(), as it is stored under
    ``data/rank-<rank>/``. Written by the rank as its part marker, then copied into the manifest."""

    rank: int
    kind: Kind
    name: str
    files: tuple[FileEntry, ...] = ()
    dirs: tuple[str, ...] = ()

    def to_doc(self) -> dict[str, Any]:
        return {"rank": self.rank, "kind": self.kind, "name": self.name,
                "files": [asdict(f) for f in self.files], "dirs": list(self.dirs)}  # fmt: skip

    @classmethod
    def from_doc(cls, doc: object, where: str = "part") -> Part:
        """Validate a part document; raises ManifestError naming the bad field."""
        d = _obj(doc, where)
        kind = _kind(d, where)
        files, dirs = _tree(d, where, kind)
        return cls(rank=_int(d, "rank", where, lo=0), kind=kind, name=_str(d, "name", where), files=files, dirs=dirs)


@dataclass(frozen=True)
class Manifest:
    kind: SaveKind
    name: str  # file name for bytes/file saves; "" for a directory or a sharded save
    seq: int
    attempt: int
    task: str | None
    rank: int
    step: int | None
    created: float
    files: tuple[FileEntry, ...] = ()
    dirs: tuple[str, ...] = ()  # every directory under data/, so empty ones are restored
    format: int = FORMAT
    checksum: str = field(default=CHECKSUM)
    world_size: int | None = None  # sharded saves: how many parts, one per rank 0..world_size-1
    parts: tuple[Part, ...] = ()

    def to_bytes(self) -> bytes:
        doc = asdict(self)
        doc["files"] = [asdict(f) for f in self.files]
        doc["dirs"] = list(self.dirs)
        if self.kind == "sharded":
            doc["parts"] = [p.to_doc() for p in self.parts]
        else:  # an unsharded manifest stays exactly what older readers know
            del doc["parts"], doc["world_size"]
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    def part(self, rank: int) -> Part | None:
        """Rank `rank`'s part of a sharded save; None when the save has no such rank."""
        return self.parts[rank] if 0 <= rank < len(self.parts) else None

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        """Parse and validate a manifest; raises ManifestError (and nothing else) saying what is wrong.

        One validating parser for the whole shape, so that no malformed body (valid JSON of the
        wrong shape, wrong types, huge or non-finite numbers, deep nesting, non-UTF-8 bytes, unsafe
        or clashing paths) reaches the loader as anything but ManifestError.
        """
        if len(raw) > MAX_BYTES:
            raise ManifestError(f"manifest is {len(raw)} bytes, more than any manifest gangrun writes")
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise ManifestError(f"manifest is not UTF-8 ({e.reason} at byte {e.start})") from None
        except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the parser's stack
            raise ManifestError(f"unreadable manifest: {type(e).__name__}: {str(e)[:200]}") from None
        d = _obj(doc, "manifest")
        if "format" not in d or type(d["format"]) is not int or d["format"] != FORMAT:
            raise ManifestError(f"unknown manifest format {_show(d.get('format'))}")
        checksum = d.get("checksum", _LEGACY_CHECKSUM)
        if not isinstance(checksum, str) or checksum not in CHECKSUMS:
            raise ManifestError(f"unknown checksum {_show(checksum)}")
        raw_kind = d.get("kind")
        step = d.get("step")
        task = d.get("task")
        if task is not None and not isinstance(task, str):
            raise ManifestError(f"manifest field 'task' must be a string or null, not {_show(task)}")
        name = _str(d, "name", "manifest")
        seq = _int(d, "seq", "manifest", lo=1)
        attempt = _int(d, "attempt", "manifest", lo=1)
        rank = _int(d, "rank", "manifest", lo=0) if "rank" in d else 0
        step_value = None if step is None else _int(d, "step", "manifest")
        created = _float(d, "created", "manifest")
        task = None if task is None else _text(task, "manifest field 'task'")
        if raw_kind == "sharded":
            world = _int(d, "world_size", "manifest", lo=1, hi=MAX_WORLD_SIZE)
            parts = tuple(Part.from_doc(p, f"part {i}") for i, p in enumerate(_list(d, "parts", "manifest")))
            if [p.rank for p in parts] != list(range(world)):
                ranks = [p.rank for p in parts][:8]
                raise ManifestError(f"a sharded save of world size {world} lists parts of ranks {ranks}")
            return cls(kind="sharded", name=name, seq=seq, attempt=attempt, task=task, rank=rank, step=step_value,
                       created=created, world_size=world, parts=parts, checksum=checksum)  # fmt: skip
        kind = _kind(d, "manifest")
        files, dirs = _tree(d, "manifest", kind)
        return cls(kind=kind, name=name, seq=seq, attempt=attempt, task=task, rank=rank, step=step_value,
                   created=created, files=files, dirs=dirs, checksum=checksum)  # fmt: skip


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _obj(doc: object, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise ManifestError(f"{where} must be a JSON object, not {type(doc).__name__}")
    return cast(dict[str, Any], doc)


def _get(d: dict[str, Any], key: str, where: str, typ: type[_T], what: str) -> _T:
    if key not in d:
        raise ManifestError(f"{where} has no field {key!r}")
    value = d[key]
    if type(value) is bool or not isinstance(value, typ):  # bool is an int to Python, not to us
        raise ManifestError(f"{where} field {key!r} must be {what}, not {_show(value)}")
    return value


def _int(d: dict[str, Any], key: str, where: str, *, lo: int | None = None, hi: int | None = None) -> int:
    value = _get(d, key, where, int, "an integer")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ManifestError(f"{where} field {key!r} is out of range: {_show(value)}")
    return value


def _float(d: dict[str, Any], key: str, where: str) -> float:
    raw = d.get(key)
    if key not in d or type(raw) is bool or not isinstance(raw, (int, float)):
        raise ManifestError(f"{where} field {key!r} must be a number, not {_show(raw)}")
    try:
        value = float(raw)
    except OverflowError:  # an integer beyond any float
        raise ManifestError(f"{where} field {key!r} is out of range") from None
    if not math.isfinite(value):
        raise ManifestError(f"{where} field {key!r} must be finite, not {value!r}")
    return value


def _text(value: str, where: str) -> str:
    # Names become file names and log text: refuse what no file system or terminal should get.
    if "\x00" in value:
        raise ManifestError(f"{where} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ManifestError(f"{where} contains a lone surrogate") from None
    return value


def _str(d: dict[str, Any], key: str, where: str) -> str:
    return _text(_get(d, key, where, str, "a string"), f"{where} field {key!r}")


def _list(d: dict[str, Any], key: str, where: str) -> list[Any]:
    return _get(d, key, where, list, "a list")


def _kind(d: dict[str, Any], where: str) -> Kind:
    kind = d.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ManifestError(f"unknown kind {_show(kind)} in {where}")
    return cast(Kind, kind)


def _tree(d: dict[str, Any], where: str, kind: Kind) -> tuple[tuple[FileEntry, ...], tuple[str, ...]]:
    """The files and directories of one save or part, checked to form a tree that is safe to write."""
    files: list[FileEntry] = []
    for i, raw in enumerate(_list(d, "files", where)):
        f = _obj(raw, f"{where} file {i}")
        path = _relative(_str(f, "path", f"{where} file {i}"))
        size = _int(f, "size", f"{where} file {i}", lo=0, hi=1 << 62)
        crc = _int(f, "crc32", f"{where} file {i}", lo=0, hi=0xFFFFFFFF)
        files.append(FileEntry(path, size, crc))
    dirs = tuple(_dir(x, where) for x in _list(d, "dirs", where))
    if kind != "dir" and len(files) != 1:
        raise ManifestError(f"a {kind} save lists {len(files)} files")
    # Two entries for one path, or a file where another entry needs a directory, cannot be
    # restored: refuse them here rather than fail half-way through writing the copy.
    file_paths = [f.path for f in files]
    if len(set(file_paths)) != len(file_paths):
        raise ManifestError(f"{where} lists a file twice")
    taken = set(file_paths)
    for p in [*file_paths, *dirs]:
        parts = p.split("/")
        for n in range(1, len(parts)):
            if "/".join(parts[:n]) in taken:
                raise ManifestError(f"{where}: {p!r} is inside a listed file")
    if taken & set(dirs):
        raise ManifestError(f"{where} lists a path as both a file and a directory")
    return tuple(files), dirs


def _dir(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ManifestError(f"{where} dirs must be strings, not {_show(value)}")
    return _relative(_text(value, f"{where} dir"))


def _relative(path: str) -> str:
    # A manifest names paths we will write under the cache dir; refuse anything that could escape it.
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ManifestError(f"unsafe path in manifest: {path!r}")
    return path


class Crc:
    """Running checksum (`CHECKSUM` unless told) and byte count of a stream."""

    __slots__ = ("_fn", "size", "value")

    def __init__(self, checksum: str = CHECKSUM) -> None:
        self.value = 0
        self.size = 0
        self._fn = CHECKSUMS[checksum]

    def update(self, chunk: bytes | memoryview) -> None:
        self.value = self._fn(chunk, self.value)
        self.size += len(chunk)
