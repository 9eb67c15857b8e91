"""metadata.generateName: a prefix the backend completes into a unique name (S1's field errors apply)."""

from __future__ import annotations

import re

import pytest

from gangrun._core.spec import GENERATE_NAME_MAX, parse_manifest
from gangrun._errors import SpecError


def manifest(**metadata):
    return {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": metadata,
            "spec": {"nodes": 1, "command": ["true"]}}


@pytest.mark.parametrize(("metadata", "name", "prefix"), [
    pytest.param({"generateName": "train-"}, "", "train-", id="prefix-only-leaves-the-name-to-the-backend"),
    pytest.param({"generateName": "t"}, "", "t", id="one-letter-prefix"),
    pytest.param({"name": "train", "generateName": "train-"}, "train", "train-", id="a-name-wins-as-on-the-api-server"),
    pytest.param({"name": "train"}, "train", "", id="a-name-alone"),
])
def test_s1_generate_name_is_a_prefix_and_a_given_name_wins(metadata, name, prefix):
    spec = parse_manifest(manifest(**metadata))
    assert (spec.name, spec.generate_name) == (name, prefix)


@pytest.mark.parametrize(("metadata", "message"), [
    pytest.param({}, "metadata.name: is required: a lowercase DNS-1035 name like train (or metadata.generateName: "
                     "a prefix like train-)", id="neither"),
    pytest.param({"generateName": "Train-"}, "metadata.generateName: must be a name prefix like train-", id="uppercase"),
    pytest.param({"generateName": "1-"}, "metadata.generateName: must be a name prefix", id="starts-with-a-digit"),
    pytest.param({"generateName": ""}, "metadata.generateName: must be a name prefix", id="empty"),
    pytest.param({"generateName": 7}, "metadata.generateName: must be a name prefix", id="not-a-string"),
    pytest.param({"generateName": "a" * (GENERATE_NAME_MAX + 1)}, f"metadata.generateName: must be a name prefix like train- (lowercase letters, digits and '-', starting with a letter, at most {GENERATE_NAME_MAX} characters)",
                 id="no-room-for-the-suffix"),
    pytest.param({"generateName": "ok-", "name": "Bad"}, "metadata.name: must be a DNS-1035 label", id="bad-name-beside-it"),
])
def test_s1_bad_generate_name_names_the_field(metadata, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_manifest(manifest(**metadata))
