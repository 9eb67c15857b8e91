"""spec.podTemplate: what a user may set, what stays gangrun's, how the two merge, what a local run ignores."""

from __future__ import annotations

from typing import Any

import pytest

from gangrun._core.pod_merge import local_ignored, merge_named, merge_pod_template, worker_plain_env
from gangrun._core.spec import parse_manifest
from gangrun._errors import SpecError


def manifest(pod_template: Any = None, **spec: Any) -> dict[str, Any]:
    body = {"nodes": 2, "command": ["python", "train.py"], **spec}
    if pod_template is not None:
        body["podTemplate"] = pod_template
    return {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": "train"}, "spec": body}


def worker(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "worker", **fields}]}}


# A template a real GPU job uses: a PVC checkpoint store, S3 credentials from a Secret, GPU nodes.
REAL = {
    "metadata": {"labels": {"team": "ml"}, "annotations": {"owner": "ada@example.com"}},
    "spec": {
        "containers": [
            {"name": "worker", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
             "envFrom": [{"secretRef": {"name": "s3-creds"}}],
             "env": [{"name": "HF_HOME", "value": "/ckpt/hf"},
                     {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}}],
             "securityContext": {"runAsUser": 1000}},
            {"name": "log-shipper", "image": "fluent/fluent-bit:3"},
        ],
        "initContainers": [{"name": "fetch-data", "image": "busybox", "command": ["sh", "-c", "true"]}],
        "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "gpu"},
        "serviceAccountName": "trainer",
        "imagePullSecrets": [{"name": "regcred"}],
        "affinity": {"nodeAffinity": {}},
    },
}


def test_a_real_gpu_pod_template_is_accepted_as_given() -> None:
    spec = parse_manifest(manifest(REAL, shmSize="8Gi", resources={"gpu": 8}))
    assert spec.pod_template == REAL
    assert spec.shm_size == 8 * 2**30 and spec.gpu_resource == "nvidia.com/gpu"


@pytest.mark.parametrize("template,field,says", [
    pytest.param(worker(command=["bash"]), "spec.podTemplate.spec.containers[worker].command", "set by gangrun (spec.command)",
                 id="worker-command"),
    pytest.param(worker(args=["x"]), "spec.podTemplate.spec.containers[worker].args", "set by gangrun (spec.command)", id="worker-args"),
    pytest.param(worker(image="x:1"), "spec.podTemplate.spec.containers[worker].image", "set by gangrun (spec.image)", id="worker-image"),
    pytest.param(worker(resources={"limits": {"cpu": "1"}}), "spec.podTemplate.spec.containers[worker].resources",
                 "set by gangrun (spec.resources)", id="worker-resources"),
    pytest.param(worker(workingDir="/app"), "spec.podTemplate.spec.containers[worker].workingDir", "set by gangrun", id="worker-workdir"),
    pytest.param(worker(terminationMessagePath="/tmp/x"), "spec.podTemplate.spec.containers[worker].terminationMessagePath",
                 "set by gangrun", id="worker-termination-message"),
    pytest.param(worker(env=[{"name": "NODE_RANK", "value": "3"}]), "spec.podTemplate.spec.containers[worker].env[NODE_RANK]",
                 "set by gangrun (the worker environment contract)", id="env-contract-name"),
    pytest.param(worker(env=[{"name": "TORCHELASTIC_RUN_ID", "value": "x"}]),
                 "spec.podTemplate.spec.containers[worker].env[TORCHELASTIC_RUN_ID]", "set by gangrun", id="env-run-id"),
    pytest.param(worker(env=[{"name": "STEPS", "value": "9"}]), "spec.podTemplate.spec.containers[worker].env[STEPS]",
                 "is also in spec.env", id="env-also-in-spec-env"),
    pytest.param(worker(env=[{"name": "A", "value": 3}]), "spec.podTemplate.spec.containers[worker].env[A].value", "must be a string",
                 id="env-value-not-a-string"),
    pytest.param(worker(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
                 "spec.podTemplate.spec.containers[worker].env[A]", "is given twice", id="env-twice"),
    pytest.param(worker(ports=[{"name": "rendezvous", "containerPort": 1}]),
                 "spec.podTemplate.spec.containers[worker].ports[rendezvous]", "set by gangrun", id="rendezvous-port"),
    pytest.param(worker(ports=[{"name": "gangrun-report", "containerPort": 1}]),
                 "spec.podTemplate.spec.containers[worker].ports[gangrun-report]", "set by gangrun", id="report-port"),
    pytest.param(worker(volumeMounts=[{"name": "x", "mountPath": "/etc/gangrun"}]),
                 "spec.podTemplate.spec.containers[worker].volumeMounts[/etc/gangrun]", "set by gangrun", id="notice-mount"),
    pytest.param({"spec": {"restartPolicy": "Always"}}, "spec.podTemplate.spec.restartPolicy", "set by gangrun", id="restart-policy"),
    pytest.param({"spec": {"terminationGracePeriodSeconds": 5}}, "spec.podTemplate.spec.terminationGracePeriodSeconds",
                 "set by gangrun (spec.terminationGracePeriod)", id="grace-period"),
    pytest.param({"spec": {"subdomain": "x"}}, "spec.podTemplate.spec.subdomain", "set by gangrun", id="subdomain"),
    pytest.param({"spec": {"nodeName": "n1"}}, "spec.podTemplate.spec.nodeName", "use nodeSelector or affinity", id="node-name"),
    pytest.param({"spec": {"volumes": [{"name": "gangrun-notice", "emptyDir": {}}]}},
                 "spec.podTemplate.spec.volumes[gangrun-notice]", "set by gangrun", id="own-volume-name"),
    pytest.param({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}},
                 "spec.podTemplate.metadata.labels[kueue.x-k8s.io/queue-name]", "set by gangrun (spec.queue)", id="queue-label"),
    pytest.param({"metadata": {"labels": {"gangrun.dev/task": "x"}}}, "spec.podTemplate.metadata.labels[gangrun.dev/task]",
                 "set by gangrun", id="gangrun-label"),
    pytest.param({"metadata": {"annotations": {"gangrun.dev/stop-notice": "{}"}}},
                 "spec.podTemplate.metadata.annotations[gangrun.dev/stop-notice]", "set by gangrun", id="notice-annotation"),
    pytest.param({"metadata": {"labels": {"team": 3}}}, "spec.podTemplate.metadata.labels[team]", "must be a string", id="label-number"),
    pytest.param({"metadata": {"labels": {"team": "a b"}}}, "spec.podTemplate.metadata.labels[team]", "must be a label value",
                 id="label-value"),
    pytest.param({"metadata": {"name": "x"}}, "spec.podTemplate.metadata.name", "unknown field", id="metadata-name"),
    pytest.param({"spec": {"tolerationz": []}}, "spec.podTemplate.spec.tolerationz", "unknown field of a Kubernetes v1.36 PodSpec",
                 id="typo-in-pod-spec"),
    pytest.param(worker(volumeMount=[]), "spec.podTemplate.spec.containers[worker].volumeMount",
                 "unknown field of a Kubernetes v1.36 Container", id="typo-in-container"),
    pytest.param({"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}, "spec.podTemplate.spec.containers[a]", "is given twice",
                 id="duplicate-container"),
    pytest.param({"spec": {"initContainers": [{"name": "worker"}]}}, "spec.podTemplate.spec.initContainers[worker]",
                 "belongs in containers", id="worker-as-init-container"),
    pytest.param({"spec": {"containers": [{"image": "x"}]}}, "spec.podTemplate.spec.containers[0].name", "must be a DNS-1123 label",
                 id="container-without-name"),
    pytest.param({"spec": {"containers": {"name": "worker"}}}, "spec.podTemplate.spec.containers", "must be a list",
                 id="containers-not-a-list"),
    pytest.param({"spec": {"serviceAccountName": "Trainer!"}}, "spec.podTemplate.spec.serviceAccountName", "ServiceAccount name",
                 id="bad-service-account"),
    pytest.param({"kind": "Pod"}, "spec.podTemplate.kind", "unknown field", id="not-a-template"),
    pytest.param("containers: []", "spec.podTemplate", "must be a mapping", id="a-string"),
    pytest.param({"spec": {"containers": [{"name": f"c{i}"} for i in range(65)]}}, "spec.podTemplate.spec.containers",
                 "must have at most 64 entries", id="too-many-containers"),
])
def test_a_pod_template_that_sets_what_gangrun_owns_is_refused_naming_the_field(template: Any, field: str, says: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_manifest(manifest(template, env={"STEPS": "5"}))
    text = str(e.value)
    assert text.startswith(f"{field}: ") and says in text, text
    assert "\n" not in text


def test_dev_shm_belongs_to_gangrun_only_when_spec_shm_size_is_set() -> None:
    template = worker(volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}])
    template["spec"]["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    parse_manifest(manifest(template))  # the user's own /dev/shm
    with pytest.raises(SpecError, match=r"^spec\.podTemplate\.spec\.containers\[worker\]\.volumeMounts\[/dev/shm\]: set by gangrun \(spec\.shmSize\)"):
        parse_manifest(manifest(template, shmSize="1Gi"))


@pytest.mark.parametrize("field,value,says", [
    pytest.param("shmSize", "lots", "expected a quantity", id="shm-not-a-quantity"),
    pytest.param("shmSize", "10Ki", "at least 1Mi", id="shm-too-small"),
    pytest.param("gpuResource", "gpu", "extended resource name", id="gpu-resource-without-domain"),
    pytest.param("gpuResource", "kubernetes.io/gpu", "extended resource name", id="gpu-resource-kubernetes-domain"),
    pytest.param("failurePolicy", {"restartOnDisruption": "yes"}, "must be true or false", id="restart-on-disruption"),
])
def test_new_scalar_fields_are_checked_naming_the_field(field: str, value: Any, says: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_manifest(manifest(**{field: value}))
    assert says in str(e.value) and str(e.value).startswith("spec.")


def test_restart_on_disruption_is_on_unless_turned_off() -> None:
    assert parse_manifest(manifest()).policy().restart_on_disruption is True
    off = parse_manifest(manifest(failurePolicy={"restartOnDisruption": False}))
    assert off.failure_policy.restart_on_disruption is False and off.policy().restart_on_disruption is False
    assert parse_manifest(manifest(gpuResource="amd.com/gpu")).gpu_resource == "amd.com/gpu"


# -- merge ------------------------------------------------------------------------------------------

OWN_WORKER = {"name": "worker", "image": "train:1", "command": ["python", "-m", "gangrun.launch", "--", "x"],
              "env": [{"name": "GANGRUN_TASK", "value": "train"}], "ports": [{"name": "rendezvous", "containerPort": 29500}],
              "volumeMounts": [{"name": "gangrun-notice", "mountPath": "/etc/gangrun"}]}
OWN_POD = {"restartPolicy": "Never", "subdomain": "train-1", "terminationGracePeriodSeconds": 30}
OWN_VOLUMES = [{"name": "gangrun-notice", "downwardAPI": {"items": []}}]


def merged(template: dict[str, Any]) -> dict[str, Any]:
    return merge_pod_template(template, labels={"gangrun.dev/task": "train"}, annotations={}, pod=OWN_POD,
                              worker=OWN_WORKER, volumes=OWN_VOLUMES)


def test_merge_keeps_the_users_fields_and_adds_gangrun_s() -> None:
    out = merged(REAL)
    assert out["metadata"]["labels"] == {"team": "ml", "gangrun.dev/task": "train"}
    assert out["metadata"]["annotations"] == {"owner": "ada@example.com"}
    spec = out["spec"]
    assert [c["name"] for c in spec["containers"]] == ["worker", "log-shipper"]  # sidecars pass through
    assert spec["initContainers"] == REAL["spec"]["initContainers"]
    w = spec["containers"][0]
    assert w["command"] == OWN_WORKER["command"] and w["image"] == "train:1"
    assert w["envFrom"] == [{"secretRef": {"name": "s3-creds"}}] and w["securityContext"] == {"runAsUser": 1000}
    # gangrun's variables first, so the user's `$(GANGRUN_TASK)` references resolve.
    assert [e["name"] for e in w["env"]] == ["GANGRUN_TASK", "HF_HOME", "WANDB_API_KEY"]
    assert [m["mountPath"] for m in w["volumeMounts"]] == ["/ckpt", "/etc/gangrun"]
    assert [v["name"] for v in spec["volumes"]] == ["ckpt", "gangrun-notice"]
    for key in ("tolerations", "nodeSelector", "serviceAccountName", "imagePullSecrets", "affinity"):
        assert spec[key] == REAL["spec"][key], key
    assert {k: spec[k] for k in OWN_POD} == OWN_POD


def test_merge_of_an_empty_template_is_gangrun_s_pod() -> None:
    out = merged({})
    assert out["spec"]["containers"] == [{**OWN_WORKER, "env": OWN_WORKER["env"], "ports": OWN_WORKER["ports"]}]
    assert out["spec"]["volumes"] == OWN_VOLUMES and "annotations" not in out["metadata"]


@pytest.mark.parametrize("theirs,ours,keys,want", [
    pytest.param([{"name": "a", "v": 1}], [{"name": "a", "v": 2}], ("name",), [{"name": "a", "v": 2}], id="ours-wins-by-name"),
    pytest.param([{"name": "a"}, {"name": "b"}], [{"name": "c"}], ("name",), [{"name": "a"}, {"name": "b"}, {"name": "c"}],
                 id="disjoint-keeps-order"),
    pytest.param([{"name": "x", "containerPort": 29500}], [{"name": "rendezvous", "containerPort": 29500}],
                 ("name", "containerPort"), [{"name": "rendezvous", "containerPort": 29500}], id="any-key-collides"),
])
def test_lists_of_named_things_merge_by_name_with_gangrun_winning(theirs, ours, keys, want) -> None:
    assert merge_named(theirs, ours, *keys) == want


# -- local ------------------------------------------------------------------------------------------


def test_local_run_applies_the_worker_s_plain_env_and_lists_everything_else_once() -> None:
    assert worker_plain_env(REAL) == {"HF_HOME": "/ckpt/hf"}
    assert local_ignored(REAL) == [
        "spec.podTemplate.metadata.labels",
        "spec.podTemplate.metadata.annotations",
        "spec.podTemplate.spec.containers[worker].volumeMounts",
        "spec.podTemplate.spec.containers[worker].envFrom",
        "spec.podTemplate.spec.containers[worker].securityContext",
        "spec.podTemplate.spec.containers[worker].env[WANDB_API_KEY]",
        "spec.podTemplate.spec.containers[log-shipper]",
        "spec.podTemplate.spec.initContainers",
        "spec.podTemplate.spec.volumes",
        "spec.podTemplate.spec.tolerations",
        "spec.podTemplate.spec.nodeSelector",
        "spec.podTemplate.spec.serviceAccountName",
        "spec.podTemplate.spec.imagePullSecrets",
        "spec.podTemplate.spec.affinity",
    ]


def test_a_template_with_only_plain_env_loses_nothing_locally() -> None:
    template = worker(env=[{"name": "A", "value": "1"}])
    assert local_ignored(template) == [] and worker_plain_env(template) == {"A": "1"}


# -- fields that would break a gang or escape its accounting ---------------------------------------


def sidecar(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "worker"}, {"name": "log-shipper", "image": "x:1", **fields}]}}


NOTICE_AND_RUN = ["/etc/gangrun", "//etc/gangrun", "/etc/x/../gangrun", "/etc/./gangrun/", "/etc/gangrun/stop-notice.json",
                  "/var/run//gangrun", "/run/gangrun"]


@pytest.mark.parametrize("container,path", [
    *(("worker", p) for p in [*NOTICE_AND_RUN, "/dev/termination-log", "//dev/termination-log",
                              "/dev/../dev/termination-log"]),
    *(("log-shipper", p) for p in NOTICE_AND_RUN),  # a sidecar's own termination log is its own business
])
def test_render_refuses_a_mount_over_gangrun_paths_after_normalising(container: str, path: str) -> None:
    mount = {"name": "x", "mountPath": path}
    template = worker(volumeMounts=[mount]) if container == "worker" else sidecar(volumeMounts=[mount])
    with pytest.raises(SpecError) as e:
        parse_manifest(manifest(template))
    assert str(e.value).startswith(f"spec.podTemplate.spec.containers[{container}].volumeMounts[{path}]: set by gangrun")


def test_the_termination_log_is_the_worker_s_message_to_the_controller() -> None:
    with pytest.raises(SpecError, match=r"volumeMounts\[/dev/termination-log\]: set by gangrun \(it carries the worker's "
                                        r"newest checkpoint to the controller\)"):
        parse_manifest(manifest(worker(volumeMounts=[{"name": "x", "mountPath": "/dev/termination-log"}])))
    parse_manifest(manifest(sidecar(volumeMounts=[{"name": "x", "mountPath": "/dev/termination-log"}])))


@pytest.mark.parametrize("path", ["/etc", "/etc/gangrun-data", "/var/run", "/dev/termination-logs", "/ckpt"])
def test_a_mount_beside_or_above_gangrun_paths_passes(path: str) -> None:
    parse_manifest(manifest(worker(volumeMounts=[{"name": "x", "mountPath": path}])))


@pytest.mark.parametrize("template,field,says", [
    pytest.param({"metadata": {"labels": {"job-name": "x"}}}, "spec.podTemplate.metadata.labels[job-name]",
                 "set by gangrun (the Job controller's, as batch.kubernetes.io/job-name)", id="legacy-job-name"),
    pytest.param({"metadata": {"labels": {"controller-uid": "x"}}}, "spec.podTemplate.metadata.labels[controller-uid]",
                 "set by gangrun", id="legacy-controller-uid"),
    pytest.param({"metadata": {"labels": {"batch.kubernetes.io/job-name": "x"}}},
                 "spec.podTemplate.metadata.labels[batch.kubernetes.io/job-name]", "set by gangrun", id="prefixed-job-name"),
    pytest.param({"spec": {"overhead": {"cpu": "1"}}}, "spec.podTemplate.spec.overhead", "RuntimeClass", id="overhead"),
    pytest.param({"spec": {"priority": 1000}}, "spec.podTemplate.spec.priority", "spec.priorityClass", id="priority"),
    pytest.param({"spec": {"schedulingGates": [{"name": "wait"}]}}, "spec.podTemplate.spec.schedulingGates",
                 "holds the quota", id="scheduling-gates"),
    pytest.param({"spec": {"activeDeadlineSeconds": 60}}, "spec.podTemplate.spec.activeDeadlineSeconds",
                 "spec.maxRuntime", id="active-deadline"),
    pytest.param({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "g"}]}},
                 "spec.podTemplate.spec.resourceClaims", "dynamic resource claims", id="pod-resource-claims"),
    pytest.param(sidecar(resources={"limits": {"nvidia.com/gpu": "1"}}),
                 "spec.podTemplate.spec.containers[log-shipper].resources.limits[nvidia.com/gpu]",
                 "only the worker asks for GPUs", id="sidecar-gpu"),
    pytest.param({"spec": {"initContainers": [{"name": "warm", "resources": {"requests": {"amd.com/gpu": "1"}}}]}},
                 "spec.podTemplate.spec.initContainers[warm].resources.requests[amd.com/gpu]",
                 "only the worker asks for GPUs", id="init-container-gpu"),
    pytest.param(sidecar(resources={"claims": [{"name": "gpu"}]}),
                 "spec.podTemplate.spec.containers[log-shipper].resources.claims", "dynamic resource claims",
                 id="sidecar-resource-claim"),
    pytest.param(sidecar(resources=[]), "spec.podTemplate.spec.containers[log-shipper].resources", "must be a mapping",
                 id="sidecar-resources-not-a-mapping"),
    pytest.param({"spec": {"hostNetwork": True, "dnsPolicy": "ClusterFirst"}}, "spec.podTemplate.spec.dnsPolicy",
                 "must be ClusterFirstWithHostNet with hostNetwork", id="host-network-cluster-first"),
    pytest.param({"spec": {"hostNetwork": True, "dnsPolicy": "Default"}}, "spec.podTemplate.spec.dnsPolicy",
                 "rank 0's name resolves through the cluster DNS only", id="host-network-default-dns"),
    pytest.param({"spec": {"hostNetwork": "yes"}}, "spec.podTemplate.spec.hostNetwork", "must be true or false",
                 id="host-network-not-a-boolean"),
])
def test_a_pod_template_that_would_break_the_gang_or_escape_accounting_is_refused(template: Any, field: str,
                                                                                   says: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_manifest(manifest(template))
    text = str(e.value)
    assert text.startswith(f"{field}: ") and says in text, text
    assert "\n" not in text


def test_a_sidecar_may_ask_for_cpu_memory_storage_and_hugepages() -> None:
    requests = {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi", "hugepages-2Mi": "4Mi"}
    parse_manifest(manifest(sidecar(resources={"requests": requests, "limits": requests})))


def test_host_network_gets_the_dns_policy_that_resolves_rank_0() -> None:
    spec = parse_manifest(manifest({"spec": {"hostNetwork": True}}))
    assert merged(spec.pod_template)["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    given = parse_manifest(manifest({"spec": {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}}))
    assert merged(given.pod_template)["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "dnsPolicy" not in merged(parse_manifest(manifest({"spec": {"hostNetwork": False}})).pod_template)["spec"]
    own = parse_manifest(manifest({"spec": {"dnsPolicy": "Default"}}))  # without hostNetwork, the user's choice
    assert merged(own.pod_template)["spec"]["dnsPolicy"] == "Default"
