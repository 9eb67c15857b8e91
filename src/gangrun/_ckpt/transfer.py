"""Moving bytes in and out of a checkpoint: what a save is made of, its snapshot, and verified reads.

A save is a `Source`: bytes, one file, or a directory tree (every file and every directory, so empty
directories survive). `snapshot()` copies it aside so training may change the original while a
background writer is still uploading. `read_checkpoint()` copies a committed checkpoint into a local
cache folder and checks every size and checksum against the manifest on the way.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from gangrun._ckpt.layout import BYTES_NAME, DATA, MANIFEST, join
from gangrun._ckpt.manifest import FileEntry, Kind, Manifest, ManifestError
from gangrun._errors import CheckpointError, UsageError


class CorruptCheckpoint(CheckpointError):
    """A committed checkpoint whose data does not match its manifest."""


@dataclass
class Source:
    kind: Kind
    name: str
    files: list[tuple[str, str]] = field(default_factory=list)  # (relative path, local path)
    dirs: list[str] = field(default_factory=list)
    payload: bytes | memoryview | None = None  # kind == "bytes"
    staged_in: str | None = None  # a snapshot folder we own: files may be moved, folder removed after

    def discard(self) -> None:
        if self.staged_in:
            shutil.rmtree(self.staged_in, ignore_errors=True)


def source_of(data: object) -> Source:
    """Describe what the user passed to save(); raises TypeError or UsageError for what cannot be saved."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return Source("bytes", BYTES_NAME, payload=memoryview(data).cast("B") if not isinstance(data, bytes) else data)
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(f"save() takes bytes, a file path or a directory path, not {type(data).__name__}")
    path = os.fspath(data)
    if os.path.isfile(path):
        return Source("file", os.path.basename(path), files=[(os.path.basename(path), path)])
    if not os.path.isdir(path):
        raise UsageError(f"nothing to save at {path!r}: no such file or directory")
    src = Source("dir", "")
    for dirpath, dirnames, filenames in os.walk(path):
        rel_dir = os.path.relpath(dirpath, path)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                raise UsageError(f"cannot save {full!r}: symlinked directories are not followed")
            src.dirs.append(f"{rel_dir}/{d}" if rel_dir else d)
        for f in sorted(filenames):
            src.files.append((f"{rel_dir}/{f}" if rel_dir else f, os.path.join(dirpath, f)))
    return src


def snapshot(src: Source, staging: str) -> Source:
    """A copy of `src` that training can no longer change. Bytes are copied in memory (free for an
    immutable `bytes`); files are copied into `staging`, on the checkpoint's own filesystem when it
    is local so that the writer can later move them instead of copying twice."""
    if src.kind == "bytes":
        return Source("bytes", src.name, payload=bytes(src.payload or b""))
    os.makedirs(staging)
    try:
        out = Source(src.kind, src.name, dirs=list(src.dirs), staged_in=staging)
        for d in src.dirs:
            os.makedirs(os.path.join(staging, d), exist_ok=True)
        for rel, path in src.files:
            dst = os.path.join(staging, rel)
            shutil.copyfile(path, dst)  # in-kernel copy (copy_file_range / sendfile)
            out.files.append((rel, dst))
        return out
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_source(storage, data_dir: str, src: Source) -> tuple[list[FileEntry], list[str]]:  # type: ignore[no-untyped-def]
    """Write `src` under `data_dir`; returns the manifest's file entries and directories."""
    entries: list[FileEntry] = []
    if src.kind == "bytes":
        crc = storage.write_bytes(join(data_dir, src.name), src.payload or b"")
        return [FileEntry(src.name, crc.size, crc.value)], []
    for d in src.dirs:
        storage.makedirs(join(data_dir, d))
    for rel, path in src.files:
        crc = storage.put_file(path, join(data_dir, rel), move=src.staged_in is not None)
        entries.append(FileEntry(rel, crc.size, crc.value))
    return entries, list(src.dirs)


def read_manifest(storage, path: str) -> Manifest | None:  # type: ignore[no-untyped-def]
    """The manifest of a final-named save; None when there is none (a torn save: not committed)."""
    try:
        raw = storage.read_bytes(join(path, MANIFEST))
    except FileNotFoundError:
        return None
    return Manifest.from_bytes(raw)


def read_checkpoint(storage, path: str, manifest: Manifest, cache: Path) -> Path:  # type: ignore[no-untyped-def]
    """Copy a committed checkpoint into `cache` verifying it; returns the file or directory restored.

    Raises CorruptCheckpoint (or OSError) when the data is missing or differs from the manifest;
    nothing half-restored is left behind in that case.
    """
    final = cache / f"attempt-{manifest.attempt}-seq-{manifest.seq}"
    work = cache / f".{final.name}.part-{uuid.uuid4().hex[:8]}"
    data = work / DATA
    try:
        data.mkdir(parents=True)
        for d in manifest.dirs:
            (data / d).mkdir(parents=True, exist_ok=True)
        for f in manifest.files:
            dst = data / f.path
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                crc = storage.get_file(join(path, DATA, f.path), str(dst))
            except FileNotFoundError as e:
                raise CorruptCheckpoint(f"{f.path} is missing") from e
            if crc.size != f.size:
                raise CorruptCheckpoint(f"{f.path} has {crc.size} bytes, manifest says {f.size}")
            if crc.value != f.crc32:
                raise CorruptCheckpoint(f"{f.path} checksum mismatch")
        shutil.rmtree(final, ignore_errors=True)
        os.rename(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if manifest.kind == "dir":
        return final / DATA
    if len(manifest.files) != 1:
        raise ManifestError(f"a {manifest.kind} save lists {len(manifest.files)} files")
    return final / DATA / manifest.files[0].path
