"""Reading worker log files without holding them: lines in bounded chunks, and the newest lines alone.

A worker may print hundreds of megabytes, and `gangrun logs`, `TaskRun.log_lines()` and the web page
must not hold them: `lines` reads a file a chunk at a time (a line longer than a chunk comes in
pieces), `tail` reads only the end of the files. Lines split as `str.splitlines` splits them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

CHUNK = 1 << 20  # bytes read at a time, and the longest piece of a line held at once


def lines(path: Path, start: int = 0, *, whole: bool = True) -> Iterator[tuple[str, int]]:
    """The lines of `path` from byte `start`, each with the byte offset just after it. With `whole`
    False, a last line without its newline yet (a worker still writing it) is left for the next read."""
    with open(path, "rb") as f:
        f.seek(start)
        pos, buf = start, b""
        while chunk := f.read(CHUNK):
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                pos += len(raw) + 1
                for line in _split(raw):
                    yield line, pos
            while len(buf) >= CHUNK:  # a line longer than a chunk: in pieces, never whole
                piece, buf = buf[:CHUNK], buf[CHUNK:]
                pos += len(piece)
                for line in _split(piece):
                    yield line, pos
        if buf and whole:
            for line in _split(buf):
                yield line, pos + len(buf)


def tail(paths: Sequence[Path], *, max_lines: int, max_bytes: int) -> tuple[list[str], bool]:
    """The newest lines of `paths` read one after the other as one text: at most `max_lines` lines from
    the last `max_bytes` bytes. The flag says whether older lines were left out."""
    pieces: list[bytes] = []
    budget, truncated = max_bytes, False
    for path in reversed(paths):
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if budget <= 0:
            truncated = truncated or size > 0
            break
        take = min(size, budget)
        with open(path, "rb") as f:
            f.seek(size - take)
            data = f.read(take)
        if take < size:  # drop the first, partial line
            truncated = True
            cut = data.find(b"\n")
            data = data[cut + 1:] if cut >= 0 else b""
        pieces.append(data)
        budget -= take
    out: list[str] = []
    for data in reversed(pieces):
        out.extend(data.decode(errors="replace").splitlines())
    if len(out) > max_lines:
        out, truncated = out[-max_lines:], True
    return out, truncated


def _split(raw: bytes) -> list[str]:
    return raw.decode(errors="replace").splitlines() or [""]
