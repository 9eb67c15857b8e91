"""A real Kubernetes control plane on loopback, as local processes, for end-to-end tests.

Independent of gangrun: it only needs the binaries made by ``hack/build-control-plane.sh``,
the Go module cache (CRD, webhook and kwok stage YAMLs are read from there), the
``cryptography`` package (certificates) and the official ``kubernetes`` client.

Tiers are cumulative:

* ``A``: etcd + kube-apiserver, with the JobSet and Kueue CRDs installed;
* ``B``: A + kube-controller-manager + kube-scheduler + kwok (fake nodes) + the JobSet
  controller and its webhooks;
* ``C``: B + the Kueue manager and its webhooks, a ResourceFlavor, a ClusterQueue with
  ``preemption.withinClusterQueue: LowerPriority``, WorkloadPriorityClasses ``low`` (100) and
  ``high`` (10000), and a LocalQueue ``default`` in the ``default`` namespace (and in every
  namespace made by :meth:`ControlPlane.make_namespace`).

``ControlPlane.ensure(tier)`` starts whatever is missing, so one control plane serves a whole
test session. Every process runs in its own process group and is killed on :meth:`stop`, at
interpreter exit and (``PR_SET_PDEATHSIG``) when the Python process dies.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import copy
import ctypes
import datetime as dt
import functools
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-control-plane.sh"
BUILD_SCRIPT_REL = "hack/build-control-plane.sh"

TIERS = ("A", "B", "C")

# Fake capacity: NODE_COUNT kwok nodes; the ClusterQueue's quota is exactly all of them.
NODE_COUNT = 4
NODE_CPU = 4
NODE_MEMORY_GI = 16
CLUSTER_QUEUE = "cluster-queue"
RESOURCE_FLAVOR = "default-flavor"
LOCAL_QUEUE = "default"
PRIORITY_CLASSES = {"low": 100, "high": 10000}

# Pod annotations that drive kwok (the pod template's annotations reach the pods).
# Value: a Go duration ("0s", "5s") or an RFC 3339 time at which the pod ends.
ANNOTATION_COMPLETE_AFTER = "gang.test/complete-after"
ANNOTATION_FAIL_AFTER = "gang.test/fail-after"
# With ANNOTATION_FAIL_AFTER, the exit code written into the container status (default 1).
ANNOTATION_EXIT_CODE = "gang.test/exit-code"
# A pod with this annotation stays Pending (bound, never Running/Ready).
ANNOTATION_NEVER_READY = "gang.test/never-ready"
# With ANNOTATION_COMPLETE_AFTER or ANNOTATION_FAIL_AFTER, the worker container's termination message
# (what gangrun.launch writes there: the newest committed checkpoint).
ANNOTATION_TERMINATION_MESSAGE = "gang.test/termination-message"
# A Go duration: a pod being deleted stays that long before it is gone, as a kubelet that gives its
# containers their grace period (without it kwok removes a deleted pod at once).
ANNOTATION_TERMINATE_AFTER = "gang.test/terminate-after"

# Kueue's waitForPodsReady timeout (also its recoveryTimeout). Kueue 0.19 enables it by
# default with 30 min; a short one lets a test see a PodsReadyTimeout eviction (pods that carry
# ANNOTATION_NEVER_READY). kwok makes other pods Ready within a second or two.
PODS_READY_TIMEOUT = os.environ.get("GANGRUN_E2E_PODS_READY_TIMEOUT", "45s")

KUEUE_WEBHOOK_PATH_PARTS = ("kueue-x-k8s-io", "batch-v1-job", "jobset-x-k8s-io")
KUEUE_CONVERTED_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")


class NotBuiltError(RuntimeError):
    """The control-plane binaries are not in the cache."""


class ControlPlaneError(RuntimeError):
    """A component failed to start or died."""


# --------------------------------------------------------------------------------------------
# Binaries and module directories


@dataclass(frozen=True)
class Binaries:
    root: Path
    versions: dict[str, str]
    moddirs: dict[str, Path]

    def path(self, name: str) -> Path:
        return self.root / "bin" / name


def _read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def cache_dir() -> Path:
    """The versioned cache directory, as the build script computes it."""
    explicit = os.environ.get("GANGRUN_CONTROL_PLANE_DIR")
    if explicit:
        return Path(explicit)
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def locate_binaries() -> Binaries:
    """Find a complete build, or raise NotBuiltError naming the build script."""
    root = cache_dir()
    if not (root / "complete").exists():
        raise NotBuiltError(
            f"control-plane binaries are not built (no complete cache at {root}); "
            f"run `bash {BUILD_SCRIPT_REL}` first (cold build: about 10-17 minutes on 2 cores)"
        )
    versions = _read_env_file(root / "versions.env")
    moddirs = {k: Path(v) for k, v in _read_env_file(root / "moddirs.env").items()}
    # The module cache may have been cleaned since the build: ask Go to bring it back.
    wanted = {
        "KWOK_DIR": f"sigs.k8s.io/kwok@{versions['KWOK_VERSION']}",
        "JOBSET_DIR": f"sigs.k8s.io/jobset@{versions['JOBSET_VERSION']}",
        "KUEUE_DIR": f"sigs.k8s.io/kueue@{versions['KUEUE_VERSION']}",
    }
    for key, mod in wanted.items():
        if key not in moddirs or not moddirs[key].is_dir():
            out = subprocess.run(
                ["go", "mod", "download", "-json", mod], check=True, capture_output=True, text=True
            )
            moddirs[key] = Path(json.loads(out.stdout)["Dir"])
    return Binaries(root=root, versions=versions, moddirs=moddirs)


# --------------------------------------------------------------------------------------------
# PKI (cryptography package)


def _make_pki(d: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=2)

    def key_pem(key: Any) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )

    def write(name: str, data: bytes) -> None:
        (d / name).write_bytes(data)
        os.chmod(d / name, 0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gangrun-e2e-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write("ca.crt", ca.public_bytes(serialization.Encoding.PEM))
    write("ca.key", key_pem(ca_key))

    def leaf(name: str, cn: str, orgs: list[str], server: bool, client: bool) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(later)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server:
            b = b.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.DNSName("localhost"),
                        x509.DNSName("kubernetes"),
                        x509.DNSName("kubernetes.default"),
                        x509.DNSName("kubernetes.default.svc"),
                    ]
                ),
                critical=False,
            )
        cert = b.sign(ca_key, hashes.SHA256())
        write(f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM))
        write(f"{name}.key", key_pem(key))

    leaf("apiserver", "kube-apiserver", [], server=True, client=False)
    leaf("admin", "admin", ["system:masters"], server=False, client=True)
    leaf("webhook", "webhook", [], server=True, client=False)

    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write("sa.key", key_pem(sa))
    write(
        "sa.pub",
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


# --------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_LIVE: list[subprocess.Popen] = []


def _kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # The leader may be gone while children of its group live on: kill the group regardless.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@atexit.register
def _kill_all_at_exit() -> None:
    for proc in reversed(_LIVE):
        _kill_group(proc, grace=3.0)
    _LIVE.clear()


@dataclass
class Component:
    name: str
    proc: subprocess.Popen
    log: Path
    core: bool = True  # part of the control plane (False: spawned by a test)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


# --------------------------------------------------------------------------------------------
# A small REST helper over the official client


_CORE = {
    "Namespace": ("namespaces", False), "Node": ("nodes", False), "Pod": ("pods", True),
    "ServiceAccount": ("serviceaccounts", True), "Secret": ("secrets", True),
    "ConfigMap": ("configmaps", True), "Event": ("events", True), "Service": ("services", True),
    "PersistentVolume": ("persistentvolumes", False), "PersistentVolumeClaim": ("persistentvolumeclaims", True),
}
_GROUPED = {
    ("batch", "Job"): ("jobs", True),
    ("apps", "Deployment"): ("deployments", True),
    ("jobset.x-k8s.io", "JobSet"): ("jobsets", True),
    ("kueue.x-k8s.io", "Workload"): ("workloads", True),
    ("kueue.x-k8s.io", "LocalQueue"): ("localqueues", True),
    ("kueue.x-k8s.io", "ClusterQueue"): ("clusterqueues", False),
    ("kueue.x-k8s.io", "ResourceFlavor"): ("resourceflavors", False),
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): ("workloadpriorityclasses", False),
    ("kueue.x-k8s.io", "Cohort"): ("cohorts", False),
    ("rbac.authorization.k8s.io", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io", "RoleBinding"): ("rolebindings", True),
    ("rbac.authorization.k8s.io", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"):
        ("mutatingwebhookconfigurations", False),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"):
        ("validatingwebhookconfigurations", False),
    ("coordination.k8s.io", "Lease"): ("leases", True),
    ("scheduling.k8s.io", "PriorityClass"): ("priorityclasses", False),
}
# Versions used when a caller names only the kind.
DEFAULT_API_VERSION = {
    "Job": "batch/v1", "Deployment": "apps/v1", "JobSet": "jobset.x-k8s.io/v1alpha2", "Workload": "kueue.x-k8s.io/v1beta2",
    "LocalQueue": "kueue.x-k8s.io/v1beta2", "ClusterQueue": "kueue.x-k8s.io/v1beta2",
    "ResourceFlavor": "kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass": "kueue.x-k8s.io/v1beta2",
    "Cohort": "kueue.x-k8s.io/v1beta2",
    "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    "MutatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
    "ValidatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
    "Lease": "coordination.k8s.io/v1", "PriorityClass": "scheduling.k8s.io/v1",
}


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str, method: str, path: str):
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


class Kube:
    """kubectl-like calls on plain dicts: ``kube.get("Workload", name, ns)``, ``kube.apply(obj)``.

    Plain HTTPS (``urllib``) with the TLS material and credentials of a kubeconfig written by
    this module (client certificate or bearer token). ``api_client`` gives the official
    ``kubernetes`` client for the same kubeconfig.
    """

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = Path(kubeconfig)
        kc = yaml.safe_load(self.kubeconfig.read_text())
        cluster = kc["clusters"][0]["cluster"]
        user = kc["users"][0]["user"]
        self._host = cluster["server"].rstrip("/")
        self._ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        if "client-certificate" in user:
            self._ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        self._token = user.get("token")

    @staticmethod
    def register_kind(kind: str, api_version: str, plural: str, namespaced: bool) -> None:
        """Teach the path table a kind of your own (e.g. a CRD installed by the test)."""
        group = api_version.split("/", 1)[0] if "/" in api_version else ""
        if group:
            _GROUPED[(group, kind)] = (plural, namespaced)
        else:
            _CORE[kind] = (plural, namespaced)
        DEFAULT_API_VERSION.setdefault(kind, api_version)

    @property
    def api_client(self):
        """The official client (``kubernetes.client.ApiClient``) for this kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(str(self.kubeconfig))

    # -- paths
    @staticmethod
    def path(kind: str, name: str | None = None, namespace: str | None = None,
             api_version: str | None = None, subresource: str | None = None) -> str:
        api_version = api_version or DEFAULT_API_VERSION.get(kind, "v1")
        if "/" in api_version:
            group = api_version.split("/", 1)[0]
            plural, namespaced = _GROUPED[(group, kind)]
            base = f"/apis/{api_version}"
        else:
            plural, namespaced = _CORE[kind]
            base = f"/api/{api_version}"
        p = base
        if namespaced and namespace:
            p += f"/namespaces/{namespace}"
        p += f"/{plural}"
        if name:
            p += f"/{name}"
        if subresource:
            p += f"/{subresource}"
        return p

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", query: dict | None = None) -> Any:
        url = self._host + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=60) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace"), method, path) from None
        return json.loads(raw) if raw else None

    # -- verbs
    def get(self, kind: str, name: str, namespace: str | None = None, *,
            api_version: str | None = None) -> dict:
        return self.request("GET", self.path(kind, name, namespace, api_version))

    def get_or_none(self, kind: str, name: str, namespace: str | None = None, **kw) -> dict | None:
        try:
            return self.get(kind, name, namespace, **kw)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None, *, api_version: str | None = None,
             label_selector: str | None = None) -> list[dict]:
        q = {"labelSelector": label_selector} if label_selector else None
        return self.request("GET", self.path(kind, None, namespace, api_version), query=q)["items"]

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        md = obj.get("metadata", {})
        q = {"dryRun": "All"} if dry_run else None
        return self.request(
            "POST", self.path(obj["kind"], None, md.get("namespace"), obj.get("apiVersion")),
            body=obj, query=q,
        )

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
        return self.request(
            "PATCH", self.path(kind, name, namespace, api_version, subresource), body=patch,
            content_type="application/merge-patch+json",
        )

    def delete(self, kind: str, name: str, namespace: str | None = None, *,
               api_version: str | None = None, propagation: str = "Background") -> None:
        with contextlib.suppress(ApiError):
            self.request(
                "DELETE", self.path(kind, name, namespace, api_version),
                body={"propagationPolicy": propagation},
            )

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


class Watch:
    """A list, then a watch from its resourceVersion, of one resource in one namespace, on a daemon
    thread: ``on_event(t_arrival, type, obj)`` for the listed items (as ``ADDED``) and every
    ``ADDED``/``MODIFIED``/``DELETED`` after, ``obj`` a plain dict. A broken watch lists again.
    ``Watch(cp, ns, "pod", record)``: a core resource is named as the official client's
    ``list_namespaced_*`` names it (``pod``, ``config_map``); a custom resource by its plural, with
    its ``group`` and ``version``."""

    def __init__(self, cp: ControlPlane, ns: str, plural: str, on_event: Callable[[float, str, dict], Any], *,
                 group: str = "", version: str = "v1", label_selector: str = "", timeout_seconds: int = 10) -> None:
        self.on_event, self.selector, self.timeout = on_event, label_selector, timeout_seconds
        self._list = self._lister(cp, ns, group, version, plural)
        self._ready, self._stop = threading.Event(), threading.Event()
        threading.Thread(target=self._run, daemon=True, name=f"watch-{plural}-{ns}").start()
        assert self._ready.wait(30), f"the watch on {plural} did not start"

    @staticmethod
    def _lister(cp: ControlPlane, ns: str, group: str, version: str, plural: str) -> Callable[..., Any]:
        from kubernetes import client

        api_client = cp.api_client()
        if group:
            custom = client.CustomObjectsApi(api_client)
            return lambda **kw: custom.list_namespaced_custom_object(group, version, ns, plural, **kw)
        return functools.partial(getattr(client.CoreV1Api(api_client), f"list_namespaced_{plural}"), ns)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from kubernetes import watch

        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    doc = json.loads(self._list(label_selector=self.selector, _preload_content=False).data)
                    for obj in doc["items"]:
                        self.on_event(time.monotonic(), "ADDED", obj)
                    rv = doc["metadata"]["resourceVersion"]
                    self._ready.set()
                for ev in watch.Watch().stream(self._list, label_selector=self.selector, resource_version=rv,
                                               timeout_seconds=self.timeout, allow_watch_bookmarks=True):
                    t, obj = time.monotonic(), ev["raw_object"]
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


def has_condition(obj: dict | None, ctype: str, status: str = "True",
                  reason: str | None = None) -> bool:
    c = condition(obj, ctype)
    return bool(c and c.get("status") == status and (reason is None or c.get("reason") == reason))


# --------------------------------------------------------------------------------------------
# The control plane


def _load_yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kubeconfig(server: str, ca: Path, user: dict) -> dict:
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "user"}}],
        "current-context": "e2e",
    }


@dataclass
class ControlPlane:
    binaries: Binaries
    workdir: Path | None = None
    keep_workdir: bool = False
    tier: str | None = None
    kwok_nodes: int = NODE_COUNT  # fake nodes made at tier B (0: only real nodes take pods)
    components: list[Component] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    _start_error: BaseException | None = field(default=None, repr=False)

    # ---------------------------------------------------------------- public surface
    @property
    def kubeconfig(self) -> Path:
        """Admin (system:masters) kubeconfig, client-certificate auth."""
        assert self.workdir
        return self.workdir / "admin.kubeconfig"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca_file(self) -> Path:
        assert self.workdir
        return self.workdir / "pki" / "ca.crt"

    @property
    def kube(self) -> Kube:
        if not hasattr(self, "_kube"):
            self._kube = Kube(self.kubeconfig)
        return self._kube

    def api_client(self):
        """A fresh ``kubernetes.client.ApiClient`` for the admin kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(str(self.kubeconfig))

    def ensure(self, tier: str) -> ControlPlane:
        """Start whatever tier ``tier`` needs and is not running yet."""
        if tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}, not {tier!r}")
        if self._start_error is not None:  # do not retry a failed start for every test
            raise ControlPlaneError(f"the control plane failed to start earlier: {self._start_error}")
        self.check_alive()
        have = TIERS.index(self.tier) if self.tier else -1
        want = TIERS.index(tier)
        try:
            for t in TIERS[have + 1 : want + 1]:
                getattr(self, f"_start_tier_{t.lower()}")()
                self.tier = t
        except BaseException as e:
            self._start_error = e
            self.stop()
            raise
        return self

    def check_alive(self) -> None:
        for c in self.components:
            if c.core and not c.alive():
                raise ControlPlaneError(
                    f"{c.name} exited with code {c.proc.returncode}; last log lines "
                    f"({c.log}):\n{c.tail()}"
                )

    def stop(self) -> None:
        for c in reversed(self.components):
            _kill_group(c.proc)
            with contextlib.suppress(ValueError):
                _LIVE.remove(c.proc)
        self.components.clear()
        self.tier = None
        if self.workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        if hasattr(self, "_kube"):
            del self._kube

    def logs(self) -> dict[str, Path]:
        return {c.name: c.log for c in self.components}

    def make_namespace(self, prefix: str = "e2e") -> str:
        """Create a fresh namespace (with a LocalQueue ``default`` from tier C) and return its name."""
        safe = "".join(ch if ch.isalnum() else "-" for ch in prefix.lower()).strip("-")[:40] or "e2e"
        name = f"{safe}-{uuid.uuid4().hex[:6]}"
        self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        if self.tier == "C":
            self._make_local_queue(name)
        return name

    def delete_namespace(self, name: str, wait_workloads: float = 60.0) -> None:
        """Delete a namespace; at tier C first wait until its Workloads are gone (quota freed)."""
        k = self.kube
        with contextlib.suppress(Exception):
            for kind in ("JobSet", "Job"):
                for o in k.list(kind, name):
                    k.delete(kind, o["metadata"]["name"], name, propagation="Foreground")
            if self.tier == "C":
                k.wait_for(f"workloads of {name} to go",
                           lambda: not k.list("Workload", name), timeout=wait_workloads)
        k.delete("Namespace", name)

    def service_account_kubeconfig(self, namespace: str, name: str, *,
                                   cluster_rules: list[dict] | None = None,
                                   namespace_rules: list[dict] | None = None,
                                   expiration_seconds: int = 3600) -> Path:
        """A ServiceAccount with exactly these RBAC rules, and a kubeconfig with its token.

        Rules are RBAC ``PolicyRule`` dicts, e.g.
        ``{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list"]}``.
        Leave ``kueue.x-k8s.io`` workloads out of them to get a caller that cannot read Workloads.
        The token comes from the TokenRequest API (no Secret, no controller needed).
        """
        k = self.kube
        k.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": name, "namespace": namespace}})
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        if cluster_rules is not None:
            k.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "metadata": {"name": f"{namespace}-{name}"}, "rules": cluster_rules})
            k.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": f"{namespace}-{name}"}, "subjects": subject,
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": f"{namespace}-{name}"}})
        if namespace_rules is not None:
            k.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                     "metadata": {"name": name, "namespace": namespace}, "rules": namespace_rules})
            k.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                     "metadata": {"name": name, "namespace": namespace}, "subjects": subject,
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": name}})
        tr = k.request(
            "POST", k.path("ServiceAccount", name, namespace, subresource="token"),
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": expiration_seconds}},
        )
        assert self.workdir
        path = self.workdir / f"sa-{namespace}-{name}.kubeconfig"
        path.write_text(yaml.safe_dump(
            _kubeconfig(self.api_url, self.ca_file, {"token": tr["status"]["token"]})))
        return path

    def install_crds(self, docs: list[dict], timeout: float = 60.0) -> None:
        """Server-side apply CustomResourceDefinitions and wait until each is Established.

        Also teaches :class:`Kube` their kinds (storage version), so ``kube.get(kind, ...)`` works.
        """
        for doc in docs:
            self.kube.apply(doc)
            spec = doc["spec"]
            storage = next((v["name"] for v in spec["versions"] if v.get("storage")),
                           spec["versions"][0]["name"])
            Kube.register_kind(spec["names"]["kind"], f"{spec['group']}/{storage}",
                               spec["names"]["plural"], spec["scope"] == "Namespaced")
        for doc in docs:
            n = doc["metadata"]["name"]
            self._wait(f"CRD {n} Established", lambda n=n: has_condition(
                self.kube.get("CustomResourceDefinition", n), "Established"), timeout)

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        """Run a process of the test's own (e.g. ``gangrun controller``) next to the control plane.

        It gets ``KUBECONFIG`` (admin) unless ``env`` says otherwise, its own process group and
        a log file under the work directory; it is killed by :meth:`terminate` or at teardown.
        """
        c = self._spawn(name, argv, {"KUBECONFIG": str(self.kubeconfig), **(env or {})})
        c.core = False
        return c

    def terminate(self, component: Component, grace: float = 10.0) -> int | None:
        """SIGTERM a spawned process group, SIGKILL after ``grace``; return the exit code."""
        _kill_group(component.proc, grace=grace)
        with contextlib.suppress(ValueError):
            _LIVE.remove(component.proc)
        with contextlib.suppress(ValueError):
            self.components.remove(component)
        return component.proc.returncode

    def env(self) -> dict[str, str]:
        """Environment for a subprocess (e.g. ``gangrun controller``) that should use this cluster."""
        e = dict(os.environ)
        e["KUBECONFIG"] = str(self.kubeconfig)
        e["NO_PROXY"] = e["no_proxy"] = "127.0.0.1,localhost"
        return e

    # ---------------------------------------------------------------- internals
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        assert self.workdir
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ)
        for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "KUBECONFIG"):
            full_env.pop(k, None)
        full_env["NO_PROXY"] = full_env["no_proxy"] = "127.0.0.1,localhost"
        full_env.update(env or {})
        with open(log, "ab") as fh:
            proc = subprocess.Popen(
                argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=full_env, cwd=self.workdir, start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        _LIVE.append(proc)
        c = Component(name, proc, log)
        self.components.append(c)
        return c

    def _wait(self, what: str, fn: Callable[[], Any], timeout: float,
              component: Component | None = None) -> Any:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                v = fn()
                if v:
                    return v
            except Exception as e:
                last = e
            time.sleep(0.3)
        tail = f"\nlast log lines of {component.name}:\n{component.tail()}" if component else ""
        raise ControlPlaneError(f"timed out after {timeout}s waiting for {what}; last error: {last}{tail}")

    def _https_ok(self, port: int, path: str, client_cert: bool = True,
                  verify: bool = True) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if not verify:  # a component serving its own self-signed certificate (--cert-dir)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if client_cert:
            pki = self.workdir / "pki"
            ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    # ---- tier A
    def _start_tier_a(self) -> None:
        if self.workdir is None:
            base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
            self.workdir = Path(tempfile.mkdtemp(prefix="gangrun-cp-", dir=base))
        d = self.workdir
        pki = d / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        _make_pki(pki)
        p = self.ports
        for n in ("etcd", "etcd_peer", "apiserver"):
            p[n] = free_port()

        etcd = self._spawn("etcd", [
            str(self.binaries.path("etcd")), "--name=n0", f"--data-dir={d / 'etcd'}",
            "--unsafe-no-fsync", "--log-level=warn",
            f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
            f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
            f"--listen-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
            f"--initial-cluster=n0=http://127.0.0.1:{p['etcd_peer']}",
        ])
        self._wait("etcd /readyz", lambda: self._http_ok(f"http://127.0.0.1:{p['etcd']}/readyz"),
                   60, etcd)

        api = self._spawn("kube-apiserver", [
            str(self.binaries.path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={p['apiserver']}", f"--cert-dir={d / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            # Unused (no aggregated API servers), but without it every component that reads
            # extension-apiserver-authentication logs an error about a missing CA bundle.
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true",
            # ServiceAccount: pods need no default ServiceAccount (as envtest).
            # TaintNodesByCondition: it taints new Nodes not-ready, and only the node-lifecycle
            # controller (disabled in KCM, see below) would lift the taint.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--enable-priority-and-fairness=false",
            "--endpoint-reconciler-type=none",
            # A real node's name (realnode.py) is not in any DNS: reach its kubelet (logs) by address.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--v=1",
        ])
        (d / "admin.kubeconfig").write_text(yaml.safe_dump(_kubeconfig(
            self.api_url, pki / "ca.crt",
            {"client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")})))
        self._wait("kube-apiserver /readyz", lambda: self._https_ok(p["apiserver"], "/readyz"), 120, api)
        # RBAC bootstrap roles are in place once system:admin-style checks pass; namespaces too.
        self._wait("default namespace", lambda: self.kube.get_or_none("Namespace", "default"), 60, api)
        self._install_crds()

    def _install_crds(self) -> None:
        md = self.binaries.moddirs
        files = [md["JOBSET_DIR"] / "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"]
        files += sorted((md["KUEUE_DIR"] / "config/components/crd/bases").glob("kueue.x-k8s.io_*.yaml"))
        self.install_crds([doc for f in files for doc in _load_yaml_docs(f)])

    # ---- tier B
    def _start_tier_b(self) -> None:
        d, p, kc = self.workdir, self.ports, str(self.kubeconfig)
        pki = d / "pki"
        for n in ("scheduler", "jobset_webhook", "jobset_health"):
            p[n] = free_port()

        kcm = self._spawn("kube-controller-manager", [
            str(self.binaries.path("kube-controller-manager")),
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--leader-elect=false",
            "--bind-address=127.0.0.1", "--secure-port=0", f"--cert-dir={d / 'kcm-certs'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", "--use-service-account-credentials=false",
            "--kube-api-qps=100", "--kube-api-burst=200",
            # Node health is kwok's business: no NotReady marking, no taint-based eviction.
            "--controllers=*,-node-lifecycle-controller,-taint-eviction-controller",
            "--v=1",
        ])
        sched = self._spawn("kube-scheduler", [
            str(self.binaries.path("kube-scheduler")),
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={p['scheduler']}",
            f"--cert-dir={d / 'scheduler-certs'}", "--v=1",
        ])
        self._start_kwok()
        self._create_nodes()

        # JobSet controller with its webhooks on loopback.
        certs = d / "webhook-certs"
        certs.mkdir(exist_ok=True)
        shutil.copy(pki / "webhook.crt", certs / "tls.crt")
        shutil.copy(pki / "webhook.key", certs / "tls.key")
        cfg = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": p["jobset_webhook"], "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{p['jobset_health']}"},
            "clientConnection": {"qps": 100, "burst": 200},
        }
        (d / "jobset.yaml").write_text(yaml.safe_dump(cfg))
        js = self._spawn("jobset", [
            str(self.binaries.path("jobset")), f"--kubeconfig={kc}", f"--config={d / 'jobset.yaml'}",
            "--zap-log-level=info",
        ])
        self._wait("jobset /readyz",
                   lambda: self._http_ok(f"http://127.0.0.1:{p['jobset_health']}/readyz"), 90, js)
        self._install_jobset_webhooks()
        self._wait("kube-scheduler /readyz", lambda: self._https_ok(p["scheduler"], "/readyz", verify=False),
                   60, sched)
        # The JobSet defaulting webhook answers: dry-run a JobSet and see successPolicy filled in.
        probe = _probe_jobset("default", queue=None)
        self._wait("JobSet webhook answering", lambda: self.kube.create(probe, dry_run=True)
                   ["spec"].get("successPolicy"), 60, js)
        self._wait("kube-controller-manager running", lambda: kcm.alive(), 5, kcm)

    def _start_kwok(self) -> None:
        d, kc = self.workdir, str(self.kubeconfig)
        stages_dir = self.binaries.moddirs["KWOK_DIR"] / "kustomize" / "stage"
        docs: list[dict] = []
        for rel in ("node/fast/node-initialize.yaml", "node/heartbeat/node-heartbeat.yaml",
                    "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml"):
            docs += _load_yaml_docs(stages_dir / rel)
        for doc in docs:
            if doc["metadata"]["name"] == "pod-ready":
                doc["spec"]["selector"].setdefault("matchExpressions", []).append(
                    {"key": f'.metadata.annotations["{ANNOTATION_NEVER_READY}"]',
                     "operator": "DoesNotExist"})
            if doc["metadata"]["name"] == "pod-delete":
                # A disrupted pod is stopped first (see _own_pod_stages), and a slow one waits.
                doc["spec"]["selector"].setdefault("matchExpressions", []).extend([
                    {"key": _DISRUPTION_TARGET, "operator": "NotIn", "values": ["True"]},
                    {"key": f'.metadata.annotations["{ANNOTATION_TERMINATE_AFTER}"]', "operator": "DoesNotExist"}])
        docs += _own_pod_stages(stages_dir)
        home = d / "kwok-home"
        home.mkdir(exist_ok=True)
        (d / "kwok.yaml").write_text(yaml.safe_dump_all(docs))
        self._spawn("kwok", [
            str(self.binaries.path("kwok")), f"--kubeconfig={kc}", f"--config={d / 'kwok.yaml'}",
            # Only the fake nodes: a real node (realnode.py) has a kubelet of its own.
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--cidr=10.244.0.0/16",
        ], env={"HOME": str(home)})

    def _create_nodes(self) -> None:
        for i in range(self.kwok_nodes):
            res = {"cpu": str(NODE_CPU), "memory": f"{NODE_MEMORY_GI}Gi", "pods": "110"}
            self.kube.apply({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": f"kwok-node-{i}", "labels": {
                    "kubernetes.io/hostname": f"kwok-node-{i}", "type": "kwok"},
                    "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "status": {"capacity": res, "allocatable": res},
            })
        kwok = next(c for c in self.components if c.name == "kwok")
        for i in range(self.kwok_nodes):
            self._wait(f"node kwok-node-{i} Ready", lambda i=i: has_condition(
                self.kube.get("Node", f"kwok-node-{i}"), "Ready"), 90, kwok)

    def _webhook_client_config(self, port: int, path: str) -> dict:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}

    def _install_jobset_webhooks(self) -> None:
        base = self.binaries.moddirs["JOBSET_DIR"] / "config/components/webhook/manifests.yaml"
        port = self.ports["jobset_webhook"]
        for doc in _load_yaml_docs(base):
            doc["metadata"]["name"] = "jobset-" + doc["metadata"]["name"]
            for wh in doc["webhooks"]:
                svc = wh["clientConfig"].pop("service")
                wh["clientConfig"] = self._webhook_client_config(port, svc["path"])
                if any("pods" in r.get("resources", []) for r in wh.get("rules", [])):
                    # config/components/webhook/patches: only pods of JobSets.
                    wh["objectSelector"] = {"matchExpressions": [
                        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
            self.kube.apply(doc)

    # ---- tier C
    def _start_tier_c(self) -> None:
        d, p, kc = self.workdir, self.ports, str(self.kubeconfig)
        for n in ("kueue_webhook", "kueue_health"):
            p[n] = free_port()
        _ensure_kueue_metrics_certs(d / "pki")
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}})
        self._patch_kueue_conversion()
        cfg = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": "kueue-system",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": p["kueue_webhook"],
                        "certDir": str(d / "webhook-certs")},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{p['kueue_health']}"},
            "clientConnection": {"qps": 100, "burst": 200},
            # PriorityBoost: Kueue reads gangrun's kueue.x-k8s.io/priority-boost annotation (written only by a
            # controller started with --priority-boost; without the annotation nothing changes).
            "featureGates": {"VisibilityOnDemand": False, "PriorityBoost": True},
            "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
            "waitForPodsReady": {"timeout": PODS_READY_TIMEOUT},
        }
        (d / "kueue.yaml").write_text(yaml.safe_dump(cfg))
        kq = self._spawn("kueue", [
            str(self.binaries.path("kueue")), f"--kubeconfig={kc}", f"--config={d / 'kueue.yaml'}",
            "--zap-log-level=info",
        ])
        self._wait("kueue /readyz",
                   lambda: self._http_ok(f"http://127.0.0.1:{p['kueue_health']}/readyz"), 120, kq)
        self._install_kueue_webhooks()
        self._create_kueue_objects(kq)
        probe = _probe_jobset("default", queue=LOCAL_QUEUE)
        self._wait("Kueue JobSet webhook suspends queued JobSets",
                   lambda: self.kube.create(probe, dry_run=True)["spec"].get("suspend") is True,
                   60, kq)

    def _patch_kueue_conversion(self) -> None:
        for plural in KUEUE_CONVERTED_CRDS:
            self.kube.patch("CustomResourceDefinition", f"{plural}.kueue.x-k8s.io", None, {
                "spec": {"conversion": {"strategy": "Webhook", "webhook": {
                    "clientConfig": self._webhook_client_config(self.ports["kueue_webhook"], "/convert"),
                    "conversionReviewVersions": ["v1"]}}}})

    def _install_kueue_webhooks(self) -> None:
        base = self.binaries.moddirs["KUEUE_DIR"] / "config/components/webhook/manifests.yaml"
        port = self.ports["kueue_webhook"]
        for doc in _load_yaml_docs(base):
            doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
            kept = []
            for wh in doc["webhooks"]:
                path = wh["clientConfig"]["service"]["path"]
                # Only the enabled integrations and Kueue's own types; the others are no-ops.
                if not any(part in path for part in KUEUE_WEBHOOK_PATH_PARTS):
                    continue
                wh["clientConfig"] = self._webhook_client_config(port, path)
                if "kueue-x-k8s-io" not in path:
                    # config/components/webhook/kustomization.yaml
                    wh["namespaceSelector"] = {"matchExpressions": [{
                        "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                        "values": ["kube-system", "kueue-system"]}]}
                kept.append(wh)
            doc["webhooks"] = kept
            self.kube.apply(doc)

    def _create_kueue_objects(self, kq: Component) -> None:
        k = self.kube
        k.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": RESOURCE_FLAVOR}})
        k.apply({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": RESOURCE_FLAVOR, "resources": [
                        {"name": "cpu", "nominalQuota": str(NODE_CPU * NODE_COUNT)},
                        {"name": "memory", "nominalQuota": f"{NODE_MEMORY_GI * NODE_COUNT}Gi"},
                    ]}],
                }],
            },
        })
        for name, value in PRIORITY_CLASSES.items():
            k.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                     "metadata": {"name": name}, "value": value,
                     "description": f"e2e priority {name}"})
        self._make_local_queue("default")
        self._wait("ClusterQueue Active", lambda: has_condition(
            k.get("ClusterQueue", CLUSTER_QUEUE), "Active"), 60, kq)

    def _make_local_queue(self, namespace: str) -> None:
        k = self.kube
        k.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
                 "spec": {"clusterQueue": CLUSTER_QUEUE}})
        kq = next((c for c in self.components if c.name == "kueue"), None)
        self._wait(f"LocalQueue {namespace}/{LOCAL_QUEUE} Active", lambda: has_condition(
            k.get("LocalQueue", LOCAL_QUEUE, namespace), "Active"), 60, kq)


def _probe_jobset(namespace: str, queue: str | None) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "webhook-probe", "namespace": namespace, "labels": labels},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}}}]},
    }


_DISRUPTION_TARGET = '.status.conditions.[] | select( .type == "DisruptionTarget" ) | .status'


def _own_pod_stages(stages_dir: Path) -> list[dict]:
    """Complete or fail a Running pod when the test puts an annotation on it; stop a pod being
    deleted with the condition DisruptionTarget (the Eviction API, `kubectl drain`) as a kubelet does:
    Failed with exit 143 once SIGTERM ended it, so the Job's podFailurePolicy sees a failed pod."""
    complete = _load_yaml_docs(stages_dir / "pod/general/pod-complete.yaml")[0]
    complete["metadata"]["name"] = "pod-complete-on-annotation"
    complete["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": f'.metadata.annotations["{ANNOTATION_COMPLETE_AFTER}"]', "operator": "Exists"},
        {"key": f'.metadata.annotations["{ANNOTATION_FAIL_AFTER}"]', "operator": "DoesNotExist"},
    ]}
    complete["spec"]["delay"] = {
        "durationMilliseconds": 0,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{ANNOTATION_COMPLETE_AFTER}"]'},
    }
    complete["spec"].pop("weight", None)
    complete["spec"].pop("weightFrom", None)
    fail = copy.deepcopy(complete)
    fail["metadata"]["name"] = "pod-fail-on-annotation"
    fail["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": f'.metadata.annotations["{ANNOTATION_FAIL_AFTER}"]', "operator": "Exists"},
    ]}
    fail["spec"]["delay"] = {
        "durationMilliseconds": 0,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{ANNOTATION_FAIL_AFTER}"]'},
    }
    fail["spec"]["next"]["statusTemplate"] = _FAIL_STATUS_TEMPLATE
    complete["spec"]["next"]["statusTemplate"] = _COMPLETE_STATUS_TEMPLATE
    terminate = copy.deepcopy(fail)
    terminate["metadata"]["name"] = "pod-terminate-disrupted"
    terminate["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
        {"key": ".status.phase", "operator": "In", "values": ["Pending", "Running"]},
        {"key": _DISRUPTION_TARGET, "operator": "In", "values": ["True"]},
    ]}
    terminate["spec"]["delay"] = {"durationMilliseconds": 0}
    terminate["spec"]["next"]["statusTemplate"] = _TERMINATED_STATUS_TEMPLATE
    gone = copy.deepcopy(terminate)
    gone["metadata"]["name"] = "pod-delete-terminated"
    gone["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
        {"key": ".status.phase", "operator": "In", "values": ["Failed", "Succeeded"]},
    ]}
    gone["spec"]["next"] = {"delete": True}
    slow = copy.deepcopy(gone)
    slow["metadata"]["name"] = "pod-delete-after-annotation"
    slow["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
        {"key": _DISRUPTION_TARGET, "operator": "NotIn", "values": ["True"]},
        {"key": f'.metadata.annotations["{ANNOTATION_TERMINATE_AFTER}"]', "operator": "Exists"},
    ]}
    slow["spec"]["delay"] = {
        "durationMilliseconds": 0,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{ANNOTATION_TERMINATE_AFTER}"]'},
    }
    return [complete, fail, terminate, gone, slow]


# The container statuses of a completed pod, kwok's general pod-complete template with the worker's
# termination message.
_COMPLETE_STATUS_TEMPLATE = """
{{ $now := Now }}
{{ $root := . }}
{{ $msg := index (or .metadata.annotations dict) "MESSAGE_ANNOTATION" }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
- image: {{ $item.image | Quote }}
  name: {{ $item.name | Quote }}
  ready: true
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
      {{ if and $msg (eq $item.name "worker") }}message: {{ $msg | Quote }}{{ end }}
{{ end }}
phase: Succeeded
""".replace("MESSAGE_ANNOTATION", ANNOTATION_TERMINATION_MESSAGE)

# A pod a kubelet stopped for a disruption: SIGTERM ended every container (143); conditions are left
# as they are (the DisruptionTarget condition the podFailurePolicy matches stays).
_TERMINATED_STATUS_TEMPLATE = """
{{ $now := Now }}
containerStatuses:
{{ range $index, $container := .spec.containers }}
- image: {{ $container.image | Quote }}
  name: {{ $container.name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 143
      finishedAt: {{ $now | Quote }}
      reason: Error
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Failed
"""

# The container statuses of a failed pod; same shape as kwok's general pod-complete template.
_FAIL_STATUS_TEMPLATE = """
{{ $now := Now }}
{{ $root := . }}
{{ $exit := or (index (or .metadata.annotations dict) "EXIT_ANNOTATION") "1" }}
{{ $msg := index (or .metadata.annotations dict) "MESSAGE_ANNOTATION" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: PodFailed
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: PodFailed
  type: ContainersReady
containerStatuses:
{{ range $index, $container := .spec.containers }}
- image: {{ $container.image | Quote }}
  name: {{ $container.name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{ $exit }}
      finishedAt: {{ $now | Quote }}
      reason: Error
      startedAt: {{ $now | Quote }}
      {{ if and $msg (eq $container.name "worker") }}message: {{ $msg | Quote }}{{ end }}
{{ end }}
phase: Failed
""".replace("EXIT_ANNOTATION", ANNOTATION_EXIT_CODE).replace("MESSAGE_ANNOTATION", ANNOTATION_TERMINATION_MESSAGE)  # not str.format: the Go template is full of braces


def _ensure_kueue_metrics_certs(pki: Path) -> None:
    """Kueue reads /etc/kueue/metrics/certs/tls.{crt,key} when its internal cert manager is off.

    The metrics server itself is disabled (bindAddress "0"), so any valid pair does; an existing
    pair (e.g. another test run's) is kept.
    """
    target = Path("/etc/kueue/metrics/certs")
    if (target / "tls.crt").exists() and (target / "tls.key").exists():
        return
    try:
        target.mkdir(parents=True, exist_ok=True)
        for src, dst in (("webhook.crt", "tls.crt"), ("webhook.key", "tls.key")):
            tmp = target / f".{dst}.{os.getpid()}"
            shutil.copy(pki / src, tmp)
            os.replace(tmp, target / dst)
    except PermissionError as e:
        raise ControlPlaneError(
            f"Kueue needs a certificate pair in {target} (a hard-coded path); could not write it: {e}. "
            "Run as root or create it once with any valid certificate and key."
        ) from e


@contextlib.contextmanager
def running(tier: str = "C", binaries: Binaries | None = None) -> Iterator[ControlPlane]:
    """``with running("C") as cp: ...``: start a control plane, stop it afterwards."""
    cp = ControlPlane(binaries or locate_binaries(),
                      keep_workdir=bool(os.environ.get("GANGRUN_E2E_KEEP")))
    try:
        yield cp.ensure(tier)
    finally:
        cp.stop()


if __name__ == "__main__":  # manual smoke test: python tests/e2e/controlplane.py [tier]
    import sys

    t0 = time.monotonic()
    with running(sys.argv[1] if len(sys.argv) > 1 else "C") as cp:
        print(f"tier {cp.tier} up in {time.monotonic() - t0:.1f}s: {cp.api_url}")
        print(f"kubeconfig: {cp.kubeconfig}")
        print(json.dumps(cp.kube.request("GET", "/version"), indent=1))
        if len(sys.argv) > 2:
            time.sleep(float(sys.argv[2]))
