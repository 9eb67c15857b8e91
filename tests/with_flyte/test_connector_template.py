"""What Flyte's serialiser makes of a GangTask for the `gangrun` connector, and how the connector service
finds the connector (its end-to-end run on a cluster is tests/e2e/test_flyte_e2e.py)."""

from __future__ import annotations

import importlib
import json
import tomllib
from pathlib import Path

from .conftest import require_flyte

require_flyte()  # before anything of the flyte extra (protobuf here): without it the module skips

from flyte.connectors import ConnectorRegistry  # noqa: E402
from google.protobuf import json_format  # noqa: E402

import gangrun  # noqa: E402
from gangrun.flyte._remote import manifest_doc  # noqa: E402
from gangrun.flyte._task import CUSTOM_KEY  # noqa: E402
from gangrun.flyte.connector import GangConnector  # noqa: E402

from . import connector_calls, gang_tasks  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_a_gang_tasks_template_carries_its_manifest_for_the_connector_and_flytes_entrypoint() -> None:
    tt = connector_calls.template(gang_tasks.flaky)
    assert (tt.type, tt.task_type_version) == ("gangrun", 0)
    assert tt.metadata.retries.retries == 0  # Flyte retries nothing: the gang spends the retries
    doc = json.loads(json_format.MessageToDict(tt.custom)["clusteredTask"])
    assert doc["metadata"]["generateName"] == "gangtest-flaky-"
    spec = doc["spec"]
    assert spec["command"] == ["python", "-m", "gangrun.flyte._worker", "flyte"]
    assert (spec["nodes"], spec["retries"], spec["failurePolicy"]["resumeAfterPreemption"]) == (2, 1, True)
    assert tt.container.args[0] == "a0" and "--outputs-path" in tt.container.args


def test_the_connector_makes_a_valid_clustered_task_of_the_template_flyte_ships() -> None:
    tt = connector_calls.template(gang_tasks.train)
    doc = manifest_doc(json_format.MessageToDict(tt.custom), CUSTOM_KEY, args=list(tt.container.args),
                       image=tt.container.image, namespace="ml")
    spec = gangrun.ClusteredTask.from_dict(doc).spec
    assert (spec.nodes, spec.namespace, spec.image) == (2, "ml", tt.container.image)
    assert spec.command[:5] == ("python", "-m", "gangrun.flyte._worker", "flyte", "a0")
    assert "s3://bucket/run" in spec.command  # the outputs path Flyte rendered


def test_a_flyte_gang_checkpoints_under_the_executions_output_prefix_unless_it_names_a_place() -> None:
    # Its pods' own disks would not outlive a preemption (issue 26 item 3): Flyte's raw-data store does.
    tt = connector_calls.template(gang_tasks.train)
    custom = json_format.MessageToDict(tt.custom)
    doc = manifest_doc(custom, CUSTOM_KEY, args=[], image="img", namespace="ml", checkpoints="s3://b/run/a0/")
    assert gangrun.ClusteredTask.from_dict(doc).spec.checkpoint_uri == "s3://b/run/a0/_gangrun_checkpoints"
    named = json.loads(custom[CUSTOM_KEY])
    named["spec"]["checkpoint"] = {"uri": "gs://mine/ck"}
    doc = manifest_doc({CUSTOM_KEY: json.dumps(named)}, CUSTOM_KEY, args=[], image="img", namespace="ml",
                       checkpoints="s3://b/run/a0")
    assert gangrun.ClusteredTask.from_dict(doc).spec.checkpoint_uri == "gs://mine/ck"


def test_the_connector_service_finds_the_gangrun_connector_by_task_type_and_through_the_entry_point() -> None:
    assert isinstance(ConnectorRegistry.get_connector("gangrun", 0), GangConnector)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["flyte.connectors"]
    assert declared == {"gangrun": "gangrun.flyte.connector"}  # what the connector service loads
    assert importlib.import_module(declared["gangrun"]).GangConnector is GangConnector
