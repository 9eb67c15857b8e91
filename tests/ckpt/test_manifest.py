"""B1 and issue 13: any unreadable manifest.json is skipped with one line, never a crash.

One validating parser owns the manifest's shape (`Manifest.from_bytes`): whatever the bytes, it
returns a manifest or raises ManifestError. The property tests feed it generated JSON documents,
valid manifests with one field replaced by any JSON value, and arbitrary bytes; the table tests put
hostile bodies in the newest checkpoint of a real store and check that load() falls back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangrun import Checkpoint
from gangrun._ckpt.manifest import FileEntry, Manifest, ManifestError, Part

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)

GOOD = Manifest(
    kind="dir", name="", seq=2, attempt=1, task="t", rank=0, step=5, created=1.0,
    files=(FileEntry("a/b.bin", 3, 7),), dirs=("a", "e"),
)  # fmt: skip
SHARDED = Manifest(
    kind="sharded", name="", seq=2, attempt=1, task="t", rank=0, step=5, created=1.0, world_size=2,
    parts=(Part(0, "bytes", "payload", (FileEntry("payload", 1, 2),)), Part(1, "dir", "", (FileEntry("x", 1, 2),), ("d",))),
)  # fmt: skip


def _parse_or_refuse(raw: bytes) -> None:
    try:
        Manifest.from_bytes(raw)
    except ManifestError:
        pass  # the only error allowed out of the parser


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_any_json_document_parses_or_raises_manifest_error(doc: object) -> None:
    _parse_or_refuse(json.dumps(doc).encode())


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([GOOD, SHARDED]), st.data())
def test_a_valid_manifest_with_any_field_replaced_parses_or_raises_manifest_error(base: Manifest, data: st.DataObject) -> None:
    doc = json.loads(base.to_bytes())
    # Pick a place anywhere in the document (top level, a file entry, a part) and put any value there.
    target = doc
    while isinstance(target, (dict, list)) and target and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(target) if isinstance(target, dict) else list(range(len(target)))))
        child = target[key]
        if not isinstance(child, (dict, list)) or not child:
            break
        target = child
    if isinstance(target, dict):
        target[data.draw(st.sampled_from(sorted(target) + ["extra"]))] = data.draw(json_values)
    elif target:
        target[data.draw(st.integers(0, len(target) - 1))] = data.draw(json_values)
    _parse_or_refuse(json.dumps(doc).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_manifest_error(raw: bytes) -> None:
    _parse_or_refuse(raw)


def test_valid_manifests_round_trip() -> None:
    assert Manifest.from_bytes(GOOD.to_bytes()) == GOOD
    assert Manifest.from_bytes(SHARDED.to_bytes()) == SHARDED
    assert "parts" not in json.loads(GOOD.to_bytes()), "unsharded manifests stay readable by older readers"


def _good(**change: object) -> bytes:
    doc = json.loads(GOOD.to_bytes())
    doc.update(change)
    return json.dumps(doc).encode()


def _file(**change: object) -> bytes:
    doc = json.loads(GOOD.to_bytes())
    doc["files"][0].update(change)
    return json.dumps(doc).encode()


HOSTILE = [
    pytest.param(b"null", "must be a JSON object", id="null"),
    pytest.param(b"[]", "must be a JSON object", id="empty-list"),
    pytest.param(b'"manifest"', "must be a JSON object", id="string"),
    pytest.param(b"17", "must be a JSON object", id="number"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "unreadable manifest", id="deeply-nested"),
    pytest.param(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "unreadable manifest", id="deeply-nested-objects"),
    pytest.param(b'{"format": 1}', "has no field", id="fields-missing"),
    pytest.param(b"\xff\xfe{}", "not UTF-8", id="non-utf8"),
    pytest.param(b"", "unreadable manifest", id="empty-file"),
    pytest.param(_good(format=True), "unknown manifest format", id="format-true"),
    pytest.param(_good(files=None), "must be a list", id="files-null"),
    pytest.param(_good(files=[None]), "must be a JSON object", id="file-entry-null"),
    pytest.param(_good(files={"a": 1}), "must be a list", id="files-object"),
    pytest.param(_good(dirs=[1]), "dirs must be strings", id="dir-number"),
    pytest.param(_good(seq="2"), "must be an integer", id="seq-string"),
    pytest.param(_good(step=1.5), "must be an integer", id="step-float"),
    pytest.param(_good(created=float("nan")), "must be finite", id="created-nan"),
    pytest.param(_good(created=10**400), "out of range", id="created-huge-int"),
    pytest.param(_good(task=["x"]), "must be a string or null", id="task-list"),
    pytest.param(_good(kind={"dir": 1}), "unknown kind", id="kind-unhashable"),
    pytest.param(_good(kind="sharded"), "has no field 'world_size'", id="sharded-without-parts"),
    pytest.param(_file(size="3"), "must be an integer", id="size-string"),
    pytest.param(_file(size=-1), "out of range", id="size-negative"),
    pytest.param(_file(crc32=1 << 40), "out of range", id="crc-too-big"),
    pytest.param(_file(crc32=True), "must be an integer", id="crc-bool"),
    pytest.param(_file(path="a/\ud800"), "lone surrogate", id="path-lone-surrogate"),
    pytest.param(_file(path="a/b\x00"), "NUL", id="path-nul"),
    pytest.param(_file(path="e"), "both a file and a directory", id="file-is-also-a-dir"),
    pytest.param(_good(dirs=["a/b.bin/c"]), "inside a listed file", id="dir-inside-a-file"),
    pytest.param(_good(seq=9), "manifest is of attempt 1 seq 9", id="manifest-of-another-save"),
]


@pytest.mark.parametrize(("body", "why"), HOSTILE)
def test_b1_hostile_manifest_is_skipped_with_one_line_and_the_previous_loads(tmp_path: Path, body: bytes, why: str, capsys) -> None:
    root = str(tmp_path / "ck" / "train")
    ckpt = Checkpoint.for_path(root, attempt=1, keep_last=None, cache_dir=tmp_path / "c1")
    ckpt.save(b"good", step=1)
    ckpt.save(b"newer", step=2)
    (tmp_path / "ck" / "train" / "attempt-1" / "ckpt-000002" / "manifest.json").write_bytes(body)
    capsys.readouterr()
    fresh = Checkpoint.for_path(root, attempt=1, cache_dir=tmp_path / "c2")
    assert fresh.load().read_bytes() == b"good"
    err = capsys.readouterr().err
    skipped = [line for line in err.splitlines() if "skipping" in line]
    assert len(skipped) == 1 and "ckpt-000002" in skipped[0] and why in skipped[0], err
    assert "Traceback" not in err


def test_13_3_every_checkpoint_corrupt_says_so_and_how_many(tmp_path: Path, capsys) -> None:
    root = tmp_path / "ck" / "train"
    for attempt in (1, 2):
        Checkpoint.for_path(str(root), attempt=attempt, cache_dir=tmp_path / "c").save(b"x", step=attempt)
    (root / "attempt-1" / "ckpt-000001" / "manifest.json").write_bytes(b"null")
    (root / "attempt-2" / "ckpt-000001" / "data" / "payload").write_bytes(b"y")
    capsys.readouterr()
    ckpt = Checkpoint.for_path(str(root), attempt=3, cache_dir=tmp_path / "c3")
    assert ckpt.load() is None and ckpt.loaded_from is None
    err = capsys.readouterr().err
    assert "no usable checkpoint: all 2 checkpoint(s) found" in err and "unreadable" in err, err
    assert "no checkpoint found" not in err

