"""The tests' Kubernetes client: kubectl-like calls on plain dicts (``kube.get("Workload", name, ns)``,
``kube.apply(obj)``), a watch on a thread (:class:`Watch`) and condition helpers.

Built on gangrun's own client (`gangrun._backends.kube.client`: its `Resource` paths, its `Api` over the
official ``kubernetes`` package's REST layer, its watch). What is added here is what a test needs and the
controller does not: kinds named by ``kind`` (a table, :data:`KINDS`; discovery would make every lookup a
request), server-side apply, a foreground delete, raw paths (``/version``, the eviction and token
subresources) and an error that carries the server's message as ``body``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gangrun import _errors
from gangrun._backends.kube import client as kube_client
from gangrun._backends.kube.client import Resource

if TYPE_CHECKING:
    from tests.harness.controlplane import ControlPlane


def _res(api_version: str, plural: str, kind: str, namespaced: bool = True) -> Resource:
    group, _, version = api_version.rpartition("/")
    return Resource(group, version, plural, kind, namespaced)


# Every kind a test names, at the version used when a caller names only the kind.
KINDS: dict[str, Resource] = {r.kind: r for r in (
    _res("v1", "namespaces", "Namespace", False), _res("v1", "nodes", "Node", False),
    kube_client.PODS, _res("v1", "serviceaccounts", "ServiceAccount"), _res("v1", "secrets", "Secret"),
    kube_client.CONFIGMAPS, kube_client.EVENTS, _res("v1", "services", "Service"),
    _res("v1", "persistentvolumes", "PersistentVolume", False),
    _res("v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    _res("batch/v1", "jobs", "Job"), _res("apps/v1", "deployments", "Deployment"),
    kube_client.JOBSETS, kube_client.WORKLOADS, kube_client.LOCAL_QUEUES, kube_client.CLUSTER_QUEUES,
    _res("kueue.x-k8s.io/v1beta2", "resourceflavors", "ResourceFlavor", False),
    _res("kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass", False),
    _res("kueue.x-k8s.io/v1beta2", "cohorts", "Cohort", False),
    _res("rbac.authorization.k8s.io/v1", "roles", "Role"),
    _res("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding"),
    _res("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False),
    _res("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False),
    _res("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False),
    _res("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False),
    _res("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
         False),
    kube_client.LEASES, _res("scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", False),
)}


class ApiError(_errors.ApiError):
    """gangrun's ApiError, raised for every error status here; ``body`` is the server's message."""

    @property
    def body(self) -> str:
        return self.message


class _Api(kube_client.Api):
    """gangrun's `Api` whose errors are :class:`ApiError` (its one request method is where they are made)."""

    def _request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            return super()._request(method, path, **kw)
        except _errors.ApiError as e:
            raise ApiError(e.status, e.message) from None


class Kube:
    """kubectl-like calls on plain dicts, with the credentials of a kubeconfig (client certificate or token).
    ``api`` is gangrun's client for it, ``api_client`` the official one."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = Path(kubeconfig)
        self.api = _Api(self.api_client, timeout=60)

    @staticmethod
    def register_kind(kind: str, api_version: str, plural: str, namespaced: bool) -> None:
        """Teach :data:`KINDS` a kind of your own (e.g. a CRD installed by the test)."""
        KINDS.setdefault(kind, _res(api_version, plural, kind, namespaced))

    @property
    def api_client(self):
        """The official client (``kubernetes.client.ApiClient``) for this kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(str(self.kubeconfig))

    @staticmethod
    def resource(kind: str, api_version: str | None = None) -> Resource:
        res = KINDS[kind]
        if api_version:
            group, _, version = api_version.rpartition("/")
            res = dataclasses.replace(res, group=group, version=version)
        return res

    @classmethod
    def path(cls, kind: str, name: str | None = None, namespace: str | None = None,
             api_version: str | None = None, subresource: str | None = None) -> str:
        return cls.resource(kind, api_version).path(namespace, name, subresource)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", query: dict | None = None) -> Any:
        """Any call by path; the answer's JSON (None when empty)."""
        return self.api._request(method, path, body=body, content_type=content_type, query=query)

    # -- verbs
    def get(self, kind: str, name: str, namespace: str | None = None, *,
            api_version: str | None = None) -> dict:
        return self.api.get(self.resource(kind, api_version), namespace, name)

    def get_or_none(self, kind: str, name: str, namespace: str | None = None, **kw) -> dict | None:
        try:
            return self.get(kind, name, namespace, **kw)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, *, api_version: str | None = None,
             label_selector: str | None = None) -> list[dict]:
        return self.api.list(self.resource(kind, api_version), namespace, label_selector=label_selector or "")["items"]

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        res = self.resource(obj["kind"], obj.get("apiVersion"))
        return self.api.create(res, obj.get("metadata", {}).get("namespace"), obj, dry_run=dry_run)

    def apply(self, obj: dict) -> dict:
        """Server-side apply (field manager ``e2e``, forced)."""
        md = obj["metadata"]
        return self.request(
            "PATCH", self.path(obj["kind"], md["name"], md.get("namespace"), obj.get("apiVersion")),
            body=obj, content_type="application/apply-patch+yaml",
            query={"fieldManager": "e2e", "force": "true"},
        )

    def patch(self, kind: str, name: str, namespace: str | None, patch: dict, *,
              api_version: str | None = None, subresource: str | None = None) -> dict:
        """JSON merge patch."""
        return self.api.patch(self.resource(kind, api_version), namespace, name, patch, subresource=subresource)

    def delete(self, kind: str, name: str, namespace: str | None = None, *,
               api_version: str | None = None, propagation: str = "Background") -> None:
        with contextlib.suppress(ApiError):
            self.request("DELETE", self.path(kind, name, namespace, api_version),
                         body={"propagationPolicy": propagation})

    def running_pods(self, namespace: str, selector: str) -> list[dict]:
        """The pods of `selector` that are Running and not being deleted."""
        return [p for p in self.list("Pod", namespace, label_selector=selector)
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]

    def wait_running_pods(self, namespace: str, selector: str, count: int, timeout: float = 90.0) -> list[dict]:
        """Wait until exactly `count` pods of `selector` are Running; return them."""
        def ready() -> list[dict] | None:
            pods = self.running_pods(namespace, selector)
            return pods if len(pods) == count else None
        return self.wait_for(f"{count} running pods ({selector}) in {namespace}", ready, timeout=timeout,
                             interval=0.2)

    def wait_for(self, what: str, fn: Callable[[], Any], timeout: float = 60.0,
                 interval: float = 0.5) -> Any:
        """Poll ``fn`` until it returns something truthy; return it or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        last_exc: Exception | None = None
        while True:
            try:
                v = fn()
                if v:
                    return v
            except ApiError as e:
                last_exc = e
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}"
                                   + (f" (last error: {last_exc})" if last_exc else ""))
            time.sleep(interval)


def condition(obj: dict | None, ctype: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def has_condition(obj: dict | None, ctype: str, status: str = "True",
                  reason: str | None = None) -> bool:
    c = condition(obj, ctype)
    return bool(c and c.get("status") == status and (reason is None or c.get("reason") == reason))


class Watch:
    """A list, then a watch from its resourceVersion, of one resource in one namespace, on a daemon
    thread: ``on_event(t_arrival, type, obj)`` for the listed items (as ``ADDED``) and every
    ``ADDED``/``MODIFIED``/``DELETED`` after, ``obj`` a plain dict. A broken watch lists again.
    ``Watch(cp, ns, "pod", record)``: a core resource is named as the official client's
    ``list_namespaced_*`` names it (``pod``, ``config_map``); a custom resource by its plural, with
    its ``group`` and ``version``. gangrun's client lists and watches."""

    def __init__(self, cp: ControlPlane, ns: str, plural: str, on_event: Callable[[float, str, dict], Any], *,
                 group: str = "", version: str = "v1", label_selector: str = "", timeout_seconds: int = 10) -> None:
        self.on_event, self.selector, self.timeout = on_event, label_selector, timeout_seconds
        res = Resource(group, version, plural if group else plural.replace("_", "") + "s", kind="")
        self._list = functools.partial(cp.kube.api.list, res, ns, label_selector=label_selector)
        self._watch = functools.partial(cp.kube.api.watch, res, ns, label_selector=label_selector,
                                        timeout_seconds=timeout_seconds)
        self._ready, self._stop = threading.Event(), threading.Event()
        threading.Thread(target=self._run, daemon=True, name=f"watch-{plural}-{ns}").start()
        assert self._ready.wait(30), f"the watch on {plural} did not start"

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    doc = self._list()
                    for obj in doc["items"]:
                        self.on_event(time.monotonic(), "ADDED", obj)
                    rv = doc["metadata"]["resourceVersion"]
                    self._ready.set()
                for ev in self._watch(resource_version=rv):
                    t, obj = time.monotonic(), ev.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.on_event(t, ev["type"], obj)
                    if self._stop.is_set():
                        return
            except Exception:
                if self._stop.is_set():
                    return
                rv = ""
                time.sleep(0.1)
