"""JobSet and Kueue on the test cluster: their configurations, their webhooks pointed at loopback, their CRDs,
and the Kueue objects every test queues on (a ResourceFlavor, a ClusterQueue whose quota is exactly the fake
nodes', WorkloadPriorityClasses ``low`` and ``high``, a LocalQueue ``default``). The documents only: the
control plane (:mod:`tests.harness.controlplane`) applies them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tests.harness.binaries import load_yaml_docs

# Fake capacity: NODE_COUNT kwok nodes; the ClusterQueue's quota is exactly all of them.
NODE_COUNT = 4
NODE_CPU = 4
NODE_MEMORY_GI = 16
CLUSTER_QUEUE = "cluster-queue"
RESOURCE_FLAVOR = "default-flavor"
LOCAL_QUEUE = "default"
PRIORITY_CLASSES = {"low": 100, "high": 10000}

# Kueue's waitForPodsReady timeout (also its recoveryTimeout). Kueue 0.19 enables it by
# default with 30 min; a short one lets a test see a PodsReadyTimeout eviction (pods that carry
# ANNOTATION_NEVER_READY). kwok makes other pods Ready within a second or two.
PODS_READY_TIMEOUT = os.environ.get("GANGRUN_E2E_PODS_READY_TIMEOUT", "45s")

KUEUE_WEBHOOK_PATH_PARTS = ("kueue-x-k8s-io", "batch-v1-job", "jobset-x-k8s-io")
KUEUE_CONVERTED_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")

# A webhook's clientConfig for a path of the component's server on loopback.
ClientConfig = Callable[[str], dict]


def crd_files(moddirs: dict[str, Path]) -> list[Path]:
    files = [moddirs["JOBSET_DIR"] / "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"]
    return files + sorted((moddirs["KUEUE_DIR"] / "config/components/crd/bases").glob("kueue.x-k8s.io_*.yaml"))


def _manager_settings(webhook_port: int, health_port: int, cert_dir: Path) -> dict:
    """What JobSet's and Kueue's managers are told alike: no leader election and no certificate management of
    their own, webhooks and health on loopback, no metrics, a client fast enough for a storm."""
    return {
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 100, "burst": 200},
    }


def jobset_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict:
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        **_manager_settings(webhook_port, health_port, cert_dir),
    }


def jobset_webhooks(moddir: Path, client_config: ClientConfig) -> list[dict]:
    docs = load_yaml_docs(moddir / "config/components/webhook/manifests.yaml")
    for doc in docs:
        doc["metadata"]["name"] = "jobset-" + doc["metadata"]["name"]
        for wh in doc["webhooks"]:
            svc = wh["clientConfig"].pop("service")
            wh["clientConfig"] = client_config(svc["path"])
            if any("pods" in r.get("resources", []) for r in wh.get("rules", [])):
                # config/components/webhook/patches: only pods of JobSets.
                wh["objectSelector"] = {"matchExpressions": [
                    {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    return docs


def kueue_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        **_manager_settings(webhook_port, health_port, cert_dir),
        # PriorityBoost: Kueue reads gangrun's kueue.x-k8s.io/priority-boost annotation (written only by a
        # controller started with --priority-boost; without the annotation nothing changes).
        "featureGates": {"VisibilityOnDemand": False, "PriorityBoost": True},
        "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
        "waitForPodsReady": {"timeout": PODS_READY_TIMEOUT},
    }


def kueue_conversion(client_config: dict) -> dict:
    """The merge patch that sends a Kueue CRD's version conversions to Kueue's webhook."""
    return {"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "clientConfig": client_config, "conversionReviewVersions": ["v1"]}}}}


def kueue_webhooks(moddir: Path, client_config: ClientConfig) -> list[dict]:
    docs = load_yaml_docs(moddir / "config/components/webhook/manifests.yaml")
    for doc in docs:
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
        kept = []
        for wh in doc["webhooks"]:
            path = wh["clientConfig"]["service"]["path"]
            # Only the enabled integrations and Kueue's own types; the others are no-ops.
            if not any(part in path for part in KUEUE_WEBHOOK_PATH_PARTS):
                continue
            wh["clientConfig"] = client_config(path)
            if "kueue-x-k8s-io" not in path:
                # config/components/webhook/kustomization.yaml
                wh["namespaceSelector"] = {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": ["kube-system", "kueue-system"]}]}
            kept.append(wh)
        doc["webhooks"] = kept
    return docs


def kueue_objects() -> list[dict]:
    """The ResourceFlavor, the ClusterQueue and the WorkloadPriorityClasses."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": RESOURCE_FLAVOR}},
        {
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
        },
        *({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
           "metadata": {"name": name}, "value": value, "description": f"e2e priority {name}"}
          for name, value in PRIORITY_CLASSES.items()),
    ]


def local_queue(namespace: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace}, "spec": {"clusterQueue": CLUSTER_QUEUE}}


def probe_jobset(namespace: str, queue: str | None) -> dict:
    """A JobSet to dry-run: the webhooks answer once it comes back defaulted (and, queued, suspended)."""
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "webhook-probe", "namespace": namespace, "labels": labels},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}}}]},
    }
