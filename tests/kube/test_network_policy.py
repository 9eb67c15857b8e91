"""deploy/networkpolicy.yaml, the example NetworkPolicy of a task namespace: it parses, admits the
controller to the workers' live checkpoint report port, and lets a gang's pods reach one another on
the rendezvous and report ports (issue 29 item 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gangrun._backends.kube import crd, render_jobset
from gangrun._backends.kube.render import MASTER_PORT, REPORT_PORT
from gangrun._core import pod_template
from tests.harness.kube_builders import task_spec

ROOT = Path(__file__).resolve().parents[2]


def _one(path: Path, kind: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == kind]
    return doc


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector's matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) on `labels`."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {"Exists": key in labels, "DoesNotExist": key not in labels,
              "In": labels.get(key) in values, "NotIn": labels.get(key) not in values}[op]
        if not ok:
            return False
    return True


def _worker_pod() -> tuple[dict[str, str], dict[int, str]]:
    """A rendered worker pod's labels, and its worker container's ports (number -> name)."""
    template = render_jobset(task_spec())["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    (worker,) = [c for c in template["spec"]["containers"] if c["name"] == pod_template.WORKER]
    return template["metadata"]["labels"], {p["containerPort"]: p["name"] for p in worker["ports"]}


def _admits(policy: dict[str, Any], *, namespace: str, labels: dict[str, str], port: int, port_name: str,
            same_namespace: bool) -> bool:
    """Whether an ingress rule of `policy` admits a pod (`namespace`, `labels`) to `port`."""
    for rule in policy["spec"].get("ingress") or []:
        ports = rule.get("ports")
        if ports and not any(p.get("port") in (port, port_name) for p in ports):
            continue
        for peer in rule.get("from") or []:
            ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
            ns_ok = (_selects(ns_sel, {"kubernetes.io/metadata.name": namespace}) if ns_sel is not None
                     else same_namespace)
            if ns_ok and (pod_sel is None or _selects(pod_sel, labels)):
                return True
    return False


def test_the_example_network_policy_parses_and_selects_every_worker_pod() -> None:
    policy = _one(ROOT / "deploy" / "networkpolicy.yaml", "NetworkPolicy")
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["spec"]["policyTypes"] == ["Ingress"]
    labels, _ = _worker_pod()
    assert crd.TASK_LABEL in labels and _selects(policy["spec"]["podSelector"], labels)


def test_the_example_network_policy_names_the_report_port_and_lets_the_controller_poll_it() -> None:
    policy = _one(ROOT / "deploy" / "networkpolicy.yaml", "NetworkPolicy")
    named = {p.get("port") for rule in policy["spec"]["ingress"] for p in rule.get("ports") or []}
    assert pod_template.REPORT_PORT_NAME in named
    _, ports = _worker_pod()
    assert ports[REPORT_PORT] == pod_template.REPORT_PORT_NAME  # the name the policy uses is the worker's
    deployment = _one(ROOT / "deploy" / "deployment.yaml", "Deployment")
    controller = dict(namespace=deployment["metadata"]["namespace"],
                      labels=deployment["spec"]["template"]["metadata"]["labels"], same_namespace=False)
    assert _admits(policy, port=REPORT_PORT, port_name=pod_template.REPORT_PORT_NAME, **controller)
    assert not _admits(policy, port=MASTER_PORT, port_name=pod_template.OWN_PORT_NAME, **controller)
    stranger = dict(namespace="elsewhere", labels={"app": "x"}, same_namespace=False)
    assert not _admits(policy, port=REPORT_PORT, port_name=pod_template.REPORT_PORT_NAME, **stranger)


def test_the_example_network_policy_lets_a_gang_s_pods_reach_one_another() -> None:
    policy = _one(ROOT / "deploy" / "networkpolicy.yaml", "NetworkPolicy")
    labels, ports = _worker_pod()
    peer = dict(namespace="ml", labels=labels, same_namespace=True)
    for port, name in ports.items():  # rendezvous on MASTER_PORT, GET /start on the report port
        assert _admits(policy, port=port, port_name=name, **peer), name
    assert _admits(policy, port=41234, port_name="", **peer)  # gloo and NCCL pick their own ports
    assert MASTER_PORT in ports
