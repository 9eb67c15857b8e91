"""The CLI's contract for user mistakes: a clear one-line error, no traceback, exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gangrun.cli import main

GOOD = """apiVersion: gangrun.dev/v1alpha1
kind: ClusteredTask
metadata: {name: train}
spec: {nodes: 2, command: [python, train.py]}
"""


def test_s1_validate_accepts_a_good_manifest(tmp_path, capsys):
    f = tmp_path / "t.yaml"
    f.write_text(GOOD)
    assert main(["validate", str(f), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is True and doc["spec"]["nodes"] == 2


def test_s1_validate_reads_json_manifests(tmp_path, capsys):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask",
                             "metadata": {"name": "train"}, "spec": {"nodes": 1, "command": ["true"]}}))
    assert main(["validate", str(f)]) == 0
    assert "valid ClusteredTask 'train'" in capsys.readouterr().out


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace("nodes: 2", "nodes: 0"), "SpecError: spec.nodes: must be >= 1, got 0"),
    ("spec: [", "SpecError:"),
    ("", "SpecError: a manifest must be a mapping"),
])
def test_s1_bad_manifest_is_one_line_without_traceback(tmp_path, text, message):
    f = tmp_path / "t.yaml"
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "gangrun.cli", "validate", str(f)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith(message)
    assert "Traceback" not in r.stderr


def test_missing_file_is_a_clear_error(capsys):
    assert main(["validate", "does-not-exist.yaml"]) == 2
    assert "does-not-exist.yaml: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["logs", "t", "--attempt", "0"], ["logs", "t", "--rank", "-1"],
                                  ["render", "t.yaml", "--attempt", "0"], ["controller", "--workers", "0"]])
def test_out_of_range_numbers_are_refused_naming_the_flag(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "must be >=" in capsys.readouterr().err
