"""Pytest fixtures for end-to-end tests against a real control plane (see tests/harness/controlplane.py).

A test asks for the tier it needs by fixture:

* ``control_plane_tier_a``: etcd + kube-apiserver + JobSet/Kueue CRDs;
* ``control_plane_tier_b``: + kube-controller-manager, kube-scheduler, kwok nodes, JobSet;
* ``control_plane_tier_c``: + Kueue, ClusterQueue, LocalQueue ``default``, priorities low/high.

All three return the same session-wide :class:`controlplane.ControlPlane`; it starts once, is
upgraded in place when a later test needs a higher tier, and is torn down at session end. So a
tier is a minimum: a tier-A test that runs after a tier-C test sees Kueue running.

``make_namespace`` makes a fresh namespace per call (with a LocalQueue ``default`` at tier C)
and deletes it after the test.

If the binaries are not built the fixtures skip, naming ``hack/build-control-plane.sh``; with
``CI=true`` a missing build fails instead. ``GANGRUN_E2E_KEEP=1`` keeps the work directory
(logs, kubeconfig, certificates) after the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import client, controlplane
from tests.harness.binaries import Binaries, NotBuiltError, locate_binaries

TIER_FIXTURES = {"control_plane_tier_a", "control_plane_tier_b", "control_plane_tier_c"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def real_node_images(binaries: Binaries, *, flyte: bool = False) -> list[Path]:
    """The image archives a real node imports (with `flyte`, the image with the flyte extra too); skips the
    test (fails it with CI=true) when a piece the node needs is missing here."""
    from tests.harness import realnode

    missing = realnode.missing_pieces(binaries)
    if missing:
        msg = "the real node cannot start here; missing: " + "; ".join(missing)
        if _in_ci():
            pytest.fail(f"CI=true and {msg}", pytrace=False)
        pytest.skip(msg)
    return realnode.image_archives(flyte=flyte)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if TIER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def control_plane_binaries() -> Binaries:
    try:
        return locate_binaries()
    except NotBuiltError as e:
        if _in_ci():
            pytest.fail(f"CI=true and {e}", pytrace=False)
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def control_plane(control_plane_binaries: Binaries) -> Iterator[controlplane.ControlPlane]:
    """The session's control plane, not started yet; prefer the tier fixtures."""
    cp = controlplane.ControlPlane(
        control_plane_binaries, keep_workdir=bool(os.environ.get("GANGRUN_E2E_KEEP"))
    )
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def control_plane_tier_a(control_plane: controlplane.ControlPlane) -> controlplane.ControlPlane:
    return control_plane.ensure("A")


@pytest.fixture(scope="session")
def control_plane_tier_b(control_plane: controlplane.ControlPlane) -> controlplane.ControlPlane:
    return control_plane.ensure("B")


@pytest.fixture(scope="session")
def control_plane_tier_c(control_plane: controlplane.ControlPlane) -> controlplane.ControlPlane:
    return control_plane.ensure("C")


@pytest.fixture
def kube(control_plane: controlplane.ControlPlane) -> client.Kube:
    """kubectl-like helper (admin). Request a tier fixture first so the API is up."""
    return control_plane.kube


@pytest.fixture
def make_namespace(
    control_plane: controlplane.ControlPlane, request: pytest.FixtureRequest
) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make(prefix: str | None = None) -> str:
        control_plane.check_alive()
        ns = control_plane.make_namespace(prefix or request.node.name)
        made.append(ns)
        return ns

    yield make
    for ns in made:
        control_plane.delete_namespace(ns)
    control_plane.check_alive()
