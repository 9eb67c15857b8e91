"""`KubeBackend`: the CLI's `Backend` on a cluster. It submits ClusteredTasks and reads what the
controller wrote; it never drives a task itself (cancel asks the controller through an annotation,
because only the controller writes status)."""

from __future__ import annotations

import builtins  # the `list` method shadows the builtin inside the class body
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gangrun._backends.clock import system_clock
from gangrun._backends.kube import adapter, checks, crd, durable, events, fields
from gangrun._backends.kube.client import (
    EVENTS,
    JOBSETS,
    TASKS,
    WORKLOADS,
    KubeApi,
    Resource,
    connect,
)
from gangrun._backends.kube.create import create_once
from gangrun._backends.kube.dependents import resuming_from
from gangrun._backends.kube.pending import pending_message, queue_position
from gangrun._backends.kube.render import check_renderable, checkpoint_root
from gangrun._backends.kube.stored import load_accounting, load_state, spec_or_none, task_spec
from gangrun._backends.kube.worker_logs import WorkerLogs
from gangrun._ckpt.storage import remove_checkpoints
from gangrun._core import kueue
from gangrun._core.checkpoint_root import refuse_if_depended_on
from gangrun._core.phases import Phase
from gangrun._core.spec import DEFAULT_GRACE, TaskSpec
from gangrun._core.state import TaskState
from gangrun._core.timeline import Event
from gangrun._core.view import accounting_view, eviction_accounting, spec_view, state_view
from gangrun._core.view_types import AccountingView, KubeView, ListedView, TaskView, Waiting
from gangrun._errors import ApiError, BackendError, Conflict, NotFound, SpecError, UsageError

# The visibility API serves `pendingworkloads` as a subresource of a LocalQueue in its own group.
VISIBLE_QUEUES = Resource(kueue.VISIBILITY_GROUP, kueue.VISIBILITY_VERSION, kueue.LOCAL_QUEUES, "LocalQueue")
WAITING_PHASES = frozenset({Phase.QUEUED, Phase.WAITING_FOR_RESOURCES})
DELETE_TIMEOUT = 60.0  # how long `delete` waits for the objects to be gone, so that the name can be used again
FORCE_CANCEL_SLACK = 15.0  # beyond the task's grace period, how long `delete --force` waits for the controller


class KubeBackend:
    name = "kubernetes"

    def __init__(self, *, kubeconfig: str | None = None, context: str | None = None,
                 namespace: str | None = None, api: KubeApi | None = None) -> None:
        self._kubeconfig, self._context, self._namespace = kubeconfig, context, namespace
        self._api = api  # tests pass a fake; otherwise connected on first use (constructing never dials)
        self._visibility = True  # Kueue's visibility API answers; False once it did not (disabled, forbidden)

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            checks.check_kubeconfig(self._kubeconfig)
            self._api, default_ns = connect(kubeconfig=self._kubeconfig, context=self._context)
            self._namespace = self._namespace or default_ns
        return self._api

    @property
    def namespace(self) -> str:
        _ = self.api
        return self._namespace or "default"

    # -- Backend ------------------------------------------------------------------------------------

    def submit(self, spec: TaskSpec) -> str:
        check_renderable(spec)  # refuses what the cluster would refuse later (no image), naming the field
        durable.check_checkpoints_survive(spec)  # and a resuming task whose checkpoints would die with its pods
        ns = spec.namespace or self.namespace
        checks.check_queue(self.api, ns, spec.queue)
        checks.check_pod(self.api, ns, spec)
        body = {k: v for k, v in (spec.raw or {}).items() if k != "status"}
        meta = {k: v for k, v in (body.get("metadata") or {}).items() if k in ("name", "labels", "annotations")}
        naming = {"name": spec.name} if spec.name else {"generateName": spec.generate_name}
        body.update(apiVersion=crd.API_VERSION, kind=crd.KIND, metadata={**meta, **naming, "namespace": ns})
        try:  # exactly once, however often it is retried: see gangrun._backends.kube.create
            created = create_once(self.api, ns, body)
        except Conflict:  # another task of that name (one with our client token is returned as ours)
            raise UsageError(f"task {spec.name} already exists in namespace {ns}; delete it or pick another name") \
                from None
        except ApiError as e:
            if e.status in (400, 422):  # the API server's own validation (e.g. a label value): the manifest's fault
                raise SpecError("", f"the API server refused the task: {e.message}") from None
            raise self._explain(e, "create") from None
        return str(((created or {}).get("metadata") or {}).get("name") or spec.name)

    def get(self, name: str) -> TaskView:
        return self._view(self._task(name))

    def list(self) -> list[ListedView]:
        with self._calling("list"):
            items = self.api.list(TASKS, self.namespace).get("items") or []
        if not items and checks.namespace_missing(self.api, self.namespace):
            raise UsageError(f"namespace {self.namespace} does not exist")
        return [self._view(t) for t in sorted(items, key=lambda t: (t.get("metadata") or {}).get("name", ""))]

    def events(self, name: str) -> builtins.list[Event]:
        uid = (self._task(name).get("metadata") or {}).get("uid")
        # By UID: a deleted task's Events (kept for the cluster's event TTL) name the same kind and name as a new task
        # that reuses the name, and must not mix into its timeline.
        selector = f"involvedObject.uid={uid}" if uid else f"involvedObject.kind={crd.KIND},involvedObject.name={name}"
        with self._calling("read the events of"):
            items = self.api.list(EVENTS, self.namespace, field_selector=selector).get("items") or []
        # Creation order (the resourceVersion) breaks ties between events of the same instant.
        pairs = [(ev, fields.resource_version(i) or 0) for i in items if (ev := events.from_k8s(i))]
        return [ev for ev, _ in sorted(pairs, key=lambda p: (p[0].time, p[1]))]

    def logs(self, name: str, *, rank: int | None = None, attempt: int | None = None, round: int | None = None,
             follow: bool = False) -> Iterator[str]:
        """The attempt's worker output (`worker_logs.py`): of `round`, else of the newest round."""
        reader = WorkerLogs(self.api, self.namespace, task=self._task, calling=self._calling, explain=self._explain,
                            poll=FOLLOW_POLL)
        yield from reader.read(name, rank=rank, attempt=attempt, round=round, follow=follow)

    def delete(self, name: str, *, force: bool = False, purge: bool = False) -> bool:
        """Delete an ended task, its JobSets and its Events; with `purge` its checkpoints too (from this
        client: an object store it can reach, not a volume of the nodes). `force` first asks the controller
        to cancel a running one (its workers get their grace period) and waits a bounded time for that."""
        task = self._task(name)
        purged = self._purgeable(task) if purge else None
        if purged is not None and not force:
            with self._calling("list"):
                items = self.api.list(TASKS, self.namespace).get("items") or []
            refuse_if_depended_on(name, resuming_from(items, purged, besides=name, now=system_clock()))
        state = load_state(task, now=system_clock())
        if not state.phase.terminal:
            if not force:
                raise UsageError(f"task {name} is {state.phase.value}, not ended: cancel it first, or delete it with "
                                 f"--force (force=True), which cancels it")
            self.cancel(name)
            self._wait_ended(name, timeout=_grace_seconds(spec_or_none(task)) + FORCE_CANCEL_SLACK)
        uid = (task.get("metadata") or {}).get("uid")
        with self._calling("delete"):
            try:
                self.api.delete(TASKS, self.namespace, name)
            except NotFound:
                return False
        # The JobSets go with the task (owner references) where a garbage collector runs; delete them here too
        # so that a new task of the same name never meets the old one's `<name>-1`. Events expire on their own:
        # deleting them is tidiness, so a user who may not delete Events still deletes the task.
        self._delete_all(JOBSETS, label_selector=f"{crd.TASK_LABEL}={name}")
        if uid:
            self._delete_all(EVENTS, field_selector=f"involvedObject.uid={uid}")
        self._wait_gone(name)
        if purged is not None:
            remove_checkpoints(purged)
        return True

    @staticmethod
    def _purgeable(task: dict[str, Any]) -> str:
        """The checkpoint root `delete --purge` removes; refused, before anything is deleted, when it is a
        path on the cluster's nodes or volumes, which this client does not see."""
        spec = task_spec(task)
        root = checkpoint_root(spec, (task.get("metadata") or {}).get("uid") or "")
        if root.startswith(("file://", "/")):
            raise UsageError(f"--purge: the checkpoints of task {spec.name} are at {root}, on the cluster's "
                             "nodes or volumes, which this client cannot reach; delete without --purge and "
                             "remove that folder there")
        return root

    def cancel(self, name: str) -> bool:
        task = self._task(name)
        if load_state(task, now=system_clock()).phase.terminal:
            return False
        patch = {"metadata": {"annotations": {crd.CANCEL_ANNOTATION: system_clock().isoformat()}}}
        with self._calling("cancel"):
            self.api.patch(TASKS, self.namespace, name, patch)
        return True

    def wait_for_change(self, name: str, *, after_version: tuple[int, int, str], timeout: float) -> TaskView:
        """`SupportsFollow`: re-read the task until (attempt, phaseVersion, phase) moves, or `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get(name)
            if (view["attempt"], view["phaseVersion"], view["phase"]) != tuple(after_version) \
                    or time.monotonic() >= deadline:
                return view
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))

    # -- helpers ------------------------------------------------------------------------------------

    def _task(self, name: str) -> dict[str, Any]:
        try:
            with self._calling("read"):
                return self.api.get(TASKS, self.namespace, name)
        except NotFound:
            if checks.namespace_missing(self.api, self.namespace):
                raise UsageError(f"no task named {name}: namespace {self.namespace} does not exist") from None
            raise UsageError(f"no task named {name} in namespace {self.namespace}") from None

    def _view(self, task: dict[str, Any]) -> KubeView:
        md, status = task.get("metadata") or {}, task.get("status") or {}
        created = fields.parse_time(md.get("creationTimestamp")) or system_clock()
        state = load_state(task, now=created)
        spec = spec_or_none(task)  # an invalid one reads as Failed (the controller says why): no budgets to show
        shown, waiting, accounting = spec_view(spec), self._pending(task, state), _accounting(task, state)
        return {
            **state_view(md.get("name", ""), state, now=system_clock(),
                         policy=spec.policy() if spec is not None else None),
            "backend": self.name, "namespace": md.get("namespace", self._namespace), **shown,
            "runningNodes": status.get("runningNodes", 0), "jobSet": status.get("jobSet", ""),
            **waiting, "uid": md.get("uid", ""),
            "resumeFromResult": status.get("resumeFromResult"), "accounting": accounting}

    def _pending(self, task: dict[str, Any], state: TaskState) -> Waiting:
        """`pending` (Kueue's message) and `queuePosition` (1-based, in the LocalQueue) while the gang waits
        for admission or re-admission; nothing once it runs or ended. Reading them is best effort."""
        if state.phase.terminal or (state.phase not in WAITING_PHASES and state.eviction is None):
            return {}
        out: Waiting = {"pending": None, "queuePosition": None}
        md, status = task.get("metadata") or {}, task.get("status") or {}
        namespace, name = md.get("namespace") or self.namespace, status.get("jobSet")
        if not name:
            return out
        try:
            uid = adapter.uid(self.api.get(JOBSETS, namespace, name))
            items = self.api.list(WORKLOADS, namespace, label_selector=f"{kueue.JOB_UID_LABEL}={uid}").get("items")
        except ApiError:  # not created yet, or a user who may not read JobSets or Workloads
            return out
        workload = adapter.newest_workload(items or [])
        if workload is None:
            return out
        out["pending"] = pending_message(workload)
        seen = adapter.to_workload(workload)
        queue_name = seen.queue_name if seen is not None else ""
        if self._visibility and queue_name:
            try:
                summary = self.api.get(VISIBLE_QUEUES, namespace, queue_name, subresource=kueue.PENDING_WORKLOADS)
                out["queuePosition"] = queue_position(summary, (workload.get("metadata") or {}).get("name", ""))
            except ApiError:  # the API is off (VisibilityOnDemand) or not ours to read: stop asking
                self._visibility = False
        return out

    def _wait_ended(self, name: str, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not load_state(self._task(name), now=system_clock()).phase.terminal:
            time.sleep(FOLLOW_POLL)

    def _wait_gone(self, name: str) -> None:
        deadline = time.monotonic() + DELETE_TIMEOUT
        while time.monotonic() < deadline:
            try:
                self.api.get(TASKS, self.namespace, name)
            except NotFound:
                return
            except ApiError:
                return  # it was deleted; whether it is gone yet cannot be read
            time.sleep(FOLLOW_POLL)
        raise BackendError(f"task {name} was deleted but is still there after {DELETE_TIMEOUT:.0f}s "
                           f"(a finalizer holds it?)")

    def _delete_all(self, res: Resource, *, label_selector: str = "", field_selector: str = "") -> None:
        try:
            items = self.api.list(res, self.namespace, label_selector=label_selector,
                                  field_selector=field_selector).get("items") or []
            for item in items:
                try:
                    self.api.delete(res, self.namespace, (item.get("metadata") or {}).get("name", ""))
                except NotFound:
                    pass
        except ApiError:
            pass  # best effort: see delete()

    @contextmanager
    def _calling(self, verb: str) -> Iterator[None]:
        """Turn an API error into one the user can act on, naming what was being done."""
        try:
            yield
        except ApiError as e:
            raise self._explain(e, verb) from None

    def _explain(self, e: ApiError, verb: str) -> ApiError:
        if e.status == 0:
            return type(e)(0, f"cannot reach the Kubernetes API server to {verb} ClusteredTasks: {_cause(e.message)}")
        if e.status == 403:
            return type(e)(e.status, f"forbidden to {verb} ClusteredTasks in namespace {self._namespace}: {e.message}")
        if e.status == 404 and "clusteredtasks" in e.message.lower():
            return type(e)(e.status, "the ClusteredTask CRD is not installed; kubectl apply -k deploy/")
        return e


FOLLOW_POLL = 1.0


def _grace_seconds(spec: TaskSpec | None) -> float:
    """The task's grace period; a spec gangrun refuses has the default one."""
    return (spec.termination_grace if spec is not None else DEFAULT_GRACE).total_seconds()


def _accounting(task: dict[str, Any], state: TaskState) -> AccountingView:
    """The accounting of `get -o json`, the same fields as on the local backend."""
    now = system_clock()
    causes, waited = eviction_accounting(state, now=now)
    return accounting_view(load_accounting(task), grace_seconds=_grace_seconds(spec_or_none(task)), now=now,
                           preemptions=causes, waited=waited)


def _cause(message: str) -> str:
    """The useful end of a connection error: `[Errno 111] Connection refused`, not urllib3's object reprs."""
    found = re.search(r"\[Errno -?\d+\] [^'\")\]]+", message)
    if found:
        return found.group(0).strip()
    return message if len(message) <= 200 else message[:200] + "…"
