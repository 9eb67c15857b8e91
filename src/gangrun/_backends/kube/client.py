"""A thin Kubernetes API client on plain dicts, mapping error statuses to `gangrun._errors`.

Built on the official `kubernetes` package's REST layer (TLS, tokens, client certificates and exec
plugins all come from its kubeconfig/in-cluster loaders), but it speaks paths and JSON dicts: the
controller handles JobSets, Workloads and ClusteredTasks that have no generated models, and a fake
implementing `KubeApi` is all the tests need. See docs/decisions/0001-kubernetes-client.md.

    404 → NotFound   409 → Conflict (AlreadyExists on create)   429 → TooManyRequests
    other statuses → ApiError(status)   no response (connection, timeout, TLS) → ApiError(0)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from gangrun._backends.kube import crd
from gangrun._core import jobset, kueue
from gangrun._errors import ApiError, Conflict, NotFound, TooManyRequests, UsageError

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        p = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            p += f"/namespaces/{quote(namespace)}"
        p += f"/{self.plural}"
        if name:
            p += f"/{quote(name)}"
        if subresource:
            p += f"/{subresource}"
        return p


TASKS = Resource(crd.GROUP, crd.VERSION, crd.PLURAL, crd.KIND)
JOBSETS = Resource(jobset.GROUP, jobset.VERSION, jobset.PLURAL, jobset.KIND)
WORKLOADS = Resource(kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, kueue.KIND)
LOCAL_QUEUES = Resource(kueue.GROUP, kueue.VERSION, kueue.LOCAL_QUEUES, "LocalQueue")
CLUSTER_QUEUES = Resource(kueue.GROUP, kueue.VERSION, kueue.CLUSTER_QUEUES, "ClusterQueue", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
EVICTION = "eviction"  # the pods' subresource `kubectl drain` posts to


def error_for(status: int, message: str) -> ApiError:
    cls = {404: NotFound, 409: Conflict, 429: TooManyRequests}.get(status, ApiError)
    return cls(status, message)


class KubeApi(Protocol):
    """What the controller and the backend need of the API server. `namespace=None` lists everywhere."""

    def get(self, res: Resource, namespace: str | None, name: str, *,
            subresource: str | None = None) -> dict[str, Any]: ...
    def list(self, res: Resource, namespace: str | None, *, label_selector: str = "",
             field_selector: str = "") -> dict[str, Any]: ...
    def create(self, res: Resource, namespace: str | None, body: dict[str, Any], *,
               dry_run: bool = False) -> dict[str, Any]: ...
    def replace(self, res: Resource, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def patch(self, res: Resource, namespace: str | None, name: str, patch: dict[str, Any], *,
              subresource: str | None = None) -> dict[str, Any]: ...
    def delete(self, res: Resource, namespace: str | None, name: str) -> None: ...
    def evict(self, namespace: str, pod: str) -> None: ...
    def watch(self, res: Resource, namespace: str | None, *, resource_version: str, label_selector: str = "",
              timeout_seconds: int = 300) -> Iterator[dict[str, Any]]: ...
    def log_lines(self, namespace: str, pod: str, *, container: str | None = None,
                  follow: bool = False) -> Iterator[str]: ...


class Api:
    """`KubeApi` over `kubernetes.client.ApiClient`."""

    def __init__(self, api_client: Any, *, timeout: float = 30.0) -> None:
        self._client = api_client
        self._host = api_client.configuration.host.rstrip("/")
        self._timeout = timeout

    def _request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                 content_type: str = "application/json", stream: bool = False, timeout: Any = None) -> Any:
        from kubernetes.client.exceptions import ApiException
        url = self._host + path + ("?" + urlencode({k: v for k, v in query.items() if v not in (None, "")})
                                   if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        # Tokens (static, file-based or from an exec plugin, refreshed by the hook) go in the header.
        self._client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        try:
            resp = self._client.rest_client.request(method, url, headers=headers, body=body,
                                                    _request_timeout=timeout or self._timeout)
        except ApiException as e:
            raise error_for(e.status or 0, str(e.reason or e.body or "")) from None
        except Exception as e:  # urllib3 connection, timeout, protocol errors: no status from the server
            raise ApiError(0, f"{method} {path}: {type(e).__name__}: {e}") from None
        if resp.status >= 400:
            data = resp.read()
            raise error_for(resp.status, _status_message(data) or f"{method} {path}: {resp.reason}")
        if stream:
            return resp.response
        data = resp.read()
        return json.loads(data) if data else None

    def _object(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """A request whose answer is one JSON object (a list is one too): anything else is an ApiError."""
        doc = self._request(method, path, **kw)
        if not isinstance(doc, dict):
            raise ApiError(0, f"{method} {path}: expected a JSON object, got {type(doc).__name__}")
        return doc

    def get(self, res: Resource, namespace: str | None, name: str, *,
            subresource: str | None = None) -> dict[str, Any]:
        return self._object("GET", res.path(namespace, name, subresource))

    def list(self, res: Resource, namespace: str | None, *, label_selector: str = "",
             field_selector: str = "") -> dict[str, Any]:
        return self._object("GET", res.path(namespace),
                            query={"labelSelector": label_selector, "fieldSelector": field_selector})

    def create(self, res: Resource, namespace: str | None, body: dict[str, Any], *,
               dry_run: bool = False) -> dict[str, Any]:
        """Create `body`; `dry_run`: validated and admitted by the server, never stored."""
        return self._object("POST", res.path(namespace), body=body, query={"dryRun": "All"} if dry_run else None)

    def replace(self, res: Resource, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._object("PUT", res.path(namespace, name), body=body)

    def patch(self, res: Resource, namespace: str | None, name: str, patch: dict[str, Any], *,
              subresource: str | None = None) -> dict[str, Any]:
        return self._object("PATCH", res.path(namespace, name, subresource), body=patch,
                            content_type=MERGE_PATCH, query={"fieldManager": crd.FIELD_MANAGER})

    def delete(self, res: Resource, namespace: str | None, name: str) -> None:
        self._request("DELETE", res.path(namespace, name), body={"propagationPolicy": "Background"})

    def evict(self, namespace: str, pod: str) -> None:
        """Evict `pod` as `kubectl drain` does (the API server adds its DisruptionTarget condition and
        deletes it with its grace period); 429 (TooManyRequests) while a PodDisruptionBudget refuses."""
        self._request("POST", PODS.path(namespace, pod, EVICTION), body={
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}})

    def watch(self, res: Resource, namespace: str | None, *, resource_version: str, label_selector: str = "",
              timeout_seconds: int = 300) -> Iterator[dict[str, Any]]:
        """Watch events as dicts (`type`, `object`); an ERROR event raises its status (410 when too old)."""
        query = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(timeout_seconds), "labelSelector": label_selector}
        resp = self._request("GET", res.path(namespace), query=query, stream=True,
                             timeout=(10, timeout_seconds + 30))
        try:
            for line in _lines(resp):
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    obj = event.get("object") or {}
                    raise error_for(int(obj.get("code") or 500), obj.get("message", "watch error"))
                yield event
        finally:
            resp.release_conn()

    def log_lines(self, namespace: str, pod: str, *, container: str | None = None,
                  follow: bool = False) -> Iterator[str]:
        query = {"container": container, "follow": "true" if follow else None}
        resp = self._request("GET", PODS.path(namespace, pod, "log"), query=query, stream=True,
                             timeout=(10, None) if follow else self._timeout)
        try:
            yield from _lines(resp)
        finally:
            resp.release_conn()


def _lines(resp: Any) -> Iterator[str]:
    """The stream's lines. A connection cut mid-stream is ApiError(0), as when a request gets no response:
    the informer then resumes its watch from the last resourceVersion, and a log reader prints one line."""
    buf = b""
    try:
        for chunk in resp.stream(amt=None, decode_content=False):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace").rstrip("\r")
    except Exception as e:  # urllib3 protocol errors and read timeouts
        raise ApiError(0, f"stream cut: {type(e).__name__}: {e}") from None
    if buf:
        yield buf.decode("utf-8", "replace")


def _status_message(data: bytes | None) -> str:
    try:
        doc = json.loads(data or b"")
    except ValueError:
        return (data or b"").decode("utf-8", "replace")[:500]
    return doc.get("message", "") if isinstance(doc, dict) else ""


def connect(*, kubeconfig: str | None = None, context: str | None = None,
            connections: int | None = None) -> tuple[Api, str]:
    """An `Api` and the default namespace: from `kubeconfig`, else in-cluster, else the default kubeconfig.

    `connections`: how many requests may be in flight at once, each on a kept-alive connection (the
    REST client's default is five per CPU; a request beyond the pool opens a connection, TLS
    handshake included, and drops it afterwards).
    Raises UsageError, in one line, when the `kubernetes` package is missing or no configuration loads.
    """
    try:
        from kubernetes import client, config
    except ImportError as e:
        raise UsageError(f"the kubernetes backend needs extra packages: pip install 'gangrun[kubernetes]' ({e})") \
            from None
    try:
        return _connect(client, config, kubeconfig=kubeconfig, context=context, connections=connections)
    except Exception as e:  # ConfigException, an unreadable or malformed file, a failing exec plugin
        raise UsageError(f"cannot load the Kubernetes configuration: {e}") from None


def _connect(client: Any, config: Any, *, kubeconfig: str | None, context: str | None,
             connections: int | None = None) -> tuple[Api, str]:
    cfg = client.Configuration()
    if connections is not None:
        cfg.connection_pool_maxsize = connections
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config(client_configuration=cfg)
        try:
            with open(SA_NAMESPACE_FILE) as f:
                namespace = f.read().strip() or "default"
        except OSError:
            namespace = "default"
        return Api(client.ApiClient(cfg)), namespace
    api_client = config.new_client_from_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    namespace = "default"
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
        namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    except Exception:  # a kubeconfig without contexts still works with the default namespace
        pass
    return Api(api_client), namespace
