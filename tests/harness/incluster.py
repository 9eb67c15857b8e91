"""The gangrun controller deployed in-cluster from the built image with the manifests in deploy/.

deploy/ is applied as it is (namespace, CRD, RBAC, Deployment), with what this one-node cluster
needs on top, the way a kustomize overlay would:

* the image ``localhost/gangrun:dev``, never pulled (it is imported into the node's containerd);
* one replica (leader election stays on), on the real node;
* ``hostNetwork``: the API server listens on loopback only, so the controller reaches it there
  (``KUBERNETES_SERVICE_HOST``/``PORT``); its metrics and health ports are free host ports;
* the ServiceAccount token mounted explicitly: the test API server runs without the ServiceAccount
  admission plugin, which would otherwise add that volume. The token is the ServiceAccount's, so
  deploy/rbac.yaml's rules are the ones in force.
"""

from __future__ import annotations

import copy

import yaml

from tests.harness.binaries import REPO_ROOT
from tests.harness.client import Kube, has_condition
from tests.harness.processes import free_port
from tests.harness.realnode import IMAGE, api_server_env, placement

DEPLOY = REPO_ROOT / "deploy"
NAMESPACE = "gangrun-system"
NAME = "gangrun-controller"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def manifests(api_url: str, *, image: str = IMAGE, on_real_node: bool = True,
              namespace: str | None = None, args: tuple[str, ...] = ()) -> list[dict]:
    docs = [d for f in ("namespace.yaml", "crd.yaml", "rbac.yaml", "deployment.yaml")
            for d in yaml.safe_load_all((DEPLOY / f).read_text()) if d]
    out = []
    for doc in docs:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == NAME:
            doc = deployment(doc, api_url, image=image, on_real_node=on_real_node, namespace=namespace, args=args)
        out.append(doc)
    return out


def deployment(doc: dict, api_url: str, *, image: str, on_real_node: bool, namespace: str | None = None,
               args: tuple[str, ...] = ()) -> dict:
    """deploy/deployment.yaml adapted to this cluster; `namespace`: watch only that one (a test's); `args`:
    more controller flags (`--priority-boost`)."""
    doc = copy.deepcopy(doc)
    doc["spec"]["replicas"] = 1
    pod = doc["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    if on_real_node:
        pod.update(placement())
    pod.setdefault("volumes", []).append({"name": "sa-token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]}})
    metrics, health = free_port(), free_port()
    c = next(c for c in pod["containers"] if c["name"] == "controller")
    c["image"] = image
    c["imagePullPolicy"] = "Never"
    c["args"] = [a for a in c["args"] if not a.startswith(("--metrics-port", "--health-port"))]
    c["args"] += [f"--metrics-port={metrics}", f"--health-port={health}"]
    if namespace:
        c["args"].append(f"--namespace={namespace}")
    c["args"] += list(args)
    c["ports"] = [{"name": "metrics", "containerPort": metrics}, {"name": "health", "containerPort": health}]
    c.setdefault("env", []).extend({"name": k, "value": v} for k, v in api_server_env(api_url).items())
    c.setdefault("volumeMounts", []).append({"name": "sa-token", "mountPath": TOKEN_DIR, "readOnly": True})
    return doc


def deploy(kube: Kube, api_url: str, *, image: str = IMAGE, on_real_node: bool = True,
           namespace: str | None = None, args: tuple[str, ...] = (), timeout: float = 120.0) -> None:
    """Apply deploy/ (adapted as above) and wait until the controller's pod is Ready."""
    for doc in manifests(api_url, image=image, on_real_node=on_real_node, namespace=namespace, args=args):
        kube.apply(doc)
        if doc["kind"] == "CustomResourceDefinition":
            name = doc["metadata"]["name"]
            kube.wait_for(f"CRD {name} Established", lambda n=name: has_condition(
                kube.get("CustomResourceDefinition", n), "Established"), timeout=60)
    kube.wait_for(f"{NAMESPACE}/{NAME} Ready", lambda: any(
        has_condition(p, "Ready") for p in kube.list("Pod", NAMESPACE, label_selector=f"app.kubernetes.io/name={NAME}")
    ), timeout=timeout)


def remove(kube: Kube, *, wait: float = 0.0) -> None:
    """Delete the Deployment; with `wait`, until its pods are gone too (at most that many seconds), so that
    a deployment made next is the only controller."""
    kube.delete("Deployment", NAME, NAMESPACE)
    if wait:
        kube.wait_for(f"{NAMESPACE}/{NAME} pods gone", lambda: not kube.list(
            "Pod", NAMESPACE, label_selector=f"app.kubernetes.io/name={NAME}"), timeout=wait)


def logs(kube: Kube, tail: int = 200) -> str:
    """The controller pods' output, through the API server (and the kubelet)."""
    out = []
    for p in kube.list("Pod", NAMESPACE, label_selector=f"app.kubernetes.io/name={NAME}"):
        name = p["metadata"]["name"]
        try:
            from kubernetes import client

            text = client.CoreV1Api(kube.api_client).read_namespaced_pod_log(name, NAMESPACE, tail_lines=tail)
        except Exception as e:
            text = f"(no log: {e})"
        out.append(f"--- {name}\n{text}")
    return "\n".join(out)
