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
        pytest.param(manifest(resources={"gpu": -1}), "spec.resources.gpu: must be a whole number from 0 to", id="gpu-neg"),
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


def _deep(n: int):
    doc: object = 1
    for _ in range(n):
        doc = {"a": doc}
    return doc


# -- hostile documents (issue 13.4): each refused with one line naming the field ----------------------


@pytest.mark.parametrize(("doc", "message"), [
    pytest.param(manifest(maxRuntime=float("inf")), "spec.maxRuntime: must be a finite number", id="runtime-inf"),
    pytest.param(manifest(maxRuntime=1.0e300), "spec.maxRuntime: a duration must be at most 365d", id="runtime-1e300"),
    pytest.param(manifest(maxRuntime="99999999999d"), "spec.maxRuntime: a duration must be at most",
                 id="runtime-days-overflow"),
    pytest.param(manifest(maxRuntime=10**400), "spec.maxRuntime: a duration must be at most", id="runtime-huge-int"),
    pytest.param(manifest(terminationGracePeriod="9" * 400 + "s"), "spec.terminationGracePeriod: a duration must be",
                 id="grace-inf-after-float"),
    pytest.param(manifest(maxRuntime=[1]), "spec.maxRuntime: expected a duration", id="runtime-list"),
    pytest.param(manifest(resources={"cpu": float("nan")}), "spec.resources.cpu: must be a finite number", id="cpu-nan"),
    pytest.param(manifest(resources={"cpu": "1e999999999"}), "spec.resources.cpu: expected a quantity",
                 id="cpu-exponent-billion"),
    pytest.param(manifest(resources={"memory": "1e999"}), "spec.resources.memory: a quantity must be at most",
                 id="memory-1e999"),
    pytest.param(manifest(resources={"memory": 10**30}), "spec.resources.memory: a quantity must be at most",
                 id="memory-huge-int"),
    pytest.param(manifest(resources={"memory": None}), "spec.resources.memory: expected a quantity", id="memory-null"),
    pytest.param(manifest(env={"A": float("-inf")}), "spec.env.A: must be a finite number", id="env-inf"),
    pytest.param(manifest(nprocPerNode=100000), "spec.nprocPerNode: must be <= 1024, got 100000", id="nproc-huge"),
    pytest.param(manifest(nodes=10**40), "spec.nodes: must be <= 10000, got a number with more than 19 digits",
                 id="nodes-40-digits"),
    pytest.param(manifest(retries=10**6), "spec.retries: must be <= 1000", id="retries-huge"),
    pytest.param(manifest(command=["x"] * 5000), "spec.command: must have at most 4096 arguments",
                 id="command-too-long"),
    pytest.param(manifest(maxSystemRetries=5000), "spec.maxSystemRetries: must be <= 1000", id="system-retries-huge"),
    pytest.param(manifest(failurePolicy={"maxRestarts": 10**9}), "spec.failurePolicy.maxRestarts: must be <= 1000",
                 id="max-restarts-huge"),
    pytest.param(manifest(resources={"gpu": 100000}), "spec.resources.gpu: must be a whole number from 0 to 1024",
                 id="gpu-huge"),
    pytest.param(manifest(command=["echo", "\ud800"]), "spec.command[1]: contains '\\ud800', a lone surrogate",
                 id="surrogate-in-command"),
    pytest.param(manifest(env={"A": "x\udfff"}), "spec.env.A: contains '\\udfff'", id="surrogate-in-env"),
    pytest.param({**manifest(), "metadata": {"name": "t", "labels": {"\ud800": "x"}}},
                 "metadata.labels.'\\ud800': contains", id="surrogate-in-a-key"),
    pytest.param(manifest(env={"A\nB": "x"}), "spec.env.'A\\nB': is not a valid", id="newline-key-stays-one-line"),
    pytest.param(manifest(extra=_deep(100)), "spec.extra" + ".a" * 31 + ": is nested more than 32 levels deep",
                 id="deep-nesting"),
])
def test_s1_hostile_values_are_refused_naming_the_field(doc, message):
    with pytest.raises(SpecError) as err:
        parse_manifest(doc)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300



def test_s1_the_bounds_themselves_are_accepted():
    s = parse_manifest(manifest(nodes=10_000, nprocPerNode=1024, retries=1000, maxSystemRetries=1000,
                                maxRuntime="365d", failurePolicy={"maxRestarts": 1000},
                                resources={"gpu": 1024, "memory": str(2**63 - 1)}))
    assert (s.nodes, s.nproc_per_node, s.max_runtime) == (10_000, 1024, timedelta(days=365))


@pytest.mark.parametrize("text", [float("inf"), float("nan"), "9" * 400, 1e300, "999999999999999d", 10**400])
def test_durations_are_bounded(text):
    with pytest.raises(ValueError, match="at most 365d"):
        parse_duration(text)


@pytest.mark.parametrize("text", [float("inf"), float("nan"), "1e9999", "1e999999999", 2**63, "9Ei", None, [1]])
def test_quantities_are_finite_and_bounded(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_the_core_reads_no_files():
    """Reading and parsing manifest files lives outside the pure core (gangrun._manifest_file)."""
    import ast
    from pathlib import Path

    import gangrun._core

    io_modules = {"yaml", "json", "os", "io", "pathlib", "subprocess", "socket", "sqlite3", "kubernetes"}
    for path in Path(gangrun._core.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & io_modules, f"{path.name} imports {sorted(imported & io_modules)}"
        assert "open(" not in path.read_text().replace("reopen(", ""), path.name


@pytest.mark.parametrize(("value", "want"), [
    ("train", "train"), ("s3://bucket/ckpts/train/", "s3://bucket/ckpts/train"),
    ("/data/ckpts/train/3f2a/attempt-1/ckpt-000004", "/data/ckpts/train/3f2a/attempt-1/ckpt-000004"),
    ("file:///var/ckpts/train", "file:///var/ckpts/train"), ("", ""),
])
def test_resume_from_takes_a_task_name_or_a_checkpoint_uri(value, want):
    assert parse_manifest(manifest(checkpoint={"resumeFrom": value})).resume_from == want


@pytest.mark.parametrize("value", ["Train", "ckpts/train", "s3://", "/", "a b", 5, ["train"], "x" * 64])
def test_a_bad_resume_from_is_refused_naming_the_field(value):
    with pytest.raises(SpecError, match=r"^spec\.checkpoint\.resumeFrom: must be"):
        parse_manifest(manifest(checkpoint={"resumeFrom": value}))
