"""The `ClusteredTask` manifest (S1): the model, its defaults, and validation that names the field.

One model for both backends. `parse_manifest(doc)` takes an already-parsed document (reading and
parsing files is `gangrun._manifest_file`'s job: this module does no I/O). Every problem raises
`SpecError` whose text starts with the field's path, e.g. `spec.nodes: must be >= 1, got 0` (the
readers of a field of any type are `spec_fields.py`; the fields only a manifest has are read here).

Hostile documents are refused before any field is read: nesting deeper than `DEPTH_MAX`, a string
that is not valid Unicode (a lone surrogate), a number that is not finite. Counts have upper bounds
(`NODES_MAX`, `NPROC_MAX`, `RETRIES_MAX`, `GPU_MAX`, `COMMAND_MAX`) so that no manifest asks for an absurd
gang.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from gangrun._core import worker_env
from gangrun._core.checkpoint_root import parse_resume_from
from gangrun._core.pod_template import annotation_map, parse_pod_template, string_map
from gangrun._core.policy import DEFAULT_MAX_SYSTEM_RETRIES, Policy
from gangrun._core.spec_fields import (
    at,
    bool_field,
    check_unicode,
    clip,
    duration_field,
    expect,
    int_field,
    kind,
    mapping,
    no_nul,
    no_unknown,
    path_field,
    str_field,
)
from gangrun._core.units import parse_quantity
from gangrun._errors import SpecError

API_VERSION = "gangrun.dev/v1alpha1"
KIND = "ClusteredTask"
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 63
# metadata.generateName: the API server appends 5 random characters to the prefix (and would cut a longer
# prefix to fit), so a prefix of at most 58 always gives the name it promises.
GENERATED_SUFFIX_LEN = 5
GENERATE_NAME_MAX = NAME_MAX - GENERATED_SUFFIX_LEN
GENERATE_NAME = re.compile(r"^[a-z][-a-z0-9]*$")
ENV_MAX = 256  # spec.env entries; the CRD schema admits as many (its CEL rule's cost budget needs a bound)
# Upper bounds on counts: far above any real gang, low enough that a typo cannot ask for a million workers.
NODES_MAX = 10_000
NPROC_MAX = 1_024
RETRIES_MAX = 1_000  # retries, maxSystemRetries and failurePolicy.maxRestarts each
GPU_MAX = 1_024
COMMAND_MAX = 4_096  # arguments of spec.command: the kernel refuses an argv much past 2 MB
DEPTH_MAX = 32  # nesting of mappings and lists anywhere in the document
# Every other whole number is bounded by `_int`'s default maximum of 1,000,000.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
RESERVED_ENV = worker_env.RESERVED  # the worker environment contract: gangrun sets these for every worker
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GRACE = timedelta(seconds=worker_env.DEFAULT_GRACE_SECONDS)  # spec.terminationGracePeriod when unset
# An extended resource name: a DNS-subdomain domain (not kubernetes.io's own) and a name, like amd.com/gpu.
GPU_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+"
                          r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True, kw_only=True)
class Resources:
    """Per node. cpu in cores, memory in bytes, gpu a whole number."""

    cpu: Decimal = Decimal(1)
    memory: Decimal = Decimal(2**30)
    gpu: int = 0


IN_PLACE, RECREATE = "InPlace", "Recreate"
RESTART_STRATEGIES = (IN_PLACE, RECREATE)


@dataclass(frozen=True, kw_only=True)
class FailurePolicy:
    max_restarts: int = 0
    resume_after_preemption: bool = False
    restart_on_disruption: bool = True  # a worker lost to a node disruption restarts the gang, uncounted
    # How a whole-gang restart for a failed worker restarts it: InPlace, the surviving workers in their
    # pods (Kubernetes; the local backend's workers are processes either way), or Recreate, every pod anew.
    # Recreate stays the default while InPlace's readiness probe makes a gang's Running come later.
    restart_strategy: str = RECREATE


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    name: str  # "" until the backend names a task submitted with only generate_name
    nodes: int
    command: tuple[str, ...]
    nproc_per_node: int = 1
    working_dir: str = "."
    env: dict[str, str] = field(default_factory=dict)
    image: str = ""
    resources: Resources = Resources()
    retries: int = 0
    max_system_retries: int = DEFAULT_MAX_SYSTEM_RETRIES
    max_runtime: timedelta | None = None
    failure_policy: FailurePolicy = FailurePolicy()
    queue: str = "default"
    priority_class: str = ""
    checkpoint_uri: str = ""  # "" = under the backend's state dir
    resume_from: str = ""  # spec.checkpoint.resumeFrom: a task name or a checkpoint URI ("" = none)
    termination_grace: timedelta = DEFAULT_GRACE
    min_nodes: int = 0  # elastic gangs: the fewest nodes it may run on; 0 = `nodes` (not elastic)
    resize_cooldown: timedelta = timedelta(minutes=5)  # an elastic gang grows back at most once per cooldown
    pod_template: dict[str, Any] = field(default_factory=dict)  # kubernetes: merged into every worker pod
    shm_size: Decimal | None = None  # bytes of /dev/shm for the workers (kubernetes); None = the runtime's default
    gpu_resource: str = DEFAULT_GPU_RESOURCE  # the extended resource resources.gpu requests on kubernetes
    namespace: str = ""  # kubernetes only; "" = the client's default
    generate_name: str = ""  # metadata.generateName: the prefix of a name the backend makes unique
    source: str = ""  # the manifest's path, for relative workingDir
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the document as given

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def least_nodes(self) -> int:
        """The fewest nodes the gang may run on: `minNodes`, or `nodes` for a gang that is not elastic."""
        return self.min_nodes or self.nodes

    @property
    def elastic(self) -> bool:
        return self.least_nodes < self.nodes

    def at_size(self, nodes: int) -> TaskSpec:
        """The same task running on `nodes` nodes: what its workers see (NNODES, WORLD_SIZE)."""
        return self if nodes == self.nodes else replace(self, nodes=nodes)

    def policy(self) -> Policy:
        return Policy(retries=self.retries, max_system_retries=self.max_system_retries,
                      max_restarts=self.failure_policy.max_restarts,
                      resume_after_preemption=self.failure_policy.resume_after_preemption,
                      restart_on_disruption=self.failure_policy.restart_on_disruption,
                      max_runtime=self.max_runtime)


def parse_manifest(doc: Any, *, source: str = "") -> TaskSpec:
    if not isinstance(doc, dict):
        raise SpecError("", f"a manifest must be a mapping with apiVersion, kind, metadata and spec, got {kind(doc)}")
    _check_values(doc, "", 0)
    expect(doc, "apiVersion", API_VERSION)
    expect(doc, "kind", KIND)
    meta = mapping(doc, "metadata", "metadata")
    spec = mapping(doc, "spec", "spec")
    no_unknown(doc, "", {"apiVersion", "kind", "metadata", "spec", "status"})
    no_unknown(meta, "metadata", {"name", "generateName", "namespace", "labels", "annotations", "uid",
                                  "resourceVersion", "generation", "creationTimestamp", "managedFields"})
    if meta.get("labels") is not None:  # null is no map at all, as on the API server
        string_map(meta["labels"], "metadata.labels", label_values=True, owned_keys=False)
    if meta.get("annotations") is not None:
        annotation_map(meta["annotations"], "metadata.annotations", owned_keys=False)
    generate_name = _generate_name(meta.get("generateName"))
    # With both, the name wins, as on the API server (an object read back from it carries both).
    name = "" if generate_name and meta.get("name") is None else _name(meta.get("name"), "metadata.name")
    no_unknown(spec, "spec", {"nodes", "nprocPerNode", "command", "workingDir", "env", "image", "resources",
                              "retries", "maxSystemRetries", "maxRuntime", "failurePolicy", "queue",
                              "priorityClass", "checkpoint", "terminationGracePeriod", "podTemplate", "shmSize",
                              "gpuResource", "minNodes", "resizeCooldown"})
    fp = mapping(spec, "failurePolicy", "spec.failurePolicy", default={})
    no_unknown(fp, "spec.failurePolicy", {"maxRestarts", "resumeAfterPreemption", "restartOnDisruption",
                                          "restartStrategy"})
    ck = mapping(spec, "checkpoint", "spec.checkpoint", default={})
    no_unknown(ck, "spec.checkpoint", {"uri", "resumeFrom"})
    queue = spec.get("queue", "default")
    if not isinstance(queue, str) or not DNS_1035.match(queue):
        raise SpecError("spec.queue", f"must be a DNS-1035 name like default, got {clip(queue)}")
    priority = spec.get("priorityClass", "")
    if not isinstance(priority, str) or (priority and not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", priority)):
        raise SpecError("spec.priorityClass", f"must be a priority class name like low or high, got {clip(priority)}")
    uri = ck.get("uri", "")
    if not isinstance(uri, str):
        raise SpecError("spec.checkpoint.uri", f"must be a string, got {kind(uri)}")
    namespace = meta.get("namespace", "")
    if namespace:
        _name(namespace, "metadata.namespace")
    env = _env(spec.get("env", {}), "spec.env")
    shm = _shm_size(spec)
    nodes = int_field(spec, "nodes", "spec.nodes", minimum=1, maximum=NODES_MAX, required=True)
    return TaskSpec(
        name=name,
        generate_name=generate_name,
        namespace=namespace,
        nodes=nodes,
        min_nodes=_min_nodes(spec, nodes),
        resize_cooldown=duration_field(spec, "resizeCooldown", "spec.resizeCooldown",
                                       default=timedelta(minutes=5)) or timedelta(0),
        nproc_per_node=int_field(spec, "nprocPerNode", "spec.nprocPerNode", minimum=1, maximum=NPROC_MAX, default=1),
        command=_command(spec.get("command"), "spec.command"),
        working_dir=path_field(spec, "workingDir", "spec.workingDir", default="."),
        env=env,
        image=str_field(spec, "image", "spec.image", default=""),
        resources=_resources(spec.get("resources", {}), "spec.resources"),
        retries=int_field(spec, "retries", "spec.retries", minimum=0, maximum=RETRIES_MAX, default=0),
        max_system_retries=int_field(spec, "maxSystemRetries", "spec.maxSystemRetries", minimum=0, maximum=RETRIES_MAX,
                                     default=DEFAULT_MAX_SYSTEM_RETRIES),
        max_runtime=duration_field(spec, "maxRuntime", "spec.maxRuntime", default=None, positive=True),
        failure_policy=FailurePolicy(
            max_restarts=int_field(fp, "maxRestarts", "spec.failurePolicy.maxRestarts", minimum=0, maximum=RETRIES_MAX,
                                   default=0),
            resume_after_preemption=bool_field(fp, "resumeAfterPreemption", "spec.failurePolicy.resumeAfterPreemption"),
            restart_on_disruption=bool_field(fp, "restartOnDisruption", "spec.failurePolicy.restartOnDisruption",
                                             default=True),
            restart_strategy=_restart_strategy(fp),
        ),
        queue=queue,
        priority_class=priority,
        checkpoint_uri=uri.rstrip("/"),
        resume_from=parse_resume_from(ck.get("resumeFrom")),
        termination_grace=duration_field(spec, "terminationGracePeriod", "spec.terminationGracePeriod",
                                         default=DEFAULT_GRACE) or timedelta(0),
        pod_template=parse_pod_template(spec["podTemplate"], "spec.podTemplate", reserved_env=RESERVED_ENV,
                                        spec_env=env, shm=shm is not None) if "podTemplate" in spec else {},
        shm_size=shm,
        gpu_resource=_gpu_resource(spec),
        source=source,
        raw=doc,
    )


# -- the manifest's own fields: each names the field in its error ----------------------------------


def _restart_strategy(fp: dict[str, Any]) -> str:
    strategy = fp.get("restartStrategy", RECREATE)
    if strategy not in RESTART_STRATEGIES:
        raise SpecError("spec.failurePolicy.restartStrategy", f"must be InPlace or Recreate, got {clip(strategy)}")
    return str(strategy)


def _min_nodes(spec: dict[str, Any], nodes: int) -> int:
    """spec.minNodes: 1 <= minNodes <= nodes; absent means `nodes` (0 here: not elastic)."""
    if "minNodes" not in spec:
        return 0
    least = int_field(spec, "minNodes", "spec.minNodes", minimum=1, maximum=NODES_MAX)
    if least > nodes:
        raise SpecError("spec.minNodes", f"must be at most spec.nodes ({nodes}), got {least}")
    return 0 if least == nodes else least


def _check_values(v: Any, path: str, depth: int) -> None:
    """Refuse what no field may hold, wherever it is: deep nesting, lone surrogates, NaN and infinities.

    A lone surrogate (YAML and JSON can spell one as an escape) cannot be encoded as UTF-8, so it would
    fail later in a process argument, a database row or a request body instead of here.
    """
    if depth > DEPTH_MAX:
        raise SpecError(path, f"is nested more than {DEPTH_MAX} levels deep")
    if isinstance(v, str):
        check_unicode(v, path)
    elif isinstance(v, float) and not math.isfinite(v):
        raise SpecError(path, f"must be a finite number, got {clip(v)}")
    elif isinstance(v, dict):
        for key, item in v.items():
            where = at(path, key)
            if isinstance(key, str):
                check_unicode(key, where)
            _check_values(item, where, depth + 1)
    elif isinstance(v, list):
        for i, item in enumerate(v):
            _check_values(item, f"{path}[{i}]", depth + 1)


def _name(v: Any, path: str) -> str:
    if v is None or v == "":
        alternative = " (or metadata.generateName: a prefix like train-)" if path == "metadata.name" else ""
        raise SpecError(path, "is required: a lowercase DNS-1035 name like train" + alternative)
    if not isinstance(v, str) or len(v) > NAME_MAX or not DNS_1035.match(v):
        raise SpecError(path, f"must be a DNS-1035 label (lowercase letters, digits and '-', starting with a "
                              f"letter, at most {NAME_MAX} characters), got {clip(v)}")
    return v


def _generate_name(v: Any) -> str:
    if v is None:
        return ""
    if not isinstance(v, str) or not GENERATE_NAME.match(v) or len(v) > GENERATE_NAME_MAX:
        raise SpecError("metadata.generateName", f"must be a name prefix like train- (lowercase letters, digits and "
                        f"'-', starting with a letter, at most {GENERATE_NAME_MAX} characters), got {clip(v)}")
    return v


def _command(v: Any, path: str) -> tuple[str, ...]:
    if v is None:
        raise SpecError(path, "is required: the worker's argv, e.g. [python, train.py]")
    if isinstance(v, str):
        raise SpecError(path, f"must be a list of arguments (no shell), e.g. [python, train.py], got {clip(v)}")
    if not isinstance(v, list) or not v:
        raise SpecError(path, "must be a non-empty list of arguments")
    if len(v) > COMMAND_MAX:
        raise SpecError(path, f"must have at most {COMMAND_MAX} arguments, got {len(v)}")
    for i, arg in enumerate(v):
        if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
            raise SpecError(f"{path}[{i}]", f"must be a string, got {kind(arg)}")
        no_nul(str(arg), f"{path}[{i}]")
    return tuple(str(a) for a in v)


def _env(v: Any, path: str) -> dict[str, str]:
    if not isinstance(v, dict):
        raise SpecError(path, f"must be a mapping of names to values, got {kind(v)}")
    if len(v) > ENV_MAX:
        raise SpecError(path, f"must have at most {ENV_MAX} entries, got {len(v)}")
    out = {}
    for k, val in v.items():
        if not isinstance(k, str) or not ENV_NAME.match(k):
            raise SpecError(at(path, k), "is not a valid environment variable name")
        if k in RESERVED_ENV:
            raise SpecError(f"{path}.{k}", "is set by gangrun for every worker and cannot be overridden")
        if isinstance(val, (dict, list)) or val is None:
            raise SpecError(f"{path}.{k}", f"must be a string, got {kind(val)}")
        out[k] = str(val).lower() if isinstance(val, bool) else str(val)
        no_nul(out[k], f"{path}.{k}")
    return out


def _resources(v: Any, path: str) -> Resources:
    if not isinstance(v, dict):
        raise SpecError(path, f"must be a mapping with cpu, memory and gpu, got {kind(v)}")
    no_unknown(v, path, {"cpu", "memory", "gpu"})
    values = {}
    for key, default in (("cpu", Resources.cpu), ("memory", Resources.memory)):
        if key in v:
            try:
                values[key] = parse_quantity(v[key])
            except ValueError as e:
                raise SpecError(f"{path}.{key}", str(e)) from None
        else:
            values[key] = default
    if values["cpu"] <= 0:
        raise SpecError(f"{path}.cpu", f"must be more than 0, got {clip(v.get('cpu'))}")
    gpu = v.get("gpu", 0)
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0 or gpu > GPU_MAX:
        raise SpecError(f"{path}.gpu", f"must be a whole number from 0 to {GPU_MAX}, got {clip(gpu)}")
    return Resources(cpu=values["cpu"], memory=values["memory"], gpu=gpu)


def _shm_size(spec: dict[str, Any]) -> Decimal | None:
    if spec.get("shmSize") is None:
        return None
    try:
        size = parse_quantity(spec["shmSize"])
    except ValueError as e:
        raise SpecError("spec.shmSize", str(e)) from None
    if size < 2**20:
        raise SpecError("spec.shmSize", f"must be at least 1Mi, got {clip(spec['shmSize'])}")
    return size


def _gpu_resource(spec: dict[str, Any]) -> str:
    v = spec.get("gpuResource", DEFAULT_GPU_RESOURCE)
    if not isinstance(v, str) or len(v) > 253 or not GPU_RESOURCE.match(v) or v.split("/")[0].endswith("kubernetes.io"):
        raise SpecError("spec.gpuResource", f"must be an extended resource name like {DEFAULT_GPU_RESOURCE} or "
                                            f"amd.com/gpu, got {clip(v)}")
    return v
