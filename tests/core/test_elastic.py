"""Elastic gangs' pure rules (`gangrun._core.elastic`) and the manifest fields that turn them on."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from gangrun._core.elastic import cooldown_over, largest_size, resize_message
from gangrun._core.spec import parse_manifest
from gangrun._errors import SpecError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def manifest(**spec: object) -> dict[str, object]:
    return {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": "train"},
            "spec": {"command": ["python", "train.py"], **spec}}


@pytest.mark.parametrize(("least", "most", "room", "want"), [
    (2, 4, 4, 4), (2, 4, 3, 3), (2, 4, 2, 2), (2, 4, 1, None), (1, 1, 1, 1), (3, 2, 9, None), (1, 1000, 617, 617),
])
def test_largest_size_that_fits(least: int, most: int, room: int, want: int | None) -> None:
    assert largest_size(least=least, most=most, fits=lambda n: n <= room) == want


def test_resize_cooldown_counts_from_the_last_change_of_size() -> None:
    cooldown = timedelta(minutes=5)
    assert cooldown_over(None, cooldown, T0)
    assert not cooldown_over(T0, cooldown, T0 + timedelta(minutes=4, seconds=59))
    assert cooldown_over(T0, cooldown, T0 + cooldown)


def test_resize_message_says_from_to_and_why() -> None:
    assert resize_message(4, 2, "readmitted at what fits now") == \
        "shrinking the gang from 4 to 2 nodes: readmitted at what fits now"
    assert resize_message(2, 4, "quota is free").startswith("growing the gang from 2 to 4 nodes")


def test_min_nodes_defaults_to_nodes_and_is_not_elastic() -> None:
    spec = parse_manifest(manifest(nodes=4))
    assert (spec.least_nodes, spec.elastic, spec.resize_cooldown) == (4, False, timedelta(minutes=5))


def test_min_nodes_makes_an_elastic_gang_and_at_size_changes_only_the_size() -> None:
    spec = parse_manifest(manifest(nodes=4, minNodes=2, resizeCooldown="30s"))
    assert (spec.least_nodes, spec.elastic, spec.resize_cooldown) == (2, True, timedelta(seconds=30))
    small = spec.at_size(2)
    assert (small.nodes, small.world_size, small.least_nodes, small.command) == (2, 2, 2, spec.command)


@pytest.mark.parametrize(("value", "message"), [
    (0, "spec.minNodes: must be >= 1, got 0"),
    (5, "spec.minNodes: must be at most spec.nodes (4), got 5"),
    ("2", "spec.minNodes: must be a whole number, got '2'"),
])
def test_bad_min_nodes_names_the_field(value: object, message: str) -> None:
    with pytest.raises(SpecError, match=f"^{re.escape(message)}$"):
        parse_manifest(manifest(nodes=4, minNodes=value))


@pytest.mark.parametrize(("old", "new", "readmitted", "why"), [
    pytest.param(2, 4, False, "quota is free that no waiting gang of equal or higher priority needs", id="grown"),
    pytest.param(4, 2, False, "readmitted at what fits now", id="shrunk-while-growing-preempted-and-readmitted"),
    pytest.param(4, 2, True, "readmitted at what fits now", id="shrunk-on-readmission"),
    pytest.param(2, 4, True, "readmitted at its full size", id="readmitted-at-full-size"),
    pytest.param(1, 3, True, "readmitted at what fits now", id="readmitted-larger-but-not-full"),
])
def test_a_shrink_is_never_said_to_be_for_free_quota(old: int, new: int, readmitted: bool, why: str) -> None:
    from gangrun._core.elastic import resize_why

    assert resize_why(old, new, full=4, readmitted=readmitted) == why
