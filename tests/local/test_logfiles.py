"""Reading worker logs a chunk at a time, and only their end, whatever their size."""

from __future__ import annotations

import pytest

from gangrun._backends.local import logfiles


@pytest.mark.parametrize(("data", "lines"), [
    (b"", []),
    (b"a\nb\n", ["a", "b"]),
    (b"a\n\nb", ["a", "", "b"]),
    (b"a\r\nb\rc\n", ["a", "b", "c"]),  # as str.splitlines splits
    (b"caf\xc3\xa9\n\xff\n", ["café", "\ufffd"]),
])
def test_lines_split_as_splitlines_does(tmp_path, data, lines) -> None:
    path = tmp_path / "log"
    path.write_bytes(data)
    assert [line for line, _ in logfiles.lines(path)] == lines
    assert [line for line, _ in logfiles.lines(path)] == data.decode(errors="replace").splitlines()


def test_a_line_longer_than_a_chunk_comes_in_pieces_and_offsets_resume(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(logfiles, "CHUNK", 4)
    path = tmp_path / "log"
    path.write_bytes(b"0123456789\nab\ncd")
    assert list(logfiles.lines(path)) == [("0123", 4), ("4567", 8), ("89", 11), ("ab", 14), ("cd", 16)]
    assert list(logfiles.lines(path, 11, whole=False)) == [("ab", 14)]  # "cd" is still being written


@pytest.mark.parametrize(("files", "max_lines", "max_bytes", "expected"), [
    ([b"a\nb\nc\n"], 10, 100, (["a", "b", "c"], False)),
    ([b"a\nb\nc\n"], 2, 100, (["b", "c"], True)),
    ([b"aaaa\nbb\ncc\n"], 10, 7, (["bb", "cc"], True)),  # the cut first line is dropped
    ([b"r0\n", b"r1\n"], 10, 100, (["r0", "r1"], False)),  # restart rounds, in order
    ([b"old\n", b"new1\nnew2\n"], 10, 10, (["new1", "new2"], True)),
    ([b"", b"x\n"], 10, 2, (["x"], False)),
])
def test_tail_reads_only_the_end(tmp_path, files, max_lines, max_bytes, expected) -> None:
    paths = []
    for i, data in enumerate(files):
        paths.append(tmp_path / f"{i}.log")
        paths[-1].write_bytes(data)
    assert logfiles.tail(paths, max_lines=max_lines, max_bytes=max_bytes) == expected
