"""The CLI's contract for user mistakes: a clear one-line error, no traceback, exit code 2 (3 for a backend)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gangrun.cli import build_parser, main

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


GPU_JOB = GOOD.replace("spec: {nodes: 2, command: [python, train.py]}", """spec:
  nodes: 2
  command: [python, train.py]
  resources: {gpu: 8}
  shmSize: 8Gi
  failurePolicy: {restartOnDisruption: false}
  podTemplate:
    spec:
      containers: [{name: worker, env: [{name: A, value: "1"}], envFrom: [{secretRef: {name: s3}}]}]
      tolerations: [{key: nvidia.com/gpu, operator: Exists}]
""")


def test_validate_shows_the_kubernetes_fields_and_what_a_local_run_ignores(tmp_path, capsys):
    f = tmp_path / "t.yaml"
    f.write_text(GPU_JOB)
    assert main(["validate", str(f)]) == 0
    out = capsys.readouterr().out
    assert "restartOnDisruption false" in out and "shmSize 8Gi on /dev/shm" in out
    assert "8 GPU(s) per node, requested as nvidia.com/gpu" in out
    assert "podTemplate (kubernetes): containers worker; tolerations" in out
    assert ("ignored by the local backend: spec.podTemplate.spec.containers[worker].envFrom, "
            "spec.podTemplate.spec.tolerations") in out
    assert main(["validate", str(f), "-o", "json"]) == 0
    spec = json.loads(capsys.readouterr().out)["spec"]
    assert spec["podTemplate"]["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert (spec["shmSize"], spec["gpuResource"], spec["restartOnDisruption"]) == (str(8 * 2**30), "nvidia.com/gpu", False)


ELASTIC_JOB = GOOD.replace("spec: {nodes: 2, command: [python, train.py]}", """spec:
  nodes: 4
  minNodes: 2
  resizeCooldown: 90s
  command: [python, train.py]
  terminationGracePeriod: 45s
  env: {LR: "0.1", DATA: /data}
  checkpoint: {resumeFrom: pretrain}
""")


def test_validate_shows_elasticity_grace_resume_source_and_env_in_text_and_json(tmp_path, capsys):
    f = tmp_path / "t.yaml"
    f.write_text(ELASTIC_JOB)
    assert main(["validate", str(f), "-o", "json"]) == 0
    spec = json.loads(capsys.readouterr().out)["spec"]
    assert (spec["minNodes"], spec["resizeCooldown"], spec["terminationGracePeriod"]) == (2, 90.0, 45.0)
    assert (spec["resumeFrom"], spec["env"]) == ("pretrain", {"LR": "0.1", "DATA": "/data"})
    assert main(["validate", str(f)]) == 0
    out = capsys.readouterr().out
    assert "elastic: 2 to 4 node(s), grows back at most once per 1m30s" in out
    assert "terminationGracePeriod 45s" in out
    assert "resumes from task pretrain's newest checkpoint" in out
    assert "env DATA=/data, LR=0.1" in out
    f.write_text(GOOD)  # the defaults are shown too: a gang that is not elastic runs on all its nodes
    assert main(["validate", str(f), "-o", "json"]) == 0
    spec = json.loads(capsys.readouterr().out)["spec"]
    assert (spec["minNodes"], spec["terminationGracePeriod"], spec["resumeFrom"], spec["env"]) == (2, 30.0, None, {})


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace("nodes: 2", "nodes: 0"), "gangrun: error: spec.nodes: must be >= 1, got 0"),
    ("spec: [", "gangrun: error: "),
    ("", "gangrun: error: a manifest must be a mapping"),
    (GOOD.replace("nodes: 2", "nodes: 2, nodes: 3"), "gangrun: error: spec.nodes: is given twice"),
    (GOOD.replace("nodes: 2", "nodes: 2, maxRuntime: .inf"), "gangrun: error: spec.maxRuntime: must be a finite number"),
    (GOOD.replace("nodes: 2", "nodes: 2, podTemplate: {spec: {containers: [{name: worker, command: [sh]}]}}"),
     "gangrun: error: spec.podTemplate.spec.containers[worker].command: set by gangrun (spec.command)"),
])
def test_s1_bad_manifest_is_one_line_without_traceback(tmp_path, text, message):
    f = tmp_path / "t.yaml"
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "gangrun.cli", "validate", str(f)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith(message)
    assert "Traceback" not in r.stderr and "SpecError" not in r.stderr
    assert len(r.stderr.splitlines()) == 1


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


@pytest.mark.parametrize(("command", "expected"), [
    pytest.param(["logs", "t", "--rank", "all"], None, id="logs-rank-all-is-every-rank-as-in-run"),
    pytest.param(["logs", "t", "--rank", "3"], 3, id="logs-one-rank"),
    pytest.param(["logs", "t"], None, id="logs-every-rank-by-default"),
])
def test_logs_takes_rank_all_as_run_does(command, expected):
    assert build_parser().parse_args(command).rank == expected


@pytest.mark.parametrize(("flags", "field"), [
    (["--boost-min", "50", "--boost-max", "10"], "--boost-max"),
    (["--boost-steps", "600,30"], "--boost-steps"),
    (["--boost-steps", "later"], "--boost-steps"),
    (["--boost-steps", "nan"], "--boost-steps"),
    (["--boost-steps", "30,inf"], "--boost-steps"),
    (["--boost-starved-max", "500"], "--boost-starved-max"),
])
def test_a_bad_priority_boost_band_is_one_error_naming_the_flag(flags, field, capsys):
    assert main(["controller", "--priority-boost", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gangrun: error: {field}") and err.count("\n") == 1


@pytest.mark.parametrize("period", ["0", "-1", "soon"])
def test_a_bad_report_period_names_the_flag(period, capsys):
    with pytest.raises(SystemExit) as e:
        main(["controller", "--priority-boost", "--report-period", period])
    assert e.value.code == 2 and "--report-period" in capsys.readouterr().err


def test_s1_validate_dash_reads_standard_input():
    r = subprocess.run([sys.executable, "-m", "gangrun.cli", "validate", "-", "-o", "json"], input=GOOD.encode(),
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"] == "train"
    r = subprocess.run([sys.executable, "-m", "gangrun.cli", "validate", "-"], input=b"spec: {nodes: .nan}",
                       capture_output=True)
    assert r.returncode == 2 and r.stderr.decode().count("\n") == 1


def test_s1_validate_refuses_non_utf8_bytes_in_one_line(tmp_path, capsys):
    f = tmp_path / "t.yaml"
    f.write_bytes(GOOD.encode() + b"  image: \xff\n")
    assert main(["validate", str(f)]) == 2
    assert capsys.readouterr().err == f"gangrun: error: {f}: not UTF-8 text (byte 0xff at offset {len(GOOD)+9})\n"


@pytest.mark.parametrize("value", ["bogus", "Local", "kube"])
def test_a_bad_gangrun_backend_variable_is_an_error_naming_it(value, monkeypatch, capsys):
    monkeypatch.setenv("GANGRUN_BACKEND", value)
    assert main(["get", "x"]) == 2
    assert capsys.readouterr().err == f"gangrun: error: GANGRUN_BACKEND: must be local or kubernetes, got {value!r}\n"


def test_the_backend_flag_wins_over_the_variable(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GANGRUN_BACKEND", "bogus")
    f = tmp_path / "t.yaml"
    f.write_text(GOOD)
    assert main(["--backend", "local", "validate", str(f)]) == 0
    assert main(["validate", str(f), "--backend", "local"]) == 0


def test_backend_failures_exit_3_and_user_mistakes_exit_2():
    from gangrun._errors import (
        ApiError,
        DaemonUnavailable,
        NotFound,
        SpecError,
        UsageError,
    )
    from gangrun.cli import exit_code

    assert [exit_code(e) for e in (ApiError(403, "forbidden"), NotFound(404, "x"), ApiError(0, "refused"),
                                   DaemonUnavailable("down"))] == [3, 3, 3, 3]
    assert [exit_code(e) for e in (SpecError("spec.nodes", "bad"), UsageError("no task"))] == [2, 2]


def test_an_api_error_prints_its_message_once_without_the_class():
    from gangrun._errors import ApiError
    from gangrun.cli import error_line

    assert error_line(ApiError(403, "forbidden to read ClusteredTasks")) == \
        "gangrun: error: forbidden to read ClusteredTasks (HTTP 403)"
    assert error_line(ApiError(0, "cannot reach the API server:\n  connection refused")) == \
        "gangrun: error: cannot reach the API server: connection refused"


WAITING = ("gang evicted by kueue (Preempted, InClusterQueue): Preempted to accommodate a workload (UID: "
           "0f3c2a3e-1b7d-4a56-9a7e-2f1f5d1e0c9b, JobUID: 5b9f1c2e-8d3a-4e7f-b6a1-0c2d3e4f5a6b) due to "
           "prioritization in the ClusterQueue; waiting for re-admission")


def _view(**kw):
    return {"name": "train", "phase": "Running", "phaseVersion": 4, "reason": WAITING, "attempt": 1,
            "restartAttempt": 0, "userRetriesUsed": 0, "systemRetriesUsed": 0,
            "attempts": [{"number": 1, "startedAt": "2026-01-01T00:00:00+00:00", "endedAt": None, "outcome": None,
                          "reason": None}], **kw}


def test_s5_get_keeps_the_cause_and_that_the_gang_waits_for_readmission():
    from gangrun.cli.output import REASON_WIDTH, task_rows

    row = task_rows([_view()]).splitlines()[1]
    reason = row.split("1  ", 1)[1].strip()
    assert reason.startswith("gang evicted by kueue (Preempted, InClusterQueue)")
    assert reason.endswith("; waiting for re-admission")
    assert len(reason) == REASON_WIDTH and "…" in reason


@pytest.mark.parametrize("width", [20, 40, 70, 90, 120])
def test_a_shortened_reason_keeps_its_end_and_fits(width):
    from gangrun.cli.output import shorten_reason

    short = shorten_reason(WAITING, width)
    assert len(short) == width and short.endswith(WAITING[-(width // 3):])


def test_s4_describe_reports_no_wait_for_a_preemption_that_ended_the_attempt():
    from gangrun.cli.output import describe

    ended = describe(_view(evictionsByCause={"Preempted": 1}, waitingForReadmissionSeconds=0.0), [])
    assert "Evictions:      Preempted 1" in ended and "re-admission" not in ended.replace(WAITING, "")
    waited = describe(_view(evictionsByCause={"Preempted": 1}, waitingForReadmissionSeconds=12.5), [])
    assert "Preempted 1; waited 12.5s for re-admission" in waited



ACCOUNTING = {"queuedSeconds": 3.0, "gangUpSeconds": 3725.0, "workLostSeconds": 4.5, "goodput": 0.8123,
              "workLost": [{"attempt": 1, "cause": "Preempted", "seconds": 4.5, "at": "2026-01-01T00:01:00+00:00"}],
              "lastCheckpoint": {"attempt": 1, "step": 120, "at": "2026-01-01T00:00:58+00:00"},
              "preemptionsByCause": {"Preempted": 1}, "waitingForReadmissionSeconds": 12.5,
              # a key added later (badput by cause): printed by the same rules, with no code of its own
              "badputSeconds": {"queued": 3.0, "waitingForReadmission": 12.5, "workLost": 4.5}}


def test_describe_prints_the_accounting_as_labelled_lines_with_units():
    from gangrun.cli.output import describe

    text = describe(_view(accounting=ACCOUNTING), [])
    block = text.split("Accounting:\n", 1)[1].split("\nAttempts:", 1)[0].splitlines()
    words = [" ".join(line.split()) for line in block]
    for line in ("queued 3.0 s", "gang up 3725.0 s (1h 02m 05s)", "work lost (total) 4.5 s", "goodput 81.2 %",
                 "waiting for readmission 12.5 s"):
        assert line in words, block
    assert not any(c in text for c in "{}'")  # no Python dict anywhere
    # a nested mapping is an indented block under its label, in the unit of a ...Seconds parent
    at = block.index("  badput")
    assert words[at + 1:at + 4] == ["queued 3.0 s", "waiting for readmission 12.5 s", "work lost 4.5 s"]
    assert all(line.startswith("    ") for line in block[at + 1:at + 4])
    assert words[block.index("  preemptions by cause") + 1] == "Preempted 1"
    assert block[block.index("  work lost") + 1].startswith("    attempt 1, cause Preempted, 4.5 s, at ")
    assert words[block.index("  last checkpoint") + 2] == "step 120"


def test_describe_never_cuts_an_attempt_reason():
    from gangrun.cli.output import describe

    view = _view(attempts=[{"number": 1, "startedAt": "2026-01-01T00:00:00+00:00",
                            "endedAt": "2026-01-01T00:05:00+00:00", "outcome": "Preempted", "reason": WAITING},
                           {"number": 2, "startedAt": "2026-01-01T00:06:00+00:00", "endedAt": None,
                            "outcome": None, "reason": None}])
    attempts = describe(view, []).split("Attempts:\n", 1)[1].split("\nEvents:", 1)[0]
    assert "…" not in attempts and attempts.count("reason:") == 1  # attempt 2 has none yet
    lines = attempts.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("      reason: "))
    wrapped = [lines[at].removeprefix("      reason: ")]
    wrapped += [line.strip() for line in lines[at + 1:] if line.startswith(" " * 14)]
    assert " ".join(wrapped) == WAITING and len(wrapped) > 1  # whole, wrapped
    assert lines[at + len(wrapped)].split()[0] == "2"  # then the next attempt's row
    assert all(len(line) <= 100 for line in attempts.splitlines())


def test_describe_shows_the_badput_by_cause_and_a_grace_period_too_short():
    from gangrun.cli.output import describe

    acct = {"goodput": 0.41, "gangUpSeconds": 120.0, "restoringSeconds": 30.2, "workLostSeconds": 5.1,
            "badputSeconds": {"queued": 2.0, "waitingForReadmission": 10.0, "restoring": 30.2, "restarting": 4.0,
                              "workLost": 5.1},
            "lastCheckpoint": {"attempt": 1, "step": 6, "at": "2026-11-30T12:00:10+00:00",
                               "takenAt": "2026-11-30T12:00:08+00:00", "uri": "u"},
            "finalSaveSeconds": [4.0], "periodicSaveSeconds": [1.0, 1.5],
            "grace": {"sufficient": False, "message": "the grace period (2s) is shorter than 1.5 × ..."}}
    text = describe(_view(accounting=acct), [])
    words = [" ".join(line.split()) for line in text.splitlines()]
    at = words.index("badput")
    assert words[at + 1:at + 6] == ["queued 2.0 s", "waiting for readmission 10.0 s", "restoring 30.2 s",
                                    "restarting 4.0 s", "work lost 5.1 s"]
    assert "goodput 41.0 %" in words and "restoring 30.2 s" in words
    assert words[words.index("final save") + 1] == "4.0 s", words
    assert "Grace period: WARNING: the grace period (2s) is shorter than 1.5 × ..." in words


def test_describe_shows_a_save_under_a_second_to_the_millisecond_not_as_zero():
    from gangrun.cli.output import describe

    acct = {"goodput": 0.9, "finalSaveSeconds": [0.042], "periodicSaveSeconds": [0.5, 2.25], "workLostSeconds": 0.0}
    words = [" ".join(line.split()) for line in describe(_view(accounting=acct), []).splitlines()]
    assert words[words.index("final save") + 1] == "0.042 s", words
    assert words[words.index("periodic save") + 1:words.index("periodic save") + 3] == ["0.500 s", "2.2 s"], words
    assert "work lost 0.0 s" in words
