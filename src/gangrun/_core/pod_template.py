"""`spec.podTemplate`: a Kubernetes PodTemplateSpec merged into every worker pod, and its rules.

What users may put in it, what stays gangrun's, and how the two are merged, as pure functions on
plain dicts (the manifest's own shape; no Kubernetes client types):

    parse_pod_template(doc, path, ...)   validate; every refusal names the field

and how a valid template is used is `pod_merge.py` (the merge into the worker pods, what a local run
ignores, the worker's plain env).

Ownership. gangrun owns what makes a pod a gang worker: the worker container's command, image,
working directory, resources and termination message, the environment contract
(`gangrun._core.worker_env`), the pod's restart policy, hostname, subdomain and grace period, its
gangrun/Kueue/JobSet labels and annotations, and the volumes and mounts it adds (names starting
with `gangrun-`, /dev/shm when `spec.shmSize` is set). A template that sets one is refused naming
the field (`spec.podTemplate.spec.containers[worker].command: set by gangrun (spec.command)`); so is
one that sets what would break the gang or escape its quota and accounting (`REFUSED_POD_FIELDS`,
devices asked for by a container other than the worker). Mount paths are compared normalised
(`//etc/x/../gangrun` is /etc/gangrun); with `hostNetwork` the pod gets dnsPolicy
ClusterFirstWithHostNet, without which rank 0's name would not resolve.

Field names are checked against PodSpec and Container of Kubernetes v1.36 (k8s.io/api v0.36): a typo
is refused here instead of being pruned without a word by the JobSet CRD. Values below them are
validated by the API server when the pods are created.
"""

from __future__ import annotations

import copy
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gangrun._errors import SpecError

WORKER = "worker"  # the worker container's name, in the template and in every pod
RESERVED_PREFIX = "gangrun-"  # volumes gangrun adds are named gangrun-*
SHM_PATH = "/dev/shm"
NOTICE_DIR = "/etc/gangrun"  # the stop notice, a downward-API file of the pod's annotation
RUN_DIR = "/var/run/gangrun"  # an emptyDir the worker writes (checkpoint events), root filesystem read-only or not
TERMINATION_LOG = "/dev/termination-log"  # the worker's terminationMessagePath: its newest checkpoint
# Where no container may mount: gangrun's own mounts (/var/run is a link to /run in most images, and a
# mount follows it).
OWN_MOUNT_PATHS = (NOTICE_DIR, RUN_DIR, "/run/gangrun")
# Label and annotation keys under these prefixes are gangrun's, Kueue's, JobSet's or the Job controller's.
OWNED_KEY_PREFIXES = ("gangrun.dev/", "kueue.x-k8s.io/", "jobset.sigs.k8s.io/", "batch.kubernetes.io/")
KEY_HINTS = {"kueue.x-k8s.io/queue-name": "spec.queue", "kueue.x-k8s.io/priority-class": "spec.priorityClass"}
# The Job controller's labels in their legacy, unprefixed form: it still sets them on every pod, and
# selects the Job's pods by them.
LEGACY_JOB_LABELS = ("job-name", "controller-uid")

# Kubernetes v1.36 (k8s.io/api v0.36.3 core/v1 types.go).
POD_SPEC_FIELDS = frozenset({
    "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
    "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector", "serviceAccountName",
    "serviceAccount", "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC",
    "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname", "subdomain", "affinity",
    "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority", "dnsConfig", "readinessGates",
    "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead", "topologySpreadConstraints",
    "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "resourceClaims", "resources", "hostnameOverride",
    "schedulingGroup",
})
CONTAINER_FIELDS = frozenset({
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy",
    "restartPolicy", "restartPolicyRules", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe",
    "startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
    "securityContext", "stdin", "stdinOnce", "tty",
})
# Pod fields gangrun sets, and where the user says what they want instead.
OWNED_POD_FIELDS = {
    "restartPolicy": "the gang restarts as a whole: spec.failurePolicy",
    "terminationGracePeriodSeconds": "spec.terminationGracePeriod",
    "hostname": "rank 0's DNS name is derived from it",
    "subdomain": "rank 0's DNS name is derived from it",
    "hostnameOverride": "rank 0's DNS name is derived from the hostname",
    "nodeName": "the scheduler places every worker; use nodeSelector or affinity",
    "resources": "spec.resources, per node",
    "ephemeralContainers": "they cannot be set on a new pod",
}
OWNED_WORKER_FIELDS = {
    "image": "spec.image",
    "command": "spec.command",
    "args": "spec.command",
    "workingDir": "spec.workingDir",
    "resources": "spec.resources",
    "terminationMessagePath": "it carries the worker's newest checkpoint to the controller",
    "terminationMessagePolicy": "it carries the worker's newest checkpoint to the controller",
    "restartPolicy": "the gang restarts as a whole: spec.failurePolicy",
    "restartPolicyRules": "the gang restarts as a whole: spec.failurePolicy",
}
# Pod fields no template may set, though gangrun does not set them either: each would break the gang or
# let it use what the task's quota and accounting do not count.
REFUSED_POD_FIELDS = {
    "overhead": "Kubernetes sets it from the RuntimeClass (runtimeClassName), and Kueue counts it from there",
    "priority": "Kubernetes sets it from priorityClassName; the task's Kueue priority is spec.priorityClass",
    "schedulingGates": "a gated worker never starts while its admitted gang holds the quota",
    "activeDeadlineSeconds": "it fails one worker pod and so the whole gang; bound the task with spec.maxRuntime",
    "resourceClaims": "Kueue's quota does not count dynamic resource claims, so the gang would hold devices outside it",
}
# With hostNetwork a pod resolves names through the node's resolver unless told otherwise, and rank 0's
# name (MASTER_ADDR) is a cluster DNS name.
HOST_NETWORK_DNS_POLICY = "ClusterFirstWithHostNet"
# What a sidecar or init container may request: anything else (an extended resource like nvidia.com/gpu)
# is a device the task's spec.resources, its quota request and its accounting do not show.
PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage")
OWN_PORT_NAME = "rendezvous"
REPORT_PORT_NAME = "gangrun-report"  # the launcher's live checkpoint report, which the controller polls

_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ANNOTATIONS_MAX_BYTES = 256 * 1024  # the API server's limit on all annotations of an object
CONTAINERS_MAX = 64  # per list; the CRD schema admits as many (its CEL rules' cost budget needs a bound)


# -- reading ----------------------------------------------------------------------------------------


def _describe(v: Any) -> str:
    kinds = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "nothing"}
    if type(v) in kinds and not isinstance(v, str):
        return kinds[type(v)]
    r = repr(v)
    return r if len(r) <= 60 else r[:40] + "…" + r[-10:]


def _mapping(v: Any, path: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise SpecError(path, f"must be a mapping, got {_describe(v)}")
    for key in v:
        if not isinstance(key, str):
            raise SpecError(path, f"keys must be strings, got {_describe(key)}")
    return v


def _list(v: Any, path: str) -> list[Any]:
    if not isinstance(v, list):
        raise SpecError(path, f"must be a list, got {_describe(v)}")
    return v


def _known(doc: Mapping[str, Any], path: str, known: Iterable[str]) -> None:
    allowed = set(known)
    for key in doc:
        if key not in allowed:
            raise SpecError(f"{path}.{key}", "unknown field of a Kubernetes v1.36 "
                            + ("PodSpec" if path.endswith(".spec") else "Container" if "]" in path else "object"))


def _owned(path: str, why: str) -> SpecError:
    return SpecError(path, f"set by gangrun ({why})")


def _qualified_key(key: str, path: str) -> None:
    """A label or annotation key: an optional DNS-subdomain prefix and a name of at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or not name or len(name) > 63 \
            or not _QUALIFIED_NAME.match(name):
        raise SpecError(path, "is not a valid key: [prefix/]name, a name of at most 63 letters, digits, '-', '_' "
                              "or '.' starting and ending with a letter or digit")


def string_map(v: Any, path: str, *, label_values: bool, owned_keys: bool) -> dict[str, str]:
    """Labels (`label_values`) or annotations, as Kubernetes allows them; `owned_keys`: refuse the keys
    of gangrun, Kueue, JobSet and the Job controller."""
    doc = _mapping(v, path)
    for key, value in doc.items():
        where = f"{path}[{key}]"
        _qualified_key(key, where)
        if owned_keys and key.startswith(OWNED_KEY_PREFIXES):
            hint = KEY_HINTS.get(key, "its keys under " + ", ".join(p.rstrip("/") for p in OWNED_KEY_PREFIXES)
                                 + " are gangrun's, Kueue's and JobSet's")
            raise _owned(where, hint)
        if not isinstance(value, str):
            raise SpecError(where, f"must be a string, got {_describe(value)} (quote it)")
        if label_values and (len(value) > 63 or not _LABEL_VALUE.match(value)):
            raise SpecError(where, f"must be a label value: at most 63 letters, digits, '-', '_' or '.', starting and "
                                   f"ending with a letter or digit, got {_describe(value)}")
    return doc


def annotation_map(v: Any, path: str, *, owned_keys: bool) -> dict[str, str]:
    """Annotations: keys as for labels, string values, at most 256 KiB in all."""
    annotations = string_map(v, path, label_values=False, owned_keys=owned_keys)
    if sum(len(k) + len(a) for k, a in annotations.items()) > ANNOTATIONS_MAX_BYTES:
        raise SpecError(path, "must total at most 256 KiB, the API server's limit")
    return annotations


def _named(items: list[Any], path: str, *, seen: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A list of mappings with a unique string `name` (containers, volumes)."""
    seen = {} if seen is None else seen
    out = []
    for i, item in enumerate(items):
        item = _mapping(item, f"{path}[{i}]")
        name = item.get("name")
        if not isinstance(name, str) or not _DNS_1123_LABEL.match(name) or len(name) > 63:
            raise SpecError(f"{path}[{i}].name", f"must be a DNS-1123 label like my-volume, got {_describe(name)}")
        if name in seen:
            raise SpecError(f"{path}[{name}]", f"is given twice (also in {seen[name]})")
        seen[name] = path
        out.append(item)
    return out


# -- parse ------------------------------------------------------------------------------------------


def parse_pod_template(v: Any, path: str, *, reserved_env: frozenset[str], spec_env: Mapping[str, str],
                       shm: bool) -> dict[str, Any]:
    """Validate `spec.podTemplate`; return a copy of it. `shm`: spec.shmSize is set (gangrun mounts /dev/shm)."""
    doc = copy.deepcopy(_mapping(v, path))
    for key in doc:
        if key not in ("metadata", "spec"):
            raise SpecError(f"{path}.{key}", "unknown field (a pod template has metadata and spec)")
    meta = _mapping(doc.get("metadata", {}), f"{path}.metadata")
    for key in meta:
        if key not in ("labels", "annotations"):
            raise SpecError(f"{path}.metadata.{key}", "unknown field (a pod template's metadata holds labels and "
                                                      "annotations; gangrun names the pods)")
    labels = string_map(meta.get("labels", {}), f"{path}.metadata.labels", label_values=True, owned_keys=True)
    for key in LEGACY_JOB_LABELS:
        if key in labels:
            raise _owned(f"{path}.metadata.labels[{key}]", f"the Job controller's, as batch.kubernetes.io/{key}")
    annotation_map(meta.get("annotations", {}), f"{path}.metadata.annotations", owned_keys=True)
    pod = _mapping(doc.get("spec", {}), f"{path}.spec")
    _known(pod, f"{path}.spec", POD_SPEC_FIELDS)
    for key, why in OWNED_POD_FIELDS.items():
        if key in pod:
            raise _owned(f"{path}.spec.{key}", why)
    for key, why in REFUSED_POD_FIELDS.items():
        if key in pod:
            raise SpecError(f"{path}.spec.{key}", f"is not accepted: {why}")
    _host_network(pod, f"{path}.spec")
    names: dict[str, str] = {}
    for key in ("initContainers", "containers"):
        listed = _list(pod.get(key, []), f"{path}.spec.{key}")
        if len(listed) > CONTAINERS_MAX:
            raise SpecError(f"{path}.spec.{key}", f"must have at most {CONTAINERS_MAX} entries, got {len(listed)}")
        containers = _named(listed, f"{path}.spec.{key}", seen=names)
        for c in containers:
            where = f"{path}.spec.{key}[{c['name']}]"
            _known(c, where, CONTAINER_FIELDS)
            if c["name"] == WORKER:
                if key == "initContainers":
                    raise SpecError(where, "the worker container belongs in containers")
                _worker(c, where, reserved_env=reserved_env, spec_env=spec_env, shm=shm)
            else:
                _mounts(c, where, own=OWN_MOUNT_PATHS + ((SHM_PATH,) if shm else ()))
                _plain_resources(c, where)
    for vol in _named(_list(pod.get("volumes", []), f"{path}.spec.volumes"), f"{path}.spec.volumes"):
        if vol["name"].startswith(RESERVED_PREFIX):
            raise _owned(f"{path}.spec.volumes[{vol['name']}]", f"volume names starting with {RESERVED_PREFIX} are "
                                                                "gangrun's")
    if "nodeSelector" in pod:
        string_map(pod["nodeSelector"], f"{path}.spec.nodeSelector", label_values=True, owned_keys=False)
    for key in ("tolerations", "imagePullSecrets", "topologySpreadConstraints", "hostAliases", "readinessGates"):
        if key in pod:
            for i, item in enumerate(_list(pod[key], f"{path}.spec.{key}")):
                _mapping(item, f"{path}.spec.{key}[{i}]")
    for key in ("serviceAccountName", "serviceAccount"):
        value = pod.get(key)
        if value is not None and (not isinstance(value, str) or not _DNS_SUBDOMAIN.match(value)):
            raise SpecError(f"{path}.spec.{key}", f"must be a ServiceAccount name like trainer, got {_describe(value)}")
    return doc


def _host_network(pod: dict[str, Any], path: str) -> None:
    """hostNetwork needs dnsPolicy ClusterFirstWithHostNet (gangrun sets it when the template does not)."""
    host = pod.get("hostNetwork", False)
    if not isinstance(host, bool):
        raise SpecError(f"{path}.hostNetwork", f"must be true or false, got {_describe(host)}")
    policy = pod.get("dnsPolicy", HOST_NETWORK_DNS_POLICY)
    if host and policy != HOST_NETWORK_DNS_POLICY:
        raise SpecError(f"{path}.dnsPolicy", f"must be {HOST_NETWORK_DNS_POLICY} with hostNetwork (or left out), "
                                             f"got {_describe(policy)}: rank 0's name resolves through the cluster "
                                             "DNS only")


def _plain_resources(c: dict[str, Any], where: str) -> None:
    """A sidecar or init container asks for cpu, memory and storage only: devices are the worker's."""
    resources = _mapping(c.get("resources", {}), f"{where}.resources")
    if "claims" in resources:
        raise SpecError(f"{where}.resources.claims", f"is not accepted: {REFUSED_POD_FIELDS['resourceClaims']}")
    for kind in ("requests", "limits"):
        for name in _mapping(resources.get(kind, {}), f"{where}.resources.{kind}"):
            if name not in PLAIN_RESOURCES and not name.startswith("hugepages-"):
                raise SpecError(f"{where}.resources.{kind}[{name}]",
                                "is not accepted: only the worker asks for GPUs and other devices "
                                "(spec.resources.gpu); another container's would escape the task's resources and "
                                "accounting")


def _worker(c: dict[str, Any], where: str, *, reserved_env: frozenset[str], spec_env: Mapping[str, str],
            shm: bool) -> None:
    for key, why in OWNED_WORKER_FIELDS.items():
        if key in c:
            raise _owned(f"{where}.{key}", why)
    seen: set[str] = set()
    for i, entry in enumerate(_list(c.get("env", []), f"{where}.env")):
        entry = _mapping(entry, f"{where}.env[{i}]")
        name = entry.get("name")
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise SpecError(f"{where}.env[{i}].name", f"is not a valid environment variable name: {_describe(name)}")
        at = f"{where}.env[{name}]"
        if name in reserved_env:
            raise _owned(at, "the worker environment contract")
        if name in spec_env:
            raise SpecError(at, "is also in spec.env; set it in one place")
        if name in seen:
            raise SpecError(at, "is given twice")
        seen.add(name)
        if "value" in entry and not isinstance(entry["value"], str):
            raise SpecError(f"{at}.value", f"must be a string, got {_describe(entry['value'])} (quote it)")
        if "value" in entry and "valueFrom" in entry:
            raise SpecError(at, "has both value and valueFrom; give one")
        if isinstance(entry.get("value"), str) and "\0" in entry["value"]:
            raise SpecError(f"{at}.value", "contains a NUL byte, which no environment variable can hold")
    for i, item in enumerate(_list(c.get("envFrom", []), f"{where}.envFrom")):
        _mapping(item, f"{where}.envFrom[{i}]")
    for i, port in enumerate(_list(c.get("ports", []), f"{where}.ports")):
        port = _mapping(port, f"{where}.ports[{i}]")
        if port.get("name") == OWN_PORT_NAME:
            raise _owned(f"{where}.ports[{OWN_PORT_NAME}]", "the rendezvous port, MASTER_PORT")
        if port.get("name") == REPORT_PORT_NAME:
            raise _owned(f"{where}.ports[{REPORT_PORT_NAME}]", "the port of the live checkpoint report")
    _mounts(c, where, own=OWN_MOUNT_PATHS + (TERMINATION_LOG,) + ((SHM_PATH,) if shm else ()))


def _mounts(c: dict[str, Any], where: str, *, own: tuple[str, ...]) -> None:
    """No mount at or under one of the `own` paths, compared normalised."""
    for i, mount in enumerate(_list(c.get("volumeMounts", []), f"{where}.volumeMounts")):
        mount = _mapping(mount, f"{where}.volumeMounts[{i}]")
        path = mount.get("mountPath")
        if not isinstance(path, str) or not path.startswith("/"):
            raise SpecError(f"{where}.volumeMounts[{i}].mountPath", f"must be an absolute path, got {_describe(path)}")
        taken = next((p for p in own if _at_or_under(path, p)), None)
        if taken is not None:
            why = ("spec.shmSize" if taken == SHM_PATH else "it carries the worker's newest checkpoint to the "
                   "controller" if taken == TERMINATION_LOG else "gangrun mounts its own files there")
            raise _owned(f"{where}.volumeMounts[{path}]", why)
        name = mount.get("name")
        if isinstance(name, str) and name.startswith(RESERVED_PREFIX):
            raise _owned(f"{where}.volumeMounts[{path}].name", f"volume names starting with {RESERVED_PREFIX} are "
                                                               "gangrun's")


def _normal_path(path: str) -> str:
    """An absolute path as the container sees it: `//etc/./x/../gangrun/` is /etc/gangrun."""
    return "/" + posixpath.normpath(path).lstrip("/")


def _at_or_under(path: str, own: str) -> bool:
    path = _normal_path(path)
    return path == own or path.startswith(own + "/")
