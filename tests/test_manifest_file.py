"""S1 and issue 13.4: reading a manifest file refuses hostile bytes with one line, in bounded memory."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import pytest

from gangrun._errors import SpecError
from gangrun._manifest_file import MAX_BYTES, load_manifest, parse_document

GOOD = b"""apiVersion: gangrun.dev/v1alpha1
kind: ClusteredTask
metadata: {name: train}
spec:
  nodes: 2
  command: [python, train.py]
"""

# A 10-level alias bomb: a few hundred bytes that expand to 10**10 list items if aliases were followed.
BOMB = b"a: &a [x, x, x, x, x, x, x, x, x, x]\n" + b"".join(
    b"%s: &%s [%s]\n" % (bytes([98 + i]), bytes([98 + i]), b", ".join([b"*" + bytes([97 + i])] * 10))
    for i in range(10))


@pytest.mark.parametrize(("data", "message"), [
    pytest.param(GOOD + b"  nodes: 3\n", "spec.nodes: is given twice (line 7)", id="duplicate-key"),
    pytest.param(GOOD.replace(b"metadata: {name: train}", b"metadata: {name: train, name: other}"),
                 "metadata.name: is given twice", id="duplicate-key-in-flow-mapping"),
    pytest.param(GOOD + b"  env: {A: x, B: y, A: z}\n", "spec.env.A: is given twice", id="duplicate-env"),
    pytest.param(BOMB, "-: line 2: YAML aliases (*a) are not accepted", id="alias-bomb"),
    pytest.param(GOOD + b"  maxRuntime: .inf\n", "spec.maxRuntime: must be a finite number", id="inf"),
    pytest.param(GOOD + b"  maxRuntime: 1.0e+300\n", "spec.maxRuntime: a duration must be at most", id="1e300"),
    pytest.param(GOOD + b"  maxRuntime: 99999999999d\n", "spec.maxRuntime: a duration must be at most", id="days"),
    pytest.param(GOOD + b"  resources: {cpu: .nan}\n", "spec.resources.cpu: must be a finite number", id="nan"),
    pytest.param(GOOD + b'  resources: {cpu: "1e999999999"}\n', "spec.resources.cpu: expected a quantity",
                 id="quantity-exponent"),
    pytest.param(GOOD + b"  nprocPerNode: 100000\n", "spec.nprocPerNode: must be <= 1024", id="nproc"),
    pytest.param(GOOD + b'  image: "\\ud800"\n', "-: not valid YAML at line 7", id="surrogate-escape"),
    pytest.param(GOOD + b"  image: caf\xe9\n", "-: not UTF-8 text (byte 0xe9 at offset", id="latin-1"),
    pytest.param(b"\xff\xfe" + GOOD, "-: not UTF-8 text (byte 0xff at offset 0)", id="utf-16-bom"),
    pytest.param(GOOD + b"  image: a\x00b\n", "-: not valid YAML: control characters are not allowed", id="nul"),
    pytest.param(b"[" * 40 + b"]" * 40, "-: line 1: nested more than 32 levels deep", id="deep-flow"),
    pytest.param(b"[" * 100_000, "-: not valid YAML at line 1", id="very-deep-flow"),
    pytest.param(b"".join(b"  " * i + b"a:\n" for i in range(200)), "-: line 34: nested more than 32 levels deep",
                 id="deep-block"),
    pytest.param(GOOD + b"  retries: " + b"9" * 5000 + b"\n", "spec.retries: a number of 5000 digits (line 7) is more than any field takes",
                 id="5000-digit-int"),
    pytest.param(GOOD + b"  retries: !!int abc\n", "-: not valid YAML: invalid literal for int()",
                 id="bad-explicit-int"),
    pytest.param(GOOD + b"  image: !!binary '#'\n", "spec.image: must be a string, got bytes", id="binary"),
    pytest.param(GOOD + b"  image: !!python/object:os.system ls\n", "-: not valid YAML", id="python-tag"),
    pytest.param(GOOD + b"---\n" + GOOD, "-: not valid YAML", id="two-documents"),
    pytest.param(b"x" * (MAX_BYTES + 1), "-: larger than 1024 KiB", id="too-large"),
])
def test_s1_hostile_bytes_are_refused_in_one_line(data, message):
    with pytest.raises(SpecError) as err:
        load_manifest("-", stdin=io.BytesIO(data))
    text = str(err.value)
    assert text.startswith(message), text
    assert "\n" not in text and len(text) < 400


@pytest.mark.parametrize(("data", "message"), [
    pytest.param(b'{"a": {"b": 1, "b": 2}}', "a.b: is given twice", id="duplicate-key"),
    pytest.param(b'{"a": [{"x": 1, "x": 1}]}', "a[0].x: is given twice", id="duplicate-key-in-list"),
    pytest.param(b'{"a": NaN}', "t.json: not valid JSON: NaN is not a number", id="nan"),
    pytest.param(b'{"a": -Infinity}', "t.json: not valid JSON: -Infinity is not a number", id="infinity"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "t.json: nested more than 32 levels deep", id="deep"),
    pytest.param(b'{"a": ' + b"9" * 5000 + b"}", "t.json: not valid JSON", id="5000-digit-int"),
    pytest.param(b'{"apiVersion": "\\ud800"}', "apiVersion: contains '\\ud800', a lone surrogate", id="surrogate"),
])
def test_s1_hostile_json_is_refused_naming_the_field(data, message):
    with pytest.raises(SpecError) as err:
        parse_document(data, where="t.json", json_=True) if b"ud800" not in data else load_json(data)
    assert str(err.value).startswith(message), str(err.value)


def load_json(data: bytes) -> None:
    from gangrun._core.spec import parse_manifest

    parse_manifest(parse_document(data, where="t.json", json_=True))


def test_s1_an_alias_bomb_costs_bounded_memory():
    tracemalloc.start()
    try:
        with pytest.raises(SpecError):
            parse_document(BOMB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{peak} bytes for a {len(BOMB)}-byte file"


def test_s1_a_file_is_read_no_further_than_the_cap(tmp_path: Path):
    """/dev/zero has no end: the cap, not the file, bounds the read."""
    with pytest.raises(SpecError, match="larger than 1024 KiB"):
        load_manifest("/dev/zero")


def test_s1_a_manifest_just_under_the_cap_is_read(tmp_path: Path):
    padding = b"# " + b"x" * (MAX_BYTES - len(GOOD) - 3) + b"\n"
    f = tmp_path / "t.yaml"
    f.write_bytes(GOOD + padding)
    assert f.stat().st_size == MAX_BYTES
    assert load_manifest(f).nodes == 2


def test_s1_dates_stay_text_and_a_byte_order_mark_is_ignored():
    spec = load_manifest("-", stdin=io.BytesIO(b"\xef\xbb\xbf" + GOOD + b"  image: 2024-01-01\n"))
    assert spec.image == "2024-01-01"
    spec = load_manifest("-", stdin=io.BytesIO(GOOD + b"  env: {DAY: 2001-02-30, AT: !!timestamp 2024-01-01}\n"))
    assert spec.env == {"DAY": "2001-02-30", "AT": "2024-01-01"}


def test_s1_stdin_has_no_source_so_workingdir_is_relative_to_the_current_folder(tmp_path: Path):
    f = tmp_path / "t.yaml"
    f.write_bytes(GOOD)
    assert load_manifest(f).source == str(f)
    assert load_manifest("-", stdin=io.BytesIO(GOOD)).source == ""


@pytest.mark.parametrize(("path", "message"), [("does-not-exist.yaml", "does-not-exist.yaml: no such file"),
                                               ("/", "/: Is a directory")])
def test_unreadable_paths_are_named(path, message):
    with pytest.raises(SpecError, match=message):
        load_manifest(path)
