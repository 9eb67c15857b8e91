"""The JobSet of an attempt: the contract with JobSet, Kueue and the worker SDK (issue #5 item 2)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from gangrun._backends.kube import crd, render_jobset
from gangrun._backends.kube.render import NAME_MAX, jobset_name
from gangrun._core import jobset, kueue
from gangrun._errors import SpecError
from tests.harness.kube_builders import task_spec

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _env(js: dict) -> dict[str, dict]:
    container = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container["env"]}


def _job(js: dict) -> dict:
    return js["spec"]["replicatedJobs"][0]["template"]["spec"]


@pytest.mark.parametrize("task,attempt", [
    pytest.param("train", 1, id="short"),
    pytest.param("a" * 63, 1, id="longest-task-name"),
    pytest.param("a" * 36 + "-b" * 13, 12345, id="long-name-dash-at-cut"),
])
def test_jobset_name_is_a_dns_label_of_at_most_41_characters(task: str, attempt: int) -> None:
    name = jobset_name(task, attempt)
    assert len(name) <= NAME_MAX and DNS_1035.match(name)
    assert len(f"{name}-workers-0-99999") <= 63


def test_jobset_name_is_deterministic_and_distinct_per_attempt() -> None:
    assert jobset_name("train", 1) == jobset_name("train", 1) == "train-1"
    assert jobset_name("train", 1) != jobset_name("train", 2)
    long = "x" * 60
    assert jobset_name(long, 1) != jobset_name(long, 2)
    assert jobset_name(long + "a", 1) != jobset_name(long + "b", 1)  # the hash separates truncated names


def test_render_is_deterministic() -> None:
    spec = task_spec()
    assert render_jobset(spec, attempt=3, owner_uid="u") == render_jobset(spec, attempt=3, owner_uid="u")


def test_jobset_is_created_suspended_with_kueue_and_gangrun_labels() -> None:
    js = render_jobset(task_spec(queue="team-a", priorityClass="high"), attempt=2)
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and js["kind"] == "JobSet"
    assert js["spec"]["suspend"] is True
    labels = js["metadata"]["labels"]
    assert labels[kueue.QUEUE_NAME_LABEL] == "team-a"
    assert labels[kueue.PRIORITY_CLASS_LABEL] == "high"
    assert labels[crd.TASK_LABEL] == "train" and labels[crd.ATTEMPT_LABEL] == "2"
    pod_labels = _job(js)["template"]["metadata"]["labels"]
    assert pod_labels[crd.TASK_LABEL] == "train" and pod_labels[crd.ATTEMPT_LABEL] == "2"


def test_no_priority_class_label_when_the_spec_has_none() -> None:
    assert kueue.PRIORITY_CLASS_LABEL not in render_jobset(task_spec())["metadata"]["labels"]


def test_every_field_the_jobset_webhook_would_default_is_explicit() -> None:
    js = render_jobset(task_spec(failurePolicy={"maxRestarts": 3}))
    spec = js["spec"]
    assert spec["successPolicy"]["operator"] == "All"
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert spec["network"] == {"enableDNSHostnames": True, "subdomain": js["metadata"]["name"],
                               "publishNotReadyAddresses": True}
    assert spec["failurePolicy"]["maxRestarts"] == 3 and spec["failurePolicy"]["restartStrategy"] == "Recreate"
    rj = spec["replicatedJobs"][0]
    assert rj["name"] == "workers" and rj["replicas"] == 1 and rj["groupName"] == "default"
    job = _job(js)
    assert job["completionMode"] == "Indexed"
    assert job["template"]["spec"]["restartPolicy"] == "Never"


def test_failure_policy_is_always_set_even_with_no_restarts() -> None:
    assert render_jobset(task_spec())["spec"]["failurePolicy"]["maxRestarts"] == 0


def test_one_indexed_job_of_nodes_pods_that_never_retries_or_overlaps() -> None:
    job = _job(render_jobset(task_spec(nodes=4)))
    assert job["parallelism"] == job["completions"] == 4
    assert job["backoffLimit"] == 0
    assert job["podReplacementPolicy"] == "Failed"


def test_worker_env_follows_the_interface() -> None:
    spec = task_spec(nodes=3, nprocPerNode=2, checkpoint={"uri": "s3://b/ckpt/"}, env={"FOO": "bar"})
    js = render_jobset(spec, attempt=2)
    env = _env(js)
    name = js["metadata"]["name"]
    assert env["GANGRUN_TASK"]["value"] == "train" and env["GANGRUN_ATTEMPT"]["value"] == "2"
    assert env["JOBSET_RESTART_ATTEMPT"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        f"metadata.annotations['{jobset.RESTART_ATTEMPT_KEY}']"
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        f"metadata.annotations['{jobset.JOB_COMPLETION_INDEX_KEY}']"
    assert env["MASTER_ADDR"]["value"] == f"{name}-workers-0-0.{name}"
    assert env["MASTER_PORT"]["value"] == "29500"
    assert (env["NNODES"]["value"], env["NPROC_PER_NODE"]["value"], env["WORLD_SIZE"]["value"]) == ("3", "2", "6")
    assert env["GANGRUN_CHECKPOINT_PATH"]["value"] == "s3://b/ckpt/train/<uid>/attempt-2"
    assert env["GANGRUN_PREV_CHECKPOINT_PATH"]["value"] == "s3://b/ckpt/train/<uid>/attempt-1"
    assert "GANGRUN_RESUME_FROM" not in env
    assert env["FOO"]["value"] == "bar"


def test_a_task_never_loads_a_checkpoint_it_did_not_write_kube_render() -> None:
    """The checkpoint root is keyed by the ClusteredTask's metadata.uid: a task deleted and re-created
    under the same name (a new uid) saves and loads under a root of its own."""
    spec = task_spec(checkpoint={"uri": "s3://b/ckpt"})
    first, second = (_env(render_jobset(spec, attempt=2, owner_uid=uid)) for uid in ("uid-1", "uid-2"))
    assert first["GANGRUN_CHECKPOINT_PATH"]["value"] == "s3://b/ckpt/train/uid-1/attempt-2"
    assert first["GANGRUN_PREV_CHECKPOINT_PATH"]["value"] == "s3://b/ckpt/train/uid-1/attempt-1"
    assert second["GANGRUN_CHECKPOINT_PATH"]["value"] == "s3://b/ckpt/train/uid-2/attempt-2"
    default = _env(render_jobset(task_spec(), owner_uid="uid-3"))["GANGRUN_CHECKPOINT_PATH"]["value"]
    assert default == "file:///var/lib/gangrun/checkpoints/train/uid-3/attempt-1"


@pytest.mark.parametrize(("resume_from", "want"), [
    ("train", "s3://b/ckpt/train"), ("s3://other/ckpt/x/attempt-2", "s3://other/ckpt/x/attempt-2")])
def test_resume_from_reaches_the_workers_as_a_uri(resume_from: str, want: str) -> None:
    spec = task_spec("next", checkpoint={"uri": "s3://b/ckpt", "resumeFrom": resume_from})
    env = _env(render_jobset(spec, attempt=1, owner_uid="u"))
    assert env["GANGRUN_RESUME_FROM"]["value"] == want
    assert env["GANGRUN_CHECKPOINT_PATH"]["value"] == "s3://b/ckpt/next/u/attempt-1"


def test_first_attempt_has_no_previous_checkpoint() -> None:
    assert _env(render_jobset(task_spec(), attempt=1))["GANGRUN_PREV_CHECKPOINT_PATH"]["value"] == ""


def test_termination_grace_period_comes_from_the_spec() -> None:
    js = render_jobset(task_spec(terminationGracePeriod="2m"))
    assert _job(js)["template"]["spec"]["terminationGracePeriodSeconds"] == 120
    assert _env(js)["GANGRUN_GRACE_PERIOD"]["value"] == "120"


def test_owner_reference_to_the_task_only_when_its_uid_is_known() -> None:
    assert "ownerReferences" not in render_jobset(task_spec())["metadata"]
    ref = render_jobset(task_spec(), owner_uid="abc")["metadata"]["ownerReferences"][0]
    assert ref == {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "name": "train", "uid": "abc",
                   "controller": True, "blockOwnerDeletion": True}


def test_command_runs_under_the_launcher_and_resources_are_per_node() -> None:
    js = render_jobset(task_spec(resources={"cpu": "500m", "memory": "2Gi", "gpu": 1}))
    c = _job(js)["template"]["spec"]["containers"][0]
    assert c["command"] == ["python", "-m", "gangrun.launch", "--", "python", "train.py"]
    assert c["resources"]["requests"] == {"cpu": "500m", "memory": str(2 * 2**30), "nvidia.com/gpu": "1"}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_render_refuses_a_spec_without_image_naming_the_field() -> None:
    with pytest.raises(SpecError, match=r"^spec\.image"):
        render_jobset(task_spec(image=""))


def _values(js: dict) -> dict[str, str]:
    return {k: e["value"] for k, e in _env(js).items() if "value" in e}


def test_an_elastic_gang_renders_at_the_size_it_was_given_and_its_workers_see_that_size() -> None:
    spec = task_spec(nodes=4, minNodes=2, nprocPerNode=2)
    full, small = render_jobset(spec), render_jobset(spec, nodes=2, generation=1)
    assert (_job(full)["parallelism"], _values(full)["NNODES"], _values(full)["WORLD_SIZE"]) == (4, "4", "8")
    assert (_job(small)["parallelism"], _job(small)["completions"]) == (2, 2)
    assert (_values(small)["NNODES"], _values(small)["WORLD_SIZE"]) == ("2", "4")
    assert small["metadata"]["name"] == "train-1-r1" and _values(small)["GANGRUN_GANG"] == "train-1-r1"
    assert _values(small)["GANGRUN_CHECKPOINT_PATH"] == _values(full)["GANGRUN_CHECKPOINT_PATH"]  # one attempt, one path


@pytest.mark.parametrize("nodes", [1, 5])
def test_an_elastic_gang_is_never_rendered_outside_min_nodes_to_nodes(nodes: int) -> None:
    with pytest.raises(SpecError, match=r"^nodes: must be between spec\.minNodes \(2\) and spec\.nodes \(4\)"):
        render_jobset(task_spec(nodes=4, minNodes=2), nodes=nodes)


def test_a_replacement_jobset_keeps_the_restarts_its_predecessors_used() -> None:
    js = render_jobset(task_spec(failurePolicy={"maxRestarts": 3}), generation=2, restarts_used=2)
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 1


def test_the_names_of_an_attempt_s_replacement_jobsets_are_distinct_and_bounded() -> None:
    assert [jobset_name("train", 1, g) for g in range(3)] == ["train-1", "train-1-r1", "train-1-r2"]
    long = "t" * 60
    names = {jobset_name(long, 1, g) for g in range(50)} | {jobset_name(long, a) for a in range(2, 51)}
    assert len(names) == 99 and all(len(n) <= NAME_MAX for n in names)


def test_render_refuses_attempt_zero() -> None:
    with pytest.raises(SpecError):
        render_jobset(task_spec(), attempt=0)


def test_termination_grace_of_zero_is_allowed() -> None:
    spec = task_spec(terminationGracePeriod="0s")
    assert spec.termination_grace == timedelta(0)
    assert _job(render_jobset(spec))["template"]["spec"]["terminationGracePeriodSeconds"] == 0


# -- issue 9: real training jobs -------------------------------------------------------------------

REAL_TEMPLATE = {
    "metadata": {"labels": {"team": "ml"}, "annotations": {"owner": "ada"}},
    "spec": {
        "containers": [{"name": "worker", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                        "envFrom": [{"secretRef": {"name": "s3-creds"}}],
                        "env": [{"name": "AWS_REGION", "value": "eu-west-1"}]},
                       {"name": "sidecar", "image": "busybox"}],
        "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "gpu"},
        "serviceAccountName": "trainer",
        "imagePullSecrets": [{"name": "regcred"}],
    },
}


def _pod(js: dict) -> dict:
    return _job(js)["template"]


def test_a_pod_template_reaches_every_worker_pod_merged_with_gangrun_s_own_fields() -> None:
    js = render_jobset(task_spec(podTemplate=REAL_TEMPLATE))
    pod = _pod(js)
    assert pod["metadata"]["labels"]["team"] == "ml" and pod["metadata"]["labels"][crd.TASK_LABEL] == "train"
    assert pod["metadata"]["annotations"] == {"owner": "ada"}
    spec = pod["spec"]
    for key in ("nodeSelector", "serviceAccountName", "imagePullSecrets"):
        assert spec[key] == REAL_TEMPLATE["spec"][key], key
    assert spec["tolerations"][:1] == REAL_TEMPLATE["spec"]["tolerations"]  # then the lost-node ones (below)
    assert [v["name"] for v in spec["volumes"]] == ["ckpt", "gangrun-notice", "gangrun-run", "gangrun-tmp",
                                                    "gangrun-checkpoints"]  # the last two: a read-only root
    worker, sidecar = spec["containers"]
    assert sidecar == {"name": "sidecar", "image": "busybox"}
    assert worker["command"][:4] == ["python", "-m", "gangrun.launch", "--"]
    assert worker["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert worker["env"][-1] == {"name": "AWS_REGION", "value": "eu-west-1"}  # after the contract: $(VAR) works
    assert [m["mountPath"] for m in worker["volumeMounts"]] == ["/ckpt", "/etc/gangrun", "/var/run/gangrun", "/tmp",
                                                                "/var/lib/gangrun/checkpoints"]
    assert spec["restartPolicy"] == "Never" and spec["subdomain"] == js["metadata"]["name"]


def test_shm_size_mounts_a_memory_backed_dev_shm() -> None:
    pod = _pod(render_jobset(task_spec(shmSize="8Gi")))["spec"]
    (shm,) = [v for v in pod["volumes"] if v["name"] == "gangrun-shm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    (odd,) = [v for v in _pod(render_jobset(task_spec(shmSize="1536Mi")))["spec"]["volumes"] if v["name"] == "gangrun-shm"]
    assert odd["emptyDir"]["sizeLimit"] == "1536Mi"
    assert {"name": "gangrun-shm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]
    assert "gangrun-shm" not in {v["name"] for v in _pod(render_jobset(task_spec()))["spec"]["volumes"]}


def test_gpus_are_requested_as_nvidia_gpu_or_the_named_resource() -> None:
    for spec, resource in ((task_spec(resources={"gpu": 8}), "nvidia.com/gpu"),
                           (task_spec(resources={"gpu": 2}, gpuResource="amd.com/gpu"), "amd.com/gpu")):
        res = _pod(render_jobset(spec))["spec"]["containers"][0]["resources"]
        assert res["requests"][resource] == res["limits"][resource] == str(spec.resources.gpu)


def test_a_disrupted_pod_fails_its_job_and_jobset_restarts_without_counting_it() -> None:
    js = render_jobset(task_spec(failurePolicy={"maxRestarts": 2}))
    assert _job(js)["podFailurePolicy"] == {"rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
    assert js["spec"]["failurePolicy"]["rules"] == [{
        "name": "restartOnDisruption", "action": "RestartJobSetAndIgnoreMaxRestarts",
        "onJobFailureReasons": ["PodFailurePolicy"], "targetReplicatedJobs": ["workers"]}]
    assert _job(js)["template"]["spec"]["restartPolicy"] == "Never"  # a podFailurePolicy requires it


def test_without_restart_on_disruption_the_jobset_counts_every_failure() -> None:
    js = render_jobset(task_spec(failurePolicy={"restartOnDisruption": False}))
    assert "podFailurePolicy" not in _job(js) and "rules" not in js["spec"]["failurePolicy"]


def test_the_stop_notice_is_a_downward_api_file_of_the_pod_annotation_which_the_launcher_merges() -> None:
    """The annotation's file is the launcher's to read; the worker reads the file the launcher keeps in
    the writable run folder, with the controller's pushes (`gangrun._worker.pod_notice`)."""
    pod = _pod(render_jobset(task_spec()))["spec"]
    (notice,) = [v for v in pod["volumes"] if v["name"] == "gangrun-notice"]
    assert notice["downwardAPI"]["items"] == [{"path": "stop-notice.json", "fieldRef": {
        "fieldPath": f"metadata.annotations['{crd.STOP_NOTICE_ANNOTATION}']"}}]
    env = _env(render_jobset(task_spec()))
    assert env["GANGRUN_STOP_ANNOTATION_FILE"]["value"] == "/etc/gangrun/stop-notice.json"
    assert env["GANGRUN_STOP_FILE"]["value"] == "/var/run/gangrun/stop-notice.json"
    assert env["GANGRUN_EVENTS_FILE"]["value"] == "/var/run/gangrun/events.jsonl"
    worker = pod["containers"][0]
    assert worker["terminationMessagePath"] == env["GANGRUN_TERMINATION_LOG"]["value"] == "/dev/termination-log"
    assert worker["terminationMessagePolicy"] == "File"


def test_the_worker_serves_its_live_checkpoint_report_on_a_declared_port() -> None:
    worker = _pod(render_jobset(task_spec()))["spec"]["containers"][0]
    (port,) = [p for p in worker["ports"] if p["name"] == "gangrun-report"]
    assert str(port["containerPort"]) == _env(render_jobset(task_spec()))["GANGRUN_REPORT_PORT"]["value"]


@pytest.mark.parametrize("nproc", [1, 3])
def test_a_pod_sees_the_same_contract_as_a_local_worker(nproc: int) -> None:
    """render's literal values + the pod's own (completion index, restart attempt) through the launcher
    equal worker_env's for the same inputs: one set of rules for both backends."""
    from gangrun._core import worker_env as wenv
    from gangrun._worker import launch

    spec = task_spec(nodes=4, nprocPerNode=nproc, checkpoint={"uri": "s3://b/c"})
    js = render_jobset(spec, attempt=3, owner_uid="u1")
    pod_env = {}
    for e in _env(js).values():
        if "value" in e:
            pod_env[e["name"]] = e["value"]
    pod_env.update({"NODE_RANK": "2", "JOBSET_RESTART_ATTEMPT": "1", "POD_NAMESPACE": "ml"})  # the downward API
    seen = launch.worker_environment(pod_env)
    name = js["metadata"]["name"]
    want = wenv.worker_env(spec, attempt=3, gang=name, node_rank=2, local_rank=0, restart_attempt=1,
                           master_addr=f"{name}-workers-0-0.{name}", master_port=29500,
                           checkpoint_path="s3://b/c/train/u1/attempt-3", prev_checkpoint_path="s3://b/c/train/u1/attempt-2",
                           stop_file="/var/run/gangrun/stop-notice.json", events_file="/var/run/gangrun/events.jsonl")
    if nproc > 1:  # torchrun sets the per-process two, by the same rule
        want = {k: v for k, v in want.items() if k not in ("RANK", "LOCAL_RANK")}
    assert {k: seen[k] for k in want} == want


# -- a lost node -------------------------------------------------------------------------------------

LOST = [{"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
        for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]


def test_workers_tolerate_a_lost_node_for_30_seconds_not_the_api_server_s_300() -> None:
    """A worker on a node that stopped answering is marked for deletion (DisruptionTarget) 30 s after the
    node is declared lost, so the gang restarts as for a node disruption instead of waiting five minutes."""
    assert _pod(render_jobset(task_spec()))["spec"]["tolerations"] == LOST
    pod = _pod(render_jobset(task_spec(podTemplate=REAL_TEMPLATE)))
    assert pod["spec"]["tolerations"] == [*REAL_TEMPLATE["spec"]["tolerations"], *LOST]


def test_a_pod_template_that_tolerates_a_lost_node_itself_keeps_its_own_toleration() -> None:
    mine = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 600}]
    pod = _pod(render_jobset(task_spec(podTemplate={"spec": {"tolerations": mine}})))
    assert pod["spec"]["tolerations"] == [*mine, LOST[0]]
