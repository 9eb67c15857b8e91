"""S1: the manifest model: defaults, units, and errors that name the field."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest

from gangrun._core.spec import parse_manifest
from gangrun._core.units import format_duration, parse_duration, parse_quantity
from gangrun._errors import SpecError


def manifest(**spec):
    return {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": "train"},
            "spec": {"nodes": 2, "command": ["python", "train.py"], **spec}}


def test_s1_defaults():
    s = parse_manifest(manifest())
    assert (s.nodes, s.nproc_per_node, s.retries, s.max_system_retries) == (2, 1, 0, 3)
    assert s.failure_policy.max_restarts == 0 and s.failure_policy.resume_after_preemption is False
    assert (s.queue, s.priority_class, s.checkpoint_uri, s.max_runtime) == ("default", "", "", None)
    assert s.termination_grace == timedelta(seconds=30)
    assert s.world_size == 2


def test_s1_full_manifest_round_trips_into_the_policy():
    s = parse_manifest(manifest(nprocPerNode=4, retries=2, maxRuntime="1h30m", queue="team-a", priorityClass="low",
                                failurePolicy={"maxRestarts": 1, "resumeAfterPreemption": True},
                                resources={"cpu": "500m", "memory": "1Gi", "gpu": 1},
                                checkpoint={"uri": "s3://bucket/prefix/"}, env={"A": 1, "B": True}))
    p = s.policy()
    assert (p.retries, p.max_restarts, p.resume_after_preemption, p.max_runtime) == (2, 1, True, timedelta(hours=1.5))
    assert s.resources.cpu == Decimal("0.5") and s.resources.memory == 2**30 and s.resources.gpu == 1
    assert s.checkpoint_uri == "s3://bucket/prefix"
    assert s.env == {"A": "1", "B": "true"}
    assert s.world_size == 8


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(manifest(nodes=0), "spec.nodes: must be >= 1, got 0", id="nodes-zero"),
        pytest.param(manifest(nodes="2"), "spec.nodes: must be a whole number, got '2'", id="nodes-string"),
        pytest.param(manifest(nprocPerNode=0), "spec.nprocPerNode: must be >= 1, got 0", id="nproc-zero"),
        pytest.param(manifest(retries=-1), "spec.retries: must be >= 0, got -1", id="retries-negative"),
        pytest.param(manifest(command="python train.py"), "spec.command: must be a list of arguments", id="command-string"),
        pytest.param(manifest(command=[]), "spec.command: must be a non-empty list", id="command-empty"),
        pytest.param(manifest(command=["python", {"a": 1}]), "spec.command[1]: must be a string", id="command-item"),
        pytest.param(manifest(maxRuntime="soon"), "spec.maxRuntime: expected a duration", id="runtime-bad"),
        pytest.param(manifest(maxRuntime="0s"), "spec.maxRuntime: must be longer than 0s", id="runtime-zero"),
        pytest.param(manifest(resources={"cpu": "lots"}), "spec.resources.cpu: expected a quantity", id="cpu-bad"),
        pytest.param(manifest(resources={"cpu": "0"}), "spec.resources.cpu: must be more than 0", id="cpu-zero"),
        pytest.param(manifest(resources={"gpu": -1}), "spec.resources.gpu: must be a whole number >= 0", id="gpu-neg"),
        pytest.param(manifest(resources={"tpu": 1}), "spec.resources.tpu: unknown field", id="resource-unknown"),
        pytest.param(manifest(failurePolicy={"maxRestarts": -1}), "spec.failurePolicy.maxRestarts: must be >= 0",
                     id="max-restarts-negative"),
        pytest.param(manifest(failurePolicy={"resumeAfterPreemption": "yes"}),
                     "spec.failurePolicy.resumeAfterPreemption: must be true or false", id="resume-not-bool"),
        pytest.param(manifest(failurePolicy={"resume": True}), "spec.failurePolicy.resume: unknown field", id="fp-typo"),
        pytest.param(manifest(nodez=2), "spec.nodez: unknown field", id="spec-typo"),
        pytest.param(manifest(queue="Team A"), "spec.queue: must be a DNS-1035 name", id="queue-bad"),
        pytest.param(manifest(env={"RANK": "3"}), "spec.env.RANK: is set by gangrun", id="env-reserved"),
        pytest.param(manifest(env={"A": None}), "spec.env.A: must be a string", id="env-null"),
        pytest.param(manifest(env={f"V{i}": "x" for i in range(257)}), "spec.env: must have at most 256 entries",
                     id="env-too-many"),
        pytest.param({**manifest(), "kind": "Job"}, "kind: must be ClusteredTask", id="wrong-kind"),
        pytest.param({**manifest(), "apiVersion": "v1"}, "apiVersion: must be gangrun.dev/v1alpha1", id="wrong-api"),
        pytest.param({**manifest(), "metadata": {"name": "Train_1"}}, "metadata.name: must be a DNS-1035 label",
                     id="name-bad"),
        pytest.param({**manifest(), "metadata": {}}, "metadata.name: is required", id="name-missing"),
        pytest.param({k: v for k, v in manifest().items() if k != "spec"}, "spec: is required", id="spec-missing"),
        pytest.param([1, 2], "a manifest must be a mapping", id="not-a-mapping"),
        pytest.param({**manifest(), "spec": {"command": ["x"]}}, "spec.nodes: is required", id="nodes-missing"),
    ],
)
def test_s1_invalid_manifest_names_the_field(doc, message):
    with pytest.raises(SpecError) as err:
        parse_manifest(doc)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("1h30m", 5400), ("2d", 172800),
                                               ("250ms", 0.25), (45, 45), ("45", 45)])
def test_durations(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "1x", "h1", "-5s", "1h 30m", True])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(("text", "value"), [("500m", "0.5"), ("1Gi", 2**30), ("2", 2), ("1.5", "1.5"),
                                             ("1e3", 1000), ("4G", 4 * 10**9), ("128Mi", 128 * 2**20), (3, 3)])
def test_quantities(text, value):
    assert parse_quantity(text) == Decimal(value)


def test_format_duration():
    assert format_duration(timedelta(seconds=5400)) == "1h30m"
    assert format_duration(timedelta(0)) == "0s"


def test_format_bytes():
    from gangrun._core.units import format_bytes

    assert (format_bytes(2**31), format_bytes("1610612736"), format_bytes(512), format_bytes(0)) == (
        "2Gi", "1.5Gi", "512", "0")


@pytest.mark.parametrize(("spec", "field"), [
    ({"command": ["echo", "a\0b"]}, "spec.command[1]"),
    ({"env": {"A": "x\0y"}}, "spec.env.A"),
    ({"workingDir": "/tmp\0x"}, "spec.workingDir"),
])
def test_s1_a_nul_byte_is_refused_naming_the_field(spec, field):
    with pytest.raises(SpecError, match=rf"^{re.escape(field)}: contains a NUL byte"):
        parse_manifest(manifest(**spec))
