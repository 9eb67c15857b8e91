"""Each backend satisfies the Protocol the CLI speaks (one small required Protocol, checked once per backend)."""

from __future__ import annotations

from pathlib import Path

from gangrun._backends.base import Backend, SupportsFollow
from gangrun._backends.local import LocalBackend


def test_local_backend_is_a_backend(tmp_path: Path) -> None:
    assert isinstance(LocalBackend(tmp_path / "home"), Backend)
    assert isinstance(LocalBackend(tmp_path / "home"), SupportsFollow)


def test_kube_backend_is_a_backend() -> None:
    from gangrun._backends.kube import KubeBackend

    # Constructing never dials the API server: the CLI builds it before knowing the command.
    assert isinstance(KubeBackend(kubeconfig="unused", namespace="ml"), Backend)
    assert isinstance(KubeBackend(kubeconfig="unused", namespace="ml"), SupportsFollow)
