"""Which backend a call means: a name, `$GANGRUN_BACKEND`, or a backend object given as is."""

from __future__ import annotations

import os
from pathlib import Path

from gangrun._backends.base import Backend
from gangrun._errors import UsageError

BACKENDS = ("local", "kubernetes")
ENV = "GANGRUN_BACKEND"


def backend_name(name: str | None) -> str:
    """`name`, or `$GANGRUN_BACKEND`, or "local"; a wrong value is an error naming where it came from."""
    if name is None:
        value = os.environ.get(ENV, "") or "local"
        if value not in BACKENDS:
            raise UsageError(f"{ENV}: must be {' or '.join(BACKENDS)}, got {value!r}")
        return value
    if name not in BACKENDS:
        raise UsageError(f"backend: must be {' or '.join(BACKENDS)}, got {name!r}")
    return name


def open_backend(backend: str | Backend | None = None, *, namespace: str | None = None,
                 kubeconfig: str | None = None, context: str | None = None,
                 home: str | Path | None = None) -> Backend:
    """The backend a call names. Opening one never dials: the first request connects.

    `namespace`, `kubeconfig` and `context` are for "kubernetes"; `home` is for "local" (default
    `$GANGRUN_HOME` or `~/.gangrun`). A backend object (anything with the Backend methods) is used as is.
    """
    if backend is not None and not isinstance(backend, str):
        if not all(callable(getattr(backend, m, None)) for m in ("submit", "get", "list", "events", "logs")):
            raise UsageError(f"backend: must be {' or '.join(BACKENDS)} or a backend object, "
                             f"got {type(backend).__name__}")
        return backend
    name = backend_name(backend)
    if name == "kubernetes":
        if home is not None:
            raise UsageError("home: is for the local backend; the kubernetes backend keeps tasks on the cluster")
        try:
            from gangrun._backends.kube import KubeBackend
        except ImportError as e:
            raise UsageError(f"the kubernetes backend needs extra packages: pip install 'gangrun[kubernetes]' ({e})") \
                from None
        return KubeBackend(kubeconfig=kubeconfig, context=context, namespace=namespace)
    given = [k for k, v in (("namespace", namespace), ("kubeconfig", kubeconfig), ("context", context)) if v]
    if given:
        raise UsageError(f"{', '.join(given)}: for the kubernetes backend only; pass backend='kubernetes'")
    from gangrun._backends.local import LocalBackend

    return LocalBackend(home)

