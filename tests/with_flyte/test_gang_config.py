"""The pure parts of gangrun.flyte: the Gang config and its manifest, names, resources, the workers'
arguments, the connector's manifest and phase mapping; and that gangrun itself never imports Flyte."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from .conftest import require_flyte

require_flyte()

import flyte  # noqa: E402

import gangrun.flyte  # noqa: E402
from gangrun import SpecError  # noqa: E402
from gangrun.flyte import Gang, GangTask  # noqa: E402
from gangrun.flyte._call import rank_args  # noqa: E402
from gangrun.flyte._gang import gang_name_prefix, resources_of  # noqa: E402
from gangrun.flyte._remote import PHASES, execution_env, flyte_phase, manifest_doc  # noqa: E402
from gangrun.flyte._task import CUSTOM_KEY  # noqa: E402


@pytest.mark.parametrize(("kwargs", "field", "says"), [
    ({"nodes": 0}, "spec.nodes", "must be >= 1"),
    ({"nodes": 2, "nproc_per_node": 0}, "spec.nprocPerNode", ">= 1"),
    ({"nodes": 2, "retries": -1}, "spec.retries", ">= 0"),
    ({"nodes": 2, "priority_class": "Not A Class!"}, "spec.priorityClass", ""),
    ({"nodes": 2, "resources": {"cpu": "lots"}}, "spec.resources.cpu", ""),
    ({"nodes": 2, "options": {"nprocs": 2}}, "spec.nprocs", "unknown field"),
    ({"nodes": 2, "options": {"nodes": 3}}, "Gang.options.nodes", "a field of Gang itself: give nodes= to Gang"),
    pytest.param({"nodes": 2, "options": {"command": ["x"]}}, "Gang.options.command",
                 "the task's function is every rank's command", id="command-names-no-field-gang-lacks"),
    pytest.param({"nodes": 2, "options": {"generate_name": "x-"}}, "Gang.options.generate_name",
                 "named after the Flyte task", id="name-comes-from-the-task"),
    ({"nodes": 2, "min_nodes": 3}, "spec.minNodes", "must be at most spec.nodes (2)"),
])
def test_a_bad_gang_value_fails_when_the_gang_is_made_naming_the_field(kwargs: dict, field: str, says: str) -> None:
    with pytest.raises(SpecError) as raised:
        Gang(**kwargs)
    assert raised.value.field == field and says in raised.value.problem


def test_min_nodes_equal_to_nodes_is_a_fixed_size_gang_and_below_it_an_elastic_one() -> None:
    assert not Gang(nodes=2, min_nodes=2).manifest(name_prefix="t", command=["true"]).spec.elastic
    spec = Gang(nodes=4, min_nodes=2).manifest(name_prefix="t", command=["true"]).spec
    assert (spec.nodes, spec.least_nodes, spec.elastic) == (4, 2, True)


def test_the_gangs_manifest_carries_every_field_and_takes_the_flyte_tasks_retries_and_resources() -> None:
    gang = Gang(nodes=3, nproc_per_node=2, resume_after_preemption=False, max_restarts=4, queue="default",
                priority_class="low", options={"termination_grace_period": "7s", "env": {"A": "1"}})
    spec = gang.manifest(name_prefix="env.train", command=["x"], retries=2,
                         resources={"cpu": "2", "memory": "1Gi"}).spec
    assert (spec.generate_name, spec.nodes, spec.nproc_per_node, spec.retries, spec.queue, spec.priority_class) == (
        "env-train-", 3, 2, 2, "default", "low")
    assert (spec.failure_policy.max_restarts, spec.failure_policy.resume_after_preemption) == (4, False)
    assert (str(spec.resources.cpu), spec.termination_grace.total_seconds(), spec.env) == ("2", 7.0, {"A": "1"})
    own = Gang(nodes=1, retries=5, resources={"cpu": "1"}).manifest(name_prefix="t", command=["x"], retries=2,
                                                                      resources={"cpu": "2"}).spec
    assert (own.retries, str(own.resources.cpu)) == (5, "1")  # the Gang's own values win


@pytest.mark.parametrize(("name", "prefix"), [
    ("train.train", "train-train-"),
    ("My_Env.Fit", "my-env-fit-"),
    ("2fast", "flyte-2fast-"),
    ("x" * 80, "x" * 40 + "-"),
    ("..", "flyte-"),
])
def test_a_flyte_task_name_becomes_a_valid_generate_name(name: str, prefix: str) -> None:
    assert gang_name_prefix(name) == prefix


@dataclass
class FakeResources:  # the fields of flyte.Resources that gangrun reads
    cpu: Any = None
    memory: Any = None
    gpu: Any = None


@pytest.mark.parametrize(("resources", "expected"), [
    (None, None),
    (FakeResources(), None),
    (FakeResources(cpu=2, memory="4Gi"), {"cpu": "2", "memory": "4Gi"}),
    (FakeResources(cpu=("1", "2"), gpu=1), {"cpu": "1", "gpu": 1}),
    (flyte.Resources(cpu="500m", memory="64Mi"), {"cpu": "500m", "memory": "64Mi"}),
])
def test_flyte_resources_become_the_gangs_per_node_resources(resources: Any, expected: Any) -> None:
    assert resources_of(resources) == expected


def test_a_gpu_named_by_model_asks_for_gang_resources() -> None:
    with pytest.raises(SpecError, match="give Gang"):
        resources_of(FakeResources(gpu="A100:2"))


@pytest.mark.parametrize(("args", "rank", "expected"), [
    (["a0", "--outputs-path", "s3://b/o", "--inputs", "i"], 0, ["a0", "--outputs-path", "s3://b/o", "--inputs", "i"]),
    (["a0", "--outputs-path", "s3://b/o/", "--inputs", "i"], 3, ["a0", "--outputs-path", "s3://b/o/rank-3", "--inputs", "i"]),
    (["a0", "--inputs", "i"], 1, ["a0", "--inputs", "i"]),
    (["a0", "--outputs-path"], 1, ["a0", "--outputs-path"]),
])
def test_only_rank_0_writes_the_flyte_outputs_on_a_cluster(args: list[str], rank: int, expected: list[str]) -> None:
    assert rank_args(args, rank) == expected


@pytest.mark.parametrize(("phase", "flyte_name"), [
    ("Queued", "QUEUED"),
    ("WaitingForResources", "WAITING_FOR_RESOURCES"),  # also a preempted gang waiting for readmission
    ("Initializing", "INITIALIZING"),
    ("Running", "RUNNING"),
    ("Succeeded", "SUCCEEDED"),
    ("Failed", "FAILED"),
    ("Aborted", "ABORTED"),
    ("Unheard", "UNDEFINED"),
])
def test_gangrun_phases_map_onto_flyte_task_execution_phases(phase: str, flyte_name: str) -> None:
    from flyteidl2.core.execution_pb2 import TaskExecution

    assert flyte_phase(phase) == flyte_name
    TaskExecution.Phase.Value(flyte_name)  # a name Flyte knows


def test_every_gangrun_phase_has_a_flyte_phase() -> None:
    from gangrun._core.phases import Phase

    assert set(PHASES) == {p.value for p in Phase}


def test_the_connector_manifest_is_the_custom_one_with_flytes_arguments_image_and_namespace() -> None:
    doc = Gang(nodes=2).manifest(name_prefix="t", command=["python", "-m", "w", "flyte"]).to_dict()
    out = manifest_doc({CUSTOM_KEY: json.dumps(doc)}, CUSTOM_KEY, args=["a0", "--inputs", "x"], image="img:1",
                       namespace="ns")
    assert out["spec"]["command"] == ["python", "-m", "w", "flyte", "a0", "--inputs", "x"]
    assert (out["spec"]["nodes"], out["spec"]["image"], out["metadata"]["namespace"]) == (2, "img:1", "ns")
    assert type(out["spec"]["nodes"]) is int  # not the float a protobuf Struct would make of it
    pinned = manifest_doc({CUSTOM_KEY: json.dumps({**doc, "spec": {**doc["spec"], "image": "own:2"}})}, CUSTOM_KEY,
                          args=[], image="img:1", namespace=None)
    assert pinned["spec"]["image"] == "own:2" and "namespace" not in pinned["metadata"]
    for custom in ({"other": 1}, {CUSTOM_KEY: "{not json"}, {CUSTOM_KEY: doc}):
        with pytest.raises(SpecError, match="carries its manifest as JSON text under"):
            manifest_doc(custom, CUSTOM_KEY, args=[], image="", namespace=None)


def test_the_connector_gives_every_rank_a_flyte_pods_environment_the_manifests_own_env_winning() -> None:
    doc = Gang(nodes=2, options={"env": {"A": "own"}}).manifest(name_prefix="t", command=["w"]).to_dict()
    flyte_env = {"_U_RUN_BASE": "s3://b/r", "ACTION_NAME": "a0", "A": "flyte", "RANK": "7", "WORLD_SIZE": "9"}
    out = manifest_doc({CUSTOM_KEY: json.dumps(doc)}, CUSTOM_KEY, args=[], image="", namespace=None, env=flyte_env)
    # gangrun sets RANK and WORLD_SIZE for every worker: Flyte's values for them are left out
    assert out["spec"]["env"] == {"_U_RUN_BASE": "s3://b/r", "ACTION_NAME": "a0", "A": "own"}
    assert gangrun.ClusteredTask.from_dict(out).spec.env["_U_RUN_BASE"] == "s3://b/r"


def test_the_connector_runs_the_pods_as_flytes_service_account_unless_the_pod_template_names_one() -> None:
    plain = Gang(nodes=2).manifest(name_prefix="t", command=["w"]).to_dict()
    out = manifest_doc({CUSTOM_KEY: json.dumps(plain)}, CUSTOM_KEY, args=[], image="", namespace=None,
                       service_account="flyte-runner")
    assert out["spec"]["podTemplate"] == {"spec": {"serviceAccountName": "flyte-runner"}}
    own = Gang(nodes=2, options={"pod_template": {"spec": {"serviceAccountName": "trainer"}}}).manifest(
        name_prefix="t", command=["w"]).to_dict()
    out = manifest_doc({CUSTOM_KEY: json.dumps(own)}, CUSTOM_KEY, args=[], image="", namespace=None,
                       service_account="flyte-runner")
    assert out["spec"]["podTemplate"]["spec"]["serviceAccountName"] == "trainer"
    none = manifest_doc({CUSTOM_KEY: json.dumps(plain)}, CUSTOM_KEY, args=[], image="", namespace=None)
    assert "podTemplate" not in none["spec"]


@pytest.mark.parametrize(("execution", "task", "expected"), [
    ({}, {}, {}),
    ({"project": "p", "domain": "d", "name": "r1", "org": "o"}, {"project": "p", "domain": "d", "name": "env.t",
                                                                 "version": "v1"},
     {"FLYTE_INTERNAL_EXECUTION_ID": "r1", "FLYTE_INTERNAL_EXECUTION_PROJECT": "p",
      "FLYTE_INTERNAL_EXECUTION_DOMAIN": "d", "FLYTE_INTERNAL_TASK_PROJECT": "p", "FLYTE_INTERNAL_TASK_DOMAIN": "d",
      "FLYTE_INTERNAL_TASK_NAME": "env.t", "FLYTE_INTERNAL_TASK_VERSION": "v1", "FLYTE_ATTEMPT_NUMBER": "2"}),
    ({"project": "p", "domain": ""}, {}, {"FLYTE_INTERNAL_EXECUTION_PROJECT": "p", "FLYTE_ATTEMPT_NUMBER": "2"}),
])
def test_a_task_executions_identifier_names_the_project_and_domain_flytes_entrypoint_reads(
        execution: dict[str, str], task: dict[str, str], expected: dict[str, str]) -> None:
    assert execution_env(execution=execution, task=task, attempt=2) == expected


def test_a_task_environment_with_a_gang_makes_gang_tasks_whose_flyte_retries_move_to_the_gang() -> None:
    env = flyte.TaskEnvironment(name="cfg", plugin_config=Gang(nodes=2))

    @env.task(retries=3)
    def f() -> int:
        return 1

    assert isinstance(f, GangTask) and f.task_type == "gangrun"
    assert (f.retries.count, f.gang_retries) == (0, 3)
    assert f.manifest(["x"]).spec.retries == 3
    assert f.override(retries=4).gang_retries == 4  # an override moves too
    with pytest.raises(SpecError, match="give one of them"):
        flyte.TaskEnvironment(name="both", plugin_config=Gang(nodes=2, retries=1)).task(retries=2)(lambda: 1)


def test_gangrun_without_the_flyte_extra_imports_no_flyte() -> None:
    code = ("import sys, gangrun, gangrun._api, gangrun.cli, gangrun._backends.local, gangrun.checkpoint; "
            "gangrun.ClusteredTask; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('flyte', 'flyteidl2', 'cloudpickle')); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert gangrun.flyte.Gang is Gang
