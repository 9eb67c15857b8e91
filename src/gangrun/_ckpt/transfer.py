"""Moving bytes in and out of a checkpoint: what a save is made of, its snapshot, and verified reads.

A save is a `Source`: bytes, one file, or a directory tree (every file and every directory, so empty
directories survive). `snapshot()` copies it aside so training may change the original while a
background writer is still uploading. `read_checkpoint()` copies a committed checkpoint into a local
cache folder and checks every size and checksum against the manifest on the way.

Files move on a few threads at once (pool.py), largest first so that the threads finish together.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from gangrun._ckpt import pool
from gangrun._ckpt.layout import BYTES_NAME, DATA, MANIFEST, join, part_name
from gangrun._ckpt.local_files import PRIVATE_DIR, kernel_copy, makedirs_private
from gangrun._ckpt.manifest import FileEntry, Kind, Manifest, Part
from gangrun._ckpt.storage import Storage
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
    is local so that the writer can later move them instead of copying twice.

    The training loop waits for this copy, so it is the fastest one available: in the kernel
    (`copy_file_range`, which also clones blocks on filesystems that can), on several threads, with
    no checksum (the writer computes it later from the staged copy, which nobody else writes).
    Hard links would be free but are not a snapshot: training that rewrites a file in place
    (``open(p, "wb")`` truncates the same inode) would change the staged copy too.
    """
    if src.kind == "bytes":
        return Source("bytes", src.name, payload=bytes(src.payload or b""))
    os.makedirs(staging, PRIVATE_DIR)
    try:
        out = Source(src.kind, src.name, dirs=list(src.dirs), staged_in=staging)
        for d in src.dirs:
            makedirs_private(os.path.join(staging, d))
        out.files = [(rel, os.path.join(staging, rel)) for rel, _ in src.files]
        jobs = _largest_first([(path, dst) for (_, path), (_, dst) in zip(src.files, out.files, strict=True)], key=0)
        pool.run_all(lambda job: kernel_copy(*job), jobs)
        return out
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _largest_first(jobs: list[tuple[str, str]], key: int) -> list[tuple[str, str]]:
    """`jobs` by the size of the file at `job[key]`, largest first."""
    # Sizes from stat, which may fail for a file that vanished: the copy itself will say so.
    def size(job: tuple[str, str]) -> int:
        try:
            return os.stat(job[key]).st_size
        except OSError:
            return 0

    return sorted(jobs, key=size, reverse=True)


def write_source(storage: Storage, data_dir: str, src: Source) -> tuple[list[FileEntry], list[str]]:
    """Write `src` under `data_dir`; returns the manifest's file entries and directories."""
    entries: list[FileEntry] = []
    if src.kind == "bytes":
        crc = storage.put_bytes(join(data_dir, src.name), src.payload or b"")
        return [FileEntry(src.name, crc.size, crc.value)], []
    for d in src.dirs:
        storage.makedirs(join(data_dir, d))
    move = src.staged_in is not None

    def put(job: tuple[str, str]) -> FileEntry:
        rel, path = job
        crc = storage.put_file(path, join(data_dir, rel), move=move)
        return FileEntry(rel, crc.size, crc.value)

    done = pool.run_all(put, _largest_first(list(src.files), key=1), storage.workers)
    # The manifest lists files in the order of the source walk, whatever order they were copied in.
    by_rel = {e.path: e for e in done}
    entries = [by_rel[rel] for rel, _ in src.files]
    return entries, list(src.dirs)


def read_manifest(storage: Storage, path: str) -> Manifest | None:
    """The manifest of a final-named save; None when there is none (a torn save: not committed)."""
    try:
        raw = storage.read_bytes(join(path, MANIFEST))
    except FileNotFoundError:
        return None
    return Manifest.from_bytes(raw)


def read_checkpoint(storage: Storage, path: str, manifest: Manifest, cache: Path) -> Path:
    """Copy a committed checkpoint into `cache` verifying it; returns the file or directory restored.

    Raises CorruptCheckpoint (or OSError) when the data is missing or differs from the manifest;
    nothing half-restored is left behind in that case.
    """
    if manifest.kind == "sharded":  # one part at a time: read_part
        raise CorruptCheckpoint("a sharded checkpoint is restored one part at a time")
    final = cache / f"attempt-{manifest.attempt}-seq-{manifest.seq}"
    return _restore(storage, join(path, DATA), manifest.kind, manifest.files, manifest.dirs, final, manifest.checksum)


def read_part(storage: Storage, path: str, manifest: Manifest, part: Part, cache: Path) -> Path:
    """`read_checkpoint` for one rank's part of a committed sharded checkpoint."""
    final = cache / f"attempt-{manifest.attempt}-seq-{manifest.seq}-{part_name(part.rank)}"
    data = join(path, DATA, part_name(part.rank))
    return _restore(storage, data, part.kind, part.files, part.dirs, final, manifest.checksum)


def check_parts(storage: Storage, path: str, manifest: Manifest) -> None:
    """Every part of a sharded checkpoint is there with the sizes its manifest lists (one listing,
    no data read), so that every rank judges the checkpoint the same way before loading its part."""
    sizes = storage.sizes(join(path, DATA))
    for part in manifest.parts:
        prefix = part_name(part.rank)
        for f in part.files:
            size = sizes.get(f"{prefix}/{f.path}")
            if size is None:
                raise CorruptCheckpoint(f"rank {part.rank}'s {f.path} is missing")
            if size != f.size:
                raise CorruptCheckpoint(f"rank {part.rank}'s {f.path} has {size} bytes, manifest says {f.size}")


def _restore(
    storage: Storage,
    data_src: str,
    kind: Kind,
    files: tuple[FileEntry, ...],
    dirs: tuple[str, ...],
    final: Path,
    checksum: str,
) -> Path:
    work = final.parent / f".{final.name}.part-{uuid.uuid4().hex[:8]}"
    data = work / DATA
    try:
        data.mkdir(parents=True)
        for d in dirs:
            (data / d).mkdir(parents=True, exist_ok=True)
        for parent in {(data / f.path).parent for f in files}:
            parent.mkdir(parents=True, exist_ok=True)

        def get(f: FileEntry) -> None:
            try:
                crc = storage.get_file(join(data_src, f.path), str(data / f.path), checksum=checksum)
            except FileNotFoundError as e:
                raise CorruptCheckpoint(f"{f.path} is missing") from e
            if crc.size != f.size:
                raise CorruptCheckpoint(f"{f.path} has {crc.size} bytes, manifest says {f.size}")
            if crc.value != f.crc32:
                raise CorruptCheckpoint(f"{f.path} checksum mismatch")

        # Verified while copied, one pass per file; the first bad file stops the others.
        pool.run_all(get, sorted(files, key=lambda f: f.size, reverse=True), storage.workers)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if kind == "dir":
        return final / DATA
    return final / DATA / files[0].path  # the one file of a bytes or file save (manifest.py)
