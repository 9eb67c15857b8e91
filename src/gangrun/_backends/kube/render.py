"""The JobSet of one attempt: a pure function of the spec and the attempt number.

`render_jobset(spec, attempt=N)` is what `gangrun render FILE --attempt N` prints and what the
controller creates. Rules that shape it:

* the name is deterministic per (task, attempt) and at most 41 characters, so that the longest pod
  hostname `<jobset>-workers-0-<index>` stays a DNS label; a hash keeps truncated names unique;
* `spec.suspend: true` at creation, so a gang never starts before Kueue admits it even when Kueue's
  webhook is not installed;
* every field JobSet's defaulting webhook would set is written out, so the object is the same with or
  without the webhook and the JobSet controller never dereferences a nil;
* a failurePolicy is always present (one failed Job must not fail the whole JobSet during an
  eviction window, jobset#1117), and `podReplacementPolicy: Failed` keeps a readmitted gang from
  overlapping the old one while it still checkpoints;
* with `failurePolicy.restartOnDisruption` (the default) a pod with the DisruptionTarget condition
  fails its Job by the Job's podFailurePolicy, and JobSet restarts the gang for it without counting
  the restart (RestartJobSetAndIgnoreMaxRestarts);
* with `failurePolicy.restartStrategy: InPlace`, a pod deleted under a running gang is replaced alone:
  its launcher exits `LOST_EXIT`, which the Job's podFailurePolicy ignores (per index, so that the
  replacement pod carries the count and its launcher waits for the gang's round), and the controller
  restarts the gang in place around it (`in_place.py`);
* `spec.podTemplate` is merged into the pod template (`gangrun._core.pod_merge`), gangrun's own
  fields winning; gangrun adds the stop-notice file (a downward-API projection of the pod annotation
  the controller writes before it stops a gang), a writable run directory and, for `spec.shmSize`,
  a memory-backed /dev/shm;
* workers tolerate a lost node (`node.kubernetes.io/unreachable`, `not-ready`) for 30 s, not the
  API server's default 300 s, unless the podTemplate tolerates those keys itself (`lost_node.py`).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from decimal import Decimal
from typing import Any

from gangrun._backends.kube import crd, hardening, lost_node
from gangrun._core import checkpoint_root as ckroot
from gangrun._core import jobset, kueue, pod_merge, pod_template
from gangrun._core import worker_env as wenv
from gangrun._core.spec import IN_PLACE, TaskSpec
from gangrun._errors import SpecError

NAME_MAX = 41  # 63 - len("-workers-0-99999-abcde"), as Flyte bounds it
REPLICATED_JOB = "workers"
CONTAINER = pod_template.WORKER
MASTER_PORT = wenv.DEFAULT_MASTER_PORT
# How long a failed worker's launcher waits for the controller's order to restart in place before it ends its
# pod (and JobSet recreates the gang): well under Kueue's waitForPodsReady recoveryTimeout, which evicts a
# gang whose pods stay NotReady, and long enough for a controller's restart or a leader's handover.
IN_PLACE_WAIT = timedelta(seconds=30)
REPORT_PORT = 29510  # `gangrun.launch` serves the worker's newest checkpoint here (`gangrun._worker.live_report`)
NOTICE_VOLUME, RUN_VOLUME, SHM_VOLUME = "gangrun-notice", "gangrun-run", "gangrun-shm"
STOP_NOTICE_FILE = "stop-notice.json"  # the SDK reads GANGRUN_STOP_FILE when SIGTERM comes
EVENTS_FILE = "events.jsonl"  # the SDK appends a line per committed checkpoint
TERMINATION_LOG = pod_template.TERMINATION_LOG  # the launcher leaves the newest checkpoint there for the controller
DEFAULT_CHECKPOINT_ROOT = "file:///var/lib/gangrun/checkpoints"  # mount shared storage here, or set checkpoint.uri
LAUNCHER = ("python", "-m", "gangrun.launch", "--")


def jobset_name(task: str, attempt: int, generation: int = 0) -> str:
    """`<task>-<attempt>`, or a truncated task name plus a hash when that exceeds 41 characters.

    `generation` > 0: the JobSet that replaced an elastic gang's earlier one inside the same attempt (a
    resize, `elastic.py`), `<task>-<attempt>-r<generation>`; no name of another task or attempt ends in
    `-r<digits>`, so these never collide with them."""
    tail = f"-r{generation}" if generation else ""
    name = f"{task}-{attempt}{tail}"
    if len(name) <= NAME_MAX:
        return name
    digest = hashlib.sha256(f"{task}\n{attempt}{tail}".encode()).hexdigest()[:6]
    suffix = f"-{digest}-{attempt}{tail}"
    return task[: NAME_MAX - len(suffix)].rstrip("-") + suffix


def rank0_host(name: str) -> str:
    """The rank-0 pod's DNS name inside the namespace: `<jobset>-workers-0-0.<jobset>`."""
    return f"{name}-{REPLICATED_JOB}-0-0.{name}"


UID_PLACEHOLDER = "<uid>"  # `gangrun render` without a cluster: the task's metadata.uid goes there


def checkpoint_root(spec: TaskSpec, uid: str | None) -> str:
    """`<uri>/<task>/<metadata.uid>`: keyed by the ClusteredTask's identity, so that a task deleted and
    re-created under the same name starts clean (`gangrun._core.checkpoint_root`)."""
    return ckroot.task_root(_base(spec), spec.name, uid or UID_PLACEHOLDER)


def checkpoint_path(spec: TaskSpec, attempt: int, uid: str | None = None) -> str:
    return ckroot.attempt_path(checkpoint_root(spec, uid), attempt)


def resume_uri(spec: TaskSpec) -> str:
    """GANGRUN_RESUME_FROM of the task's workers: spec.checkpoint.resumeFrom as a URI ("" without it)."""
    return ckroot.resume_source(spec.resume_from, _base(spec))


def _base(spec: TaskSpec) -> str:
    return spec.checkpoint_uri or DEFAULT_CHECKPOINT_ROOT


def check_renderable(spec: TaskSpec) -> None:
    """Raise SpecError, naming the field, for what a valid manifest may hold but no JobSet can carry."""
    if not spec.image:
        raise SpecError("spec.image", "is required on the kubernetes backend: an image with gangrun installed")
    if len(spec.priority_class) > crd.LABEL_VALUE_MAX:
        raise SpecError("spec.priorityClass", f"must be at most {crd.LABEL_VALUE_MAX} characters on the kubernetes "
                        "backend: it is a label of the JobSet")


def render_jobset(spec: TaskSpec, *, attempt: int = 1, owner_uid: str | None = None, nodes: int | None = None,
                  generation: int = 0, restarts_used: int = 0) -> dict[str, Any]:
    """The JobSet that attempt `attempt` of `spec` creates. Pure: no cluster, no clock.

    An elastic gang's JobSet may run on `nodes` < spec.nodes (its workers' NNODES and WORLD_SIZE say so);
    `generation` numbers the JobSets that replace one another inside an attempt when it is resized, and
    `restarts_used` is what the earlier ones already used of failurePolicy.maxRestarts."""
    if attempt < 1:
        raise SpecError("attempt", f"must be >= 1, got {attempt}")
    check_renderable(spec)
    if nodes is not None:
        if not spec.least_nodes <= nodes <= spec.nodes:
            raise SpecError("nodes", f"must be between spec.minNodes ({spec.least_nodes}) and spec.nodes "
                                     f"({spec.nodes}), got {nodes}")
        spec = spec.at_size(nodes)
    name = jobset_name(spec.name, attempt, generation)
    own = {crd.TASK_LABEL: spec.name, crd.ATTEMPT_LABEL: str(attempt)}
    if owner_uid:
        own[crd.TASK_UID_LABEL] = owner_uid
    labels = {kueue.QUEUE_NAME_LABEL: spec.queue, **own}
    if spec.priority_class:
        labels[kueue.PRIORITY_CLASS_LABEL] = spec.priority_class
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if spec.namespace:
        metadata["namespace"] = spec.namespace
    if owner_uid:
        metadata["ownerReferences"] = [{"apiVersion": crd.API_VERSION, "kind": crd.KIND, "name": spec.name,
                                        "uid": owner_uid, "controller": True, "blockOwnerDeletion": True}]
    pod = {
        "restartPolicy": "Never",  # the Job's backoffLimit 0 + JobSet's failurePolicy own restarts
        "subdomain": name,
        "terminationGracePeriodSeconds": int(spec.termination_grace.total_seconds()),
    }
    template = pod_merge.merge_pod_template(spec.pod_template, labels=own, annotations={}, pod=pod,
                                               worker=_container(spec, name, attempt, owner_uid),
                                               volumes=_volumes(spec))
    template = hardening.harden(template, writable=_writable(spec))
    template["spec"]["tolerations"] = lost_node.with_lost_node_tolerations(template["spec"].get("tolerations"))
    job: dict[str, Any] = {
        "parallelism": spec.nodes,
        "completions": spec.nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "template": template,
    }
    rules: list[dict[str, Any]] = []
    failure_policy: dict[str, Any] = {"maxRestarts": max(spec.failure_policy.max_restarts - restarts_used, 0),
                                      "restartStrategy": jobset.RESTART_STRATEGY_RECREATE}
    if spec.failure_policy.restart_on_disruption:
        # A pod with DisruptionTarget fails its Job with reason PodFailurePolicy, which JobSet restarts
        # without counting it toward maxRestarts; the engine bounds such restarts in a row.
        rules.append({"action": "FailJob", "onPodConditions": [{"type": jobset.DISRUPTION_TARGET, "status": "True"}]})
        failure_policy["rules"] = [{"name": jobset.DISRUPTION_RULE, "action": jobset.RESTART_IGNORING_MAX_RESTARTS,
                                    "onJobFailureReasons": [jobset.JOB_REASON_POD_FAILURE_POLICY],
                                    "targetReplicatedJobs": [REPLICATED_JOB]}]
    if spec.failure_policy.restart_strategy == IN_PLACE:
        # A pod deleted under a running gang (its launcher exits LOST_EXIT) is replaced alone, and the gang
        # restarts in place around it. Per index, so that the replacement carries the count of such losses
        # (its launcher then waits for the round to join); any other failure still fails the Job at once.
        del job["backoffLimit"]
        job.update(backoffLimitPerIndex=0, maxFailedIndexes=0)
        rules.append({"action": "Ignore", "onExitCodes": {"containerName": CONTAINER, "operator": "In",
                                                          "values": [wenv.LOST_EXIT]}})
    if rules:
        job["podFailurePolicy"] = {"rules": rules}
    return {
        "apiVersion": jobset.API_VERSION,
        "kind": jobset.KIND,
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": jobset.SUCCESS_POLICY_ALL, "targetReplicatedJobs": [REPLICATED_JOB]},
            "startupPolicy": {"startupPolicyOrder": jobset.STARTUP_ANY_ORDER},
            "failurePolicy": failure_policy,
            "replicatedJobs": [{
                "name": REPLICATED_JOB,
                "groupName": jobset.DEFAULT_GROUP_NAME,
                "replicas": 1,
                "template": {"metadata": {"labels": dict(own)}, "spec": job},
            }],
        },
    }


def _volumes(spec: TaskSpec) -> list[dict[str, Any]]:
    """gangrun's own volumes: the stop notice (the pod's annotation as a file), a writable run
    directory, and /dev/shm when spec.shmSize asks for one."""
    field = f"metadata.annotations['{crd.STOP_NOTICE_ANNOTATION}']"
    item = {"path": STOP_NOTICE_FILE, "fieldRef": {"fieldPath": field}}
    notice = {"name": NOTICE_VOLUME, "downwardAPI": {"items": [item]}}
    volumes = [notice, {"name": RUN_VOLUME, "emptyDir": {}}]
    if spec.shm_size is not None:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": _bytes(spec.shm_size)}})
    return volumes


def _writable(spec: TaskSpec) -> dict[str, str]:
    """What a worker writes besides gangrun's own volumes, each an emptyDir under a read-only root
    filesystem (`hardening.py`): /tmp, and a `file://` checkpoint root no volume of the user's holds."""
    out = {hardening.TMP_VOLUME: hardening.TMP}
    if (ckpt := hardening.local_dir(_base(spec))) is not None:
        out[hardening.CHECKPOINT_VOLUME] = ckpt
    return out


def _mounts(spec: TaskSpec) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": NOTICE_VOLUME, "mountPath": pod_template.NOTICE_DIR, "readOnly": True},
                                    {"name": RUN_VOLUME, "mountPath": pod_template.RUN_DIR}]
    if spec.shm_size is not None:
        mounts.append({"name": SHM_VOLUME, "mountPath": pod_template.SHM_PATH})
    return mounts


def _container(spec: TaskSpec, name: str, attempt: int, uid: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "command": [*LAUNCHER, *spec.command],
        "env": worker_env(spec, name, attempt, uid),
        "resources": _resources(spec),
        "ports": [{"name": pod_template.OWN_PORT_NAME, "containerPort": MASTER_PORT, "protocol": "TCP"},
                  {"name": pod_template.REPORT_PORT_NAME, "containerPort": REPORT_PORT, "protocol": "TCP"}],
        "volumeMounts": _mounts(spec),
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
    }
    if spec.working_dir.startswith("/"):  # "." means the image's own working directory
        container["workingDir"] = spec.working_dir
    if spec.failure_policy.restart_strategy == IN_PLACE:
        # Ready=False while a failed worker waits for the controller's order to restart the gang in place
        container["readinessProbe"] = {"httpGet": {"path": wenv.READY_PATH, "port": pod_template.REPORT_PORT_NAME},
                                       "periodSeconds": 1, "failureThreshold": 1, "successThreshold": 1,
                                       "timeoutSeconds": 1}
    return container


def worker_env(spec: TaskSpec, name: str, attempt: int, uid: str | None = None) -> list[dict[str, Any]]:
    """The worker environment contract (gangrun._core.worker_env) as a container's env.

    The per-process part (RANK, LOCAL_RANK, GROUP_RANK, TORCHELASTIC_RUN_ID) is derived in the pod by
    `gangrun.launch`, from NODE_RANK and JOBSET_RESTART_ATTEMPT, which only the pod knows.
    """
    def value(k: str, v: object) -> dict[str, Any]:
        return {"name": k, "value": str(v)}

    def field(k: str, path: str) -> dict[str, Any]:
        return {"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    gang = wenv.gang_env(spec, attempt=attempt, gang=name, master_addr=rank0_host(name), master_port=MASTER_PORT,
                         checkpoint_path=checkpoint_path(spec, attempt, uid),
                         prev_checkpoint_path=checkpoint_path(spec, attempt - 1, uid),
                         stop_file=f"{pod_template.RUN_DIR}/{STOP_NOTICE_FILE}",
                         events_file=f"{pod_template.RUN_DIR}/{EVENTS_FILE}",
                         resume_from=resume_uri(spec))
    env = [value(k, v) for k, v in gang.items()]
    env += [
        field(wenv.RESTART_ATTEMPT, jobset.RESTART_ATTEMPT_FIELD_PATH),
        # The Job controller appends JOB_COMPLETION_INDEX after our variables, so `$(...)` cannot
        # reference it; the same index is on the pod's annotation.
        field(wenv.NODE_RANK, jobset.JOB_COMPLETION_INDEX_FIELD_PATH),
        field(wenv.POD_NAMESPACE, "metadata.namespace"),
        value(wenv.TERMINATION_LOG, TERMINATION_LOG),
        value(wenv.REPORT_PORT, REPORT_PORT),
        value(wenv.STOP_ANNOTATION_FILE, f"{pod_template.NOTICE_DIR}/{STOP_NOTICE_FILE}"),
    ]
    if spec.failure_policy.restart_strategy == IN_PLACE:
        env += [value(wenv.IN_PLACE_WAIT, f"{IN_PLACE_WAIT.total_seconds():g}"),
                field(wenv.REPLACED, jobset.JOB_INDEX_IGNORED_FAILURE_COUNT_FIELD_PATH)]
    env += [value(k, v) for k, v in sorted(spec.env.items())]
    return env


def _resources(spec: TaskSpec) -> dict[str, Any]:
    r = spec.resources
    requests = {"cpu": _quantity(r.cpu), "memory": _quantity(r.memory)}
    limits = {"memory": _quantity(r.memory)}
    if r.gpu:
        requests[spec.gpu_resource] = limits[spec.gpu_resource] = str(r.gpu)
    return {"requests": requests, "limits": limits}


def _bytes(v: Decimal) -> str:
    """A byte count as people write it when it is a whole number of a binary unit (8Gi), else exactly."""
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if v >= unit and v % unit == 0:
            return f"{int(v // unit)}{suffix}"
    return _quantity(v)


def _quantity(v: Decimal) -> str:
    """A Kubernetes quantity: whole numbers plain, fractions of a core in millis."""
    if v == v.to_integral_value():
        return str(int(v))
    return f"{int((v * 1000).to_integral_value())}m"


def report_url(pod: dict[str, Any], path: str = "/") -> str | None:
    """`path` on the port where a running worker pod's `gangrun.launch` serves its live report and takes
    stop notices (`gangrun._worker.live_report`); None when the pod is not running, has no IP yet, or
    is on the host's network, whose port another gang's worker on the same node may hold."""
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not isinstance(ip, str) or not ip:
        return None
    if (pod.get("spec") or {}).get("hostNetwork") is True:
        return None
    for c in (pod.get("spec") or {}).get("containers") or []:
        if isinstance(c, dict) and c.get("name") == CONTAINER:
            for port in c.get("ports") or []:
                if isinstance(port, dict) and port.get("name") == pod_template.REPORT_PORT_NAME:
                    host = f"[{ip}]" if ":" in ip else ip
                    return f"http://{host}:{port.get('containerPort')}{path}"
    return None
