"""A real Kubernetes control plane on loopback, as local processes, for end-to-end tests.

It needs the binaries made by ``hack/build-control-plane.sh`` (:mod:`tests.harness.binaries`), the
Go module cache (CRD, webhook and kwok stage YAMLs are read from there), the ``cryptography``
package (certificates, :mod:`tests.harness.pki`) and gangrun's Kubernetes client under the test
client (:mod:`tests.harness.client`).

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
interpreter exit and (``PR_SET_PDEATHSIG``) when the Python process dies (:mod:`tests.harness.processes`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness import addons, kwok
from tests.harness.binaries import Binaries, load_yaml_docs, locate_binaries
from tests.harness.client import Kube, has_condition
from tests.harness.pki import ensure_kueue_metrics_certs, make_pki
from tests.harness.processes import Component, ControlPlaneError, end, free_port, respawn, spawn

TIERS = ("A", "B", "C")


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
    kwok_nodes: int = addons.NODE_COUNT  # fake nodes made at tier B (0: only real nodes take pods)
    # Where kwok takes its pods' IPs. No packet reaches them unless they are on this machine: a loopback
    # range (127.0.0.0/8) lets one process answer at every pod's IP (benchmarks/bench_kwok_restart.py).
    kwok_cidr: str = "10.244.0.0/16"
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
        return self.kube.api_client

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
            end(c.proc)
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
        end(component.proc, grace=grace)
        with contextlib.suppress(ValueError):
            self.components.remove(component)
        return component.proc.returncode

    def restart(self, name: str) -> Component:
        """Crash the component `name` (``etcd``, ``kube-apiserver``, ``kueue``, ...) and start it again: see
        :func:`processes.respawn`. The caller waits until it serves again."""
        return respawn(self.components, name, self._spawn)

    def env(self) -> dict[str, str]:
        """Environment for a subprocess (e.g. ``gangrun controller``) that should use this cluster."""
        e = dict(os.environ)
        e["KUBECONFIG"] = str(self.kubeconfig)
        e["NO_PROXY"] = e["no_proxy"] = "127.0.0.1,localhost"
        return e

    # ---------------------------------------------------------------- internals
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        assert self.workdir
        c = spawn(name, argv, self.workdir / "logs" / f"{name}.log", self.workdir, env)
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

    def api_text(self, path: str) -> str:
        """GET `path` of the API server as the admin, as text (`/metrics`)."""
        with urllib.request.urlopen(f"{self.api_url}{path}", context=self._tls(), timeout=30) as r:
            return r.read().decode()

    def _tls(self, client_cert: bool = True, verify: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if not verify:  # a component serving its own self-signed certificate (--cert-dir)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if client_cert:
            assert self.workdir
            pki = self.workdir / "pki"
            ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def _https_ok(self, port: int, path: str, client_cert: bool = True,
                  verify: bool = True) -> bool:
        ctx = self._tls(client_cert, verify)
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
        make_pki(pki)
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
        self.install_crds([doc for f in addons.crd_files(self.binaries.moddirs) for doc in load_yaml_docs(f)])

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
        cfg = addons.jobset_config(p["jobset_webhook"], p["jobset_health"], certs)
        (d / "jobset.yaml").write_text(yaml.safe_dump(cfg))
        js = self._spawn("jobset", [
            str(self.binaries.path("jobset")), f"--kubeconfig={kc}", f"--config={d / 'jobset.yaml'}",
            "--zap-log-level=info",
        ])
        self._wait("jobset /readyz",
                   lambda: self._http_ok(f"http://127.0.0.1:{p['jobset_health']}/readyz"), 90, js)
        for doc in addons.jobset_webhooks(self.binaries.moddirs["JOBSET_DIR"], self._webhook_client_config(
                p["jobset_webhook"])):
            self.kube.apply(doc)
        self._wait("kube-scheduler /readyz", lambda: self._https_ok(p["scheduler"], "/readyz", verify=False),
                   60, sched)
        # The JobSet defaulting webhook answers: dry-run a JobSet and see successPolicy filled in.
        probe = addons.probe_jobset("default", queue=None)
        self._wait("JobSet webhook answering", lambda: self.kube.create(probe, dry_run=True)
                   ["spec"].get("successPolicy"), 60, js)
        self._wait("kube-controller-manager running", lambda: kcm.alive(), 5, kcm)

    def _start_kwok(self) -> None:
        d, kc = self.workdir, str(self.kubeconfig)
        home = d / "kwok-home"
        home.mkdir(exist_ok=True)
        (d / "kwok.yaml").write_text(yaml.safe_dump_all(kwok.stage_docs(self.binaries.moddirs["KWOK_DIR"] / "kustomize" / "stage")))
        self._spawn("kwok", [
            str(self.binaries.path("kwok")), f"--kubeconfig={kc}", f"--config={d / 'kwok.yaml'}",
            # Only the fake nodes: a real node (realnode.py) has a kubelet of its own.
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", f"--cidr={self.kwok_cidr}",
        ], env={"HOME": str(home)})

    def _create_nodes(self) -> None:
        for i in range(self.kwok_nodes):
            res = {"cpu": str(addons.NODE_CPU), "memory": f"{addons.NODE_MEMORY_GI}Gi", "pods": "110"}
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

    def _webhook_client_config(self, port: int) -> Callable[[str], dict]:
        """A webhook's ``clientConfig`` for a path on loopback `port`, signed by the cluster's CA."""
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        return lambda path: {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}

    # ---- tier C
    def _start_tier_c(self) -> None:
        d, p, kc = self.workdir, self.ports, str(self.kubeconfig)
        for n in ("kueue_webhook", "kueue_health"):
            p[n] = free_port()
        ensure_kueue_metrics_certs(d / "pki")
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}})
        for plural in addons.KUEUE_CONVERTED_CRDS:
            self.kube.patch("CustomResourceDefinition", f"{plural}.kueue.x-k8s.io", None,
                            addons.kueue_conversion(self._webhook_client_config(p["kueue_webhook"])("/convert")))
        cfg = addons.kueue_config(p["kueue_webhook"], p["kueue_health"], d / "webhook-certs")
        (d / "kueue.yaml").write_text(yaml.safe_dump(cfg))
        kq = self._spawn("kueue", [
            str(self.binaries.path("kueue")), f"--kubeconfig={kc}", f"--config={d / 'kueue.yaml'}",
            "--zap-log-level=info",
        ])
        self._wait("kueue /readyz",
                   lambda: self._http_ok(f"http://127.0.0.1:{p['kueue_health']}/readyz"), 120, kq)
        for doc in addons.kueue_webhooks(self.binaries.moddirs["KUEUE_DIR"], self._webhook_client_config(
                p["kueue_webhook"])):
            self.kube.apply(doc)
        self._create_kueue_objects(kq)
        probe = addons.probe_jobset("default", queue=addons.LOCAL_QUEUE)
        self._wait("Kueue JobSet webhook suspends queued JobSets",
                   lambda: self.kube.create(probe, dry_run=True)["spec"].get("suspend") is True,
                   60, kq)

    def _create_kueue_objects(self, kq: Component) -> None:
        for doc in addons.kueue_objects():
            self.kube.apply(doc)
        self._make_local_queue("default")
        self._wait("ClusterQueue Active", lambda: has_condition(
            self.kube.get("ClusterQueue", addons.CLUSTER_QUEUE), "Active"), 60, kq)

    def _make_local_queue(self, namespace: str) -> None:
        self.kube.apply(addons.local_queue(namespace))
        kq = next((c for c in self.components if c.name == "kueue"), None)
        self._wait(f"LocalQueue {namespace}/{addons.LOCAL_QUEUE} Active", lambda: has_condition(
            self.kube.get("LocalQueue", addons.LOCAL_QUEUE, namespace), "Active"), 60, kq)


@contextlib.contextmanager
def running(tier: str = "C", binaries: Binaries | None = None, **options: Any) -> Iterator[ControlPlane]:
    """``with running("C") as cp: ...``: start a control plane, stop it afterwards (`options`: more
    fields of ControlPlane)."""
    cp = ControlPlane(binaries or locate_binaries(),
                      keep_workdir=bool(os.environ.get("GANGRUN_E2E_KEEP")), **options)
    try:
        yield cp.ensure(tier)
    finally:
        cp.stop()


if __name__ == "__main__":  # manual smoke test: python -m tests.harness.controlplane [tier]
    import sys

    t0 = time.monotonic()
    with running(sys.argv[1] if len(sys.argv) > 1 else "C") as cp:
        print(f"tier {cp.tier} up in {time.monotonic() - t0:.1f}s: {cp.api_url}")
        print(f"kubeconfig: {cp.kubeconfig}")
        print(json.dumps(cp.kube.request("GET", "/version"), indent=1))
        if len(sys.argv) > 2:
            time.sleep(float(sys.argv[2]))
