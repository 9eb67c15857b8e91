"""The ClusteredTask CRD: generated from one source, and its schema refuses what `parse_manifest` refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gangrun._backends.kube import crd
from gangrun._backends.kube.render import render_jobset
from gangrun._core import spec as core_spec
from gangrun._core.spec import parse_manifest
from gangrun._errors import SpecError
from tests.harness.kube_builders import manifest

ROOT = Path(__file__).resolve().parents[2]


def _schema() -> dict[str, Any]:
    return crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _errors(doc: dict[str, Any]) -> list[str]:
    v = jsonschema.Draft7Validator(_schema())
    return sorted(".".join(str(p) for p in e.absolute_path) + ": " + e.validator for e in v.iter_errors(doc))


def test_committed_crd_yaml_matches_the_generator() -> None:
    assert (ROOT / "deploy" / "crd.yaml").read_text() == crd.crd_yaml(), \
        "deploy/crd.yaml is stale: python -m gangrun._backends.kube.crd > deploy/crd.yaml"


def test_crd_has_status_subresource_and_printer_columns() -> None:
    version = crd.crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Phase", "Attempt", "Reason", "Age"]
    assert crd.crd()["metadata"]["name"] == "clusteredtasks.gangrun.dev"


@pytest.mark.parametrize("spec", [
    pytest.param({}, id="minimal"),
    pytest.param({"nprocPerNode": 4, "workingDir": "/app", "env": {"A": "1"}, "retries": 2, "maxSystemRetries": 5,
                  "maxRuntime": "1h30m", "terminationGracePeriod": "90s",
                  "resources": {"cpu": "500m", "memory": "1Gi", "gpu": 1},
                  "failurePolicy": {"maxRestarts": 2, "resumeAfterPreemption": True},
                  "queue": "team-a", "priorityClass": "high", "checkpoint": {"uri": "s3://b/p"}}, id="every-field"),
    pytest.param({"resources": {"cpu": 2, "memory": 1073741824}}, id="numeric-quantities"),
])
def test_valid_manifests_pass_the_schema_and_the_parser(spec: dict[str, Any]) -> None:
    doc = manifest(**spec)
    assert _errors(doc) == []
    parse_manifest(doc)


@pytest.mark.parametrize("spec,error", [
    pytest.param({"nodes": 0}, "spec.nodes: minimum", id="nodes-zero"),
    pytest.param({"nprocPerNode": 0}, "spec.nprocPerNode: minimum", id="nproc-zero"),
    pytest.param({"retries": -1}, "spec.retries: minimum", id="negative-retries"),
    pytest.param({"failurePolicy": {"maxRestarts": -1}}, "spec.failurePolicy.maxRestarts: minimum",
                 id="negative-restarts"),
    pytest.param({"command": []}, "spec.command: minItems", id="empty-command"),
    pytest.param({"command": "python train.py"}, "spec.command: type", id="shell-string-command"),
    pytest.param({"queue": "Team_A"}, "spec.queue: pattern", id="queue-not-dns"),
    pytest.param({"maxRuntime": "an hour"}, "spec.maxRuntime: pattern", id="bad-duration"),
    pytest.param({"resources": {"memory": "lots"}}, "spec.resources.memory: pattern", id="bad-quantity"),
    pytest.param({"resources": {"gpu": -1}}, "spec.resources.gpu: minimum", id="negative-gpu"),
    pytest.param({"image": ""}, "spec.image: minLength", id="empty-image"),
    pytest.param({"nprocPerNode": 100000}, "spec.nprocPerNode: maximum", id="nproc-unbounded"),
    pytest.param({"nodes": 10**6}, "spec.nodes: maximum", id="nodes-unbounded"),
    pytest.param({"failurePolicy": {"maxRestarts": 10**6}}, "spec.failurePolicy.maxRestarts: maximum",
                 id="restarts-unbounded"),
])
def test_bad_specs_are_refused_at_admission_naming_the_field(spec: dict[str, Any], error: str) -> None:
    doc = manifest(**spec)
    assert error in _errors(doc)
    if "image" not in error:  # an image is a Kubernetes-only requirement; the local backend needs none
        with pytest.raises(SpecError, match=error.split(":")[0].replace(".", r"\.")):
            parse_manifest(doc)


def test_missing_required_fields_are_named() -> None:
    doc = manifest()
    del doc["spec"]["nodes"], doc["spec"]["command"], doc["spec"]["image"]
    assert _errors(doc) == ["spec: required"] * 3


def test_reserved_env_names_are_refused_by_a_cel_rule() -> None:
    rule = _schema()["properties"]["spec"]["properties"]["env"]["x-kubernetes-validations"][0]
    assert '"NODE_RANK"' in rule["rule"] and "cannot be overridden" in rule["message"]


def test_every_spec_field_of_the_schema_is_one_the_parser_knows() -> None:
    fields = set(_schema()["properties"]["spec"]["properties"])
    assert fields == {"nodes", "nprocPerNode", "command", "workingDir", "env", "image", "resources", "retries",
                      "maxSystemRetries", "maxRuntime", "failurePolicy", "queue", "priorityClass", "checkpoint",
                      "terminationGracePeriod", "podTemplate", "shmSize", "gpuResource", "minNodes", "resizeCooldown"}


def test_deploy_examples_are_valid() -> None:
    for path in sorted((ROOT / "deploy" / "examples").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert _errors(doc) == [], path.name
        parse_manifest(doc)


def test_env_is_bounded_so_a_real_api_server_accepts_the_cel_rule() -> None:
    # kube-apiserver v1.36 refused the CRD without a bound: "estimated rule cost exceeds budget by
    # factor of 1.10x" on the reserved-names rule (found by tests/e2e/test_controller.py).
    env = _schema()["properties"]["spec"]["properties"]["env"]
    assert env["maxProperties"] == core_spec.ENV_MAX


def test_a_priority_class_longer_than_a_label_value_is_refused_at_admission_and_at_submit() -> None:
    # It becomes the JobSet's kueue.x-k8s.io/priority-class label: past 63 characters the API server
    # refuses every JobSet of the task, and the controller could only retry the create forever.
    doc = manifest(priorityClass="p" * 64)
    assert "spec.priorityClass: maxLength" in _errors(doc)
    with pytest.raises(SpecError, match=r"^spec\.priorityClass"):
        render_jobset(parse_manifest(doc))
    assert _errors(manifest(priorityClass="p" * 63)) == []


def test_b5_the_status_schema_names_every_badput_cause_of_the_one_definition() -> None:
    from gangrun._core import badput
    from gangrun._core.accounting import Accounting

    accounting = _schema()["properties"]["status"]["properties"]["accounting"]["properties"]
    assert tuple(accounting["badputSeconds"]["properties"]) == badput.KEYS
    assert tuple(Accounting().for_storage()["badputSeconds"]) == badput.KEYS
    assert "belowFullSize" in badput.KEYS and "stepSeconds" in accounting
