"""gangrun.ClusteredTask: keywords are the manifest's fields, refused with the same one-line errors as the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

import gangrun
from gangrun._api.task import manifest_from_keywords
from gangrun.cli import main

BASE = {"nodes": 2, "command": ["python", "train.py"]}


@pytest.mark.parametrize(("keywords", "field", "want"), [
    pytest.param({"nproc_per_node": 4}, lambda s: s.nproc_per_node, 4, id="snake-case-is-the-manifest-field"),
    pytest.param({"max_runtime": timedelta(minutes=90)}, lambda s: s.max_runtime, timedelta(minutes=90), id="timedelta"),
    pytest.param({"max_runtime": "1h30m"}, lambda s: s.max_runtime, timedelta(minutes=90), id="duration-text"),
    pytest.param({"resume_after_preemption": True}, lambda s: s.failure_policy.resume_after_preemption, True,
                 id="failure-policy-fields-at-the-top"),
    pytest.param({"failure_policy": {"maxRestarts": 2}, "resume_after_preemption": True},
                 lambda s: (s.failure_policy.max_restarts, s.failure_policy.resume_after_preemption), (2, True),
                 id="failure-policy-mapping-and-top-level-merge"),
    pytest.param({"checkpoint_uri": "s3://bucket/runs/"}, lambda s: s.checkpoint_uri, "s3://bucket/runs",
                 id="checkpoint-uri"),
    pytest.param({"checkpoint_uri": "s3://b/r", "resume_from": "train"}, lambda s: (s.checkpoint_uri, s.resume_from),
                 ("s3://b/r", "train"), id="resume-from-beside-checkpoint-uri"),
    pytest.param({"command": ("python", Path("train.py"))}, lambda s: s.command, ("python", "train.py"),
                 id="tuples-and-paths"),
    pytest.param({"generate_name": "train-", "name": None}, lambda s: (s.name, s.generate_name), ("", "train-"),
                 id="generate-name"),
    pytest.param({"priority_class": "high", "queue": "team-a"}, lambda s: (s.priority_class, s.queue),
                 ("high", "team-a"), id="queue-and-priority"),
])
def test_s1_keywords_build_the_manifest_they_name(keywords, field, want) -> None:
    task = gangrun.ClusteredTask(**{"name": "train", **BASE, **keywords})
    assert field(task.spec) == want


@pytest.mark.parametrize(("keywords", "message"), [
    pytest.param({"nodes": 0}, "spec.nodes: must be >= 1, got 0", id="out-of-range"),
    pytest.param({"command": "python train.py"}, "spec.command: must be a list of arguments", id="a-shell-string"),
    pytest.param({"nprocs": 2}, "spec.nprocs: unknown field", id="unknown-keyword-named-as-the-field"),
    pytest.param({"name": "Train"}, "metadata.name: must be a DNS-1035 label", id="bad-name"),
    pytest.param({"name": None}, "metadata.name: is required", id="no-name"),
    pytest.param({"max_restarts": -1}, "spec.failurePolicy.maxRestarts: must be >= 0", id="nested-field"),
    pytest.param({"name": 5}, "metadata.name: must be a DNS-1035 label (lowercase letters, digits and '-', starting "
                 "with a letter, at most 63 characters), got 5", id="a-name-that-is-not-text"),
    pytest.param({"labels": {"a b": "c"}}, "metadata.labels[a b]: is not a valid key", id="label-key"),
    pytest.param({"labels": {"team": "a b"}}, "metadata.labels[team]: must be a label value", id="label-value"),
    pytest.param({"labels": {"team": 3}}, "metadata.labels[team]: must be a string", id="label-number"),
    pytest.param({"labels": ["team"]}, "metadata.labels: must be a mapping", id="labels-not-a-mapping"),
    pytest.param({"annotations": {"-x": "1"}}, "metadata.annotations[-x]: is not a valid key", id="annotation-key"),
    pytest.param({"resume_from": "runs/train"}, "spec.checkpoint.resumeFrom: must be a task name", id="resume-from"),
])
def test_s1_bad_keywords_raise_the_error_the_cli_prints(keywords, message, tmp_path, capsys) -> None:
    with pytest.raises(gangrun.SpecError) as caught:
        gangrun.ClusteredTask(**{"name": "train", **BASE, **keywords})
    assert str(caught.value).startswith(message)
    # the same document through the CLI: the same line
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(manifest_from_keywords({"name": "train", **BASE, **keywords})))
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err == f"gangrun: error: {caught.value}\n"


def test_from_file_from_dict_and_to_dict_agree(tmp_path) -> None:
    built = gangrun.ClusteredTask(generate_name="train-", **BASE, env={"STEPS": 3})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(built.to_dict()))
    read = gangrun.ClusteredTask.from_file(path)
    assert replace(read.spec, source="") == gangrun.ClusteredTask.from_dict(built.to_dict()).spec == built.spec
    assert read.source == path and read.generate_name == "train-" and read.name == ""
    assert repr(read) == "ClusteredTask(generate_name='train-', nodes=2, command=['python', 'train.py'])"


def test_from_file_names_a_missing_file() -> None:
    with pytest.raises(gangrun.GangrunError, match="nope.yaml: no such file"):
        gangrun.ClusteredTask.from_file("nope.yaml")


def test_submit_refuses_what_is_not_a_task_and_unknown_backends() -> None:
    with pytest.raises(gangrun.UsageError, match="^task: must be a gangrun.ClusteredTask or a manifest file, got int"):
        gangrun.submit(3)
    task = gangrun.ClusteredTask(name="train", **BASE)
    with pytest.raises(gangrun.UsageError, match="^backend: must be local or kubernetes, got 'slurm'"):
        gangrun.submit(task, backend="slurm")
    with pytest.raises(gangrun.UsageError, match="^namespace: for the kubernetes backend only"):
        gangrun.submit(task, namespace="ml")


def test_the_default_backend_comes_from_the_environment_and_a_bad_one_is_named(monkeypatch) -> None:
    monkeypatch.setenv("GANGRUN_BACKEND", "slurm")
    with pytest.raises(gangrun.UsageError, match="^GANGRUN_BACKEND: must be local or kubernetes, got 'slurm'"):
        gangrun.attach("train")


@pytest.mark.parametrize(("keywords", "message"), [
    pytest.param({"failure_policy": {"maxRestarts": 1}, "max_restarts": 2},
                 "spec.failurePolicy.maxRestarts: is given twice, as failure_policy['maxRestarts']=1 and as "
                 "max_restarts=2; give one", id="failure-policy"),
    pytest.param({"max_restarts": 2, "failure_policy": {"maxRestarts": 1}},
                 "spec.failurePolicy.maxRestarts: is given twice, as failure_policy['maxRestarts']=1 and as "
                 "max_restarts=2; give one", id="failure-policy-either-order"),
    pytest.param({"checkpoint": {"uri": "/a"}, "checkpoint_uri": "/b"},
                 "spec.checkpoint.uri: is given twice, as checkpoint['uri']='/a' and as checkpoint_uri='/b'; give one",
                 id="checkpoint-uri"),
    pytest.param({"nproc_per_node": 2, "nprocPerNode": 3},
                 "spec.nprocPerNode: is given twice, as nproc_per_node=2 and as nprocPerNode=3; give one",
                 id="snake-and-camel-case"),
])
def test_two_keywords_for_one_field_are_refused_naming_both(keywords, message) -> None:
    with pytest.raises(gangrun.SpecError) as caught:
        gangrun.ClusteredTask(name="train", **BASE, **keywords)
    assert str(caught.value) == message


def test_keywords_that_set_different_fields_of_one_mapping_still_merge() -> None:
    task = gangrun.ClusteredTask(name="train", **BASE, failure_policy={"maxRestarts": 1}, resume_after_preemption=True,
                                 checkpoint={}, checkpoint_uri="/b")
    assert (task.spec.failure_policy.max_restarts, task.spec.failure_policy.resume_after_preemption) == (1, True)
    assert task.spec.checkpoint_uri == "/b"


class NoBackend:
    """A backend a wrong argument never reaches."""

    name = "none"

    def __getattr__(self, name: str):
        raise AssertionError(f"the backend was asked ({name}) before the arguments were checked")


def test_wait_with_a_nan_timeout_is_a_clear_error() -> None:
    with pytest.raises(gangrun.UsageError, match=r"^timeout: must be a number of seconds or None, got NaN$"):
        gangrun.TaskRun("train", NoBackend()).wait(timeout=float("nan"))


@pytest.mark.parametrize(("call", "message"), [
    pytest.param(lambda run: run.wait(timeout="5"), "timeout: must be a number of seconds or None, got '5'",
                 id="timeout-as-text"),
    pytest.param(lambda run: run.wait(timeout=True), "timeout: must be a number of seconds or None, got True",
                 id="timeout-as-a-boolean"),
    pytest.param(lambda run: run.logs(rank="0"), "rank: must be a whole number (or None for every rank), got '0'",
                 id="rank-as-text"),
    pytest.param(lambda run: run.logs(rank=-1), "rank: must be >= 0, got -1", id="negative-rank"),
    pytest.param(lambda run: run.log_lines(rank=1.0), "rank: must be a whole number (or None for every rank), got 1.0",
                 id="rank-as-a-float"),
    pytest.param(lambda run: run.logs(attempt="2"),
                 "attempt: must be a whole number (or None for the current attempt), got '2'", id="attempt-as-text"),
    pytest.param(lambda run: run.logs(attempt=0), "attempt: must be >= 1, got 0", id="attempt-zero"),
    pytest.param(lambda run: run.watch(rank="all"), "rank: must be a whole number (or None for every rank), got 'all'",
                 id="watch-rank"),
])
def test_a_wrong_argument_to_a_run_is_one_error_naming_it(call, message) -> None:
    with pytest.raises(gangrun.UsageError) as caught:
        call(gangrun.TaskRun("train", NoBackend()))
    assert str(caught.value) == message


@pytest.mark.parametrize("name", [None, "", 5])
def test_attach_without_a_task_name_says_so(name) -> None:
    with pytest.raises(gangrun.UsageError) as caught:
        gangrun.attach(name, backend=NoBackend())
    assert str(caught.value) == f"name: must be a task's name like train, got {name!r}"
