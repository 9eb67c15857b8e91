"""The controller's shell: informers feed a keyed work queue; one sync per key does the I/O around
the pure `reconcile`.

    ClusteredTask ─┐
    JobSet (ours) ─┼─► key (namespace, task) ─► WorkQueue ─► sync(key):
    Pod (ours)    ─┤                                           read task, JobSet, Workloads, pods
    Workload      ─┤ (via the JobSet UID it names)             reconcile(...)  (pure)
    Node          ─┘ (about to go: via the pods on it)
                                                               write status once (resourceVersion)
                                                               then create/delete JobSets, record Events

Status writes coalesce per task, and many are in flight at once. A key is queued at most once, and a
key whose sync (status write included) is still running is synced once more after it, from the newest
objects: however many changes arrive meanwhile, they make one more write, of the newest state, and a
sync whose status is unchanged writes nothing (a preempt-and-readmit round is at most three writes:
evicted, waiting for re-admission, running). Each worker is one write in flight; there are enough
workers (DEFAULT_WORKERS), each with a kept-alive connection, that a thousand readmissions at once do
not queue behind a few writes.

A sync that raises is retried with per-key backoff; one that asks for `wake_at` is queued again then.
Pods that go away carrying something a sync still needs (a worker's newest checkpoint in its
termination message, a DisruptionTarget condition) are kept from their DELETED event until a sync
has written what they said into the status. Stop notices go onto pods as one-annotation patches,
all at once and alongside the status write, and are done before the deletes the same sync asks for.
Running workers' checkpoints are polled live (`live_reports.py`; off with `report_period=None`): a new
commit queues its task, reaching its timeline while the gang runs. With `--priority-boost` each sync
ends by keeping the Workload's priority-boost annotation equal to the task's boost (`boost.py`).
A node about to go (cordoned, tainted: `_core/maintenance.py`) queues the tasks of the pods on it; the
workers a sync evicts from it (`EvictPods`, after their NodeMaintenance notices) are evicted last.

Reads come from the informer caches, except where a stale cache could cost an attempt:
* a JobSet missing from the cache after it was seen is read from the API server before the engine
  may call it deleted;
* when the JobSet is suspended the Workload is listed from the API server (the JobSet and Workload
  streams are not ordered);
* a node the cache says is about to go for a worker is read again before the worker is told or moved.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Any

from gangrun._backends.clock import Clock, system_clock
from gangrun._backends.kube import (
    adapter,
    crd,
    elastic,
    events,
    fields,
    in_place,
    indexes,
    live_reports,
    logkeep,
    preemptor,
    reports,
    stop_notices,
)
from gangrun._backends.kube.adapter import WorkloadLookup
from gangrun._backends.kube.boost import Booster
from gangrun._backends.kube.client import EVENTS, JOBSETS, NODES, PODS, TASKS, WORKLOADS, KubeApi
from gangrun._backends.kube.informer import Informer, Key, key_of
from gangrun._backends.kube.metrics import Metrics
from gangrun._backends.kube.nodes import about_to_go, node_about_to_go, node_kept, node_name, placeable, tolerations
from gangrun._backends.kube.permissions import CONTROLLER, PRIORITY_BOOST, Scoped
from gangrun._backends.kube.queues import Queues, priority_of
from gangrun._backends.kube.quota import Capacity
from gangrun._backends.kube.reconcile import (
    CreateJobSet,
    DeleteJobSet,
    EvictPods,
    event_type,
    reconcile,
)
from gangrun._backends.kube.stored import load_accounting, load_state, persisted, spec_or_none
from gangrun._backends.kube.tombstones import Tombstones
from gangrun._backends.kube.workqueue import WorkQueue
from gangrun._core import kueue
from gangrun._core.actions import RecordEvent, RequeueAt
from gangrun._core.eviction import NO_EVICTION, classify_eviction
from gangrun._core.observation import WorkloadRead
from gangrun._core.priority_boost import BoostPolicy
from gangrun._errors import ApiError, Conflict, NotFound

log = logging.getLogger(__name__)
REJECTED_EVENT = "the API server rejected the event"
SPARE_CONNECTIONS = 8  # the five watches, leader election, a live read or two
# Reconciles wait on the API server, not the CPU (a sync's own work is about a millisecond; its status
# PATCH takes hundreds while Kueue readmits a thousand gangs): a worker is a status write in flight, and
# there must be enough of them that a burst of readmissions never queues behind the writes before it
# (1,000 tasks readmitted at once: see benchmarks/bench_controller.py). An idle worker is a parked thread.
DEFAULT_WORKERS = 128
RBAC_HINT = ("the controller may not read Kueue Workloads (403); evictions of started gangs will be "
             "system retries. Grant list/watch on workloads.kueue.x-k8s.io (see deploy/rbac.yaml)")


def api_connections(workers: int) -> int:
    """Kept-alive API connections for a controller with `workers` reconciles at once: one each, one per
    stop notice in flight, the watches and the Lease. Fewer would open and drop a connection (and its
    TLS handshake) for every request beyond them, in the very bursts where requests pile up."""
    return workers + stop_notices.FANOUT + SPARE_CONNECTIONS


class Controller:
    def __init__(self, api: KubeApi, *, namespace: str | None, clock: Clock = system_clock,
                 metrics: Metrics | None = None, identity: str = "",
                 queue: WorkQueue[Key] | None = None, strict_events: bool = False,
                 boost: BoostPolicy | None = None, report_period: float | None = live_reports.PERIOD,
                 keep_output: bool = True) -> None:
        # Every call goes through the table deploy/rbac.yaml grants (permissions.py): one outside it is a bug.
        self.api: KubeApi = Scoped(api, CONTROLLER | PRIORITY_BOOST)
        self.namespace, self.clock = namespace, clock
        self.boost = boost  # checkpoint-aware preemption: keep each Workload's priority-boost annotation
        self.metrics = metrics or Metrics()
        self.identity = identity
        self.strict_events = strict_events  # tests: an Event the API server rejects fails the sync
        self.queue: WorkQueue[Key] = queue if queue is not None else WorkQueue()  # an empty queue is falsy (__len__)
        self.tasks = Informer(self.api, TASKS, namespace=namespace, on_change=self._task_changed,
                              indexers=indexes.TASK_INDEXERS)
        self.jobsets = Informer(self.api, JOBSETS, namespace=namespace, label_selector=crd.TASK_LABEL,
                                on_change=self._owned_changed, indexers=indexes.JOBSET_INDEXERS)
        self.pods = Informer(self.api, PODS, namespace=namespace, label_selector=crd.TASK_LABEL,
                             on_change=self._pod_changed, indexers=indexes.POD_INDEXERS)
        self.workloads = Informer(self.api, WORKLOADS, namespace=namespace, on_change=self._workload_changed,
                                  indexers=indexes.WORKLOAD_INDEXERS)
        # Nodes are cluster-wide (only their cordons and taints are kept): one about to go moves its workers.
        self.nodes = Informer(self.api, NODES, namespace=None, on_change=self._node_changed, keep=node_kept)
        self._booster = Booster(self.api, self.workloads, self.queue)
        self.queues = Queues(self.api, namespace=namespace, on_change=self._queue_changed)
        # Commits reach the timeline (and the boost follows them) as they happen, not at the gang's next stop.
        self.live = (live_reports.LiveReports(self.pods, self._owned_changed, period=report_period)
                     if report_period is not None else None)
        self.informers = (self.tasks, self.jobsets, self.pods, self.workloads, self.nodes, *self.queues.informers)
        self._hinted = False
        self._notices = stop_notices.StopNotices(self.api)
        self._tombstones = Tombstones()
        # Each ended worker pod's output, kept in the task's ConfigMap past the pod (`logkeep.py`).
        self.keeper = logkeep.Keeper(self.api, task_uid=self._task_uid) if keep_output else None

    # -- event routing --------------------------------------------------------------------------------

    def _task_changed(self, obj: dict[str, Any]) -> None:
        self.queue.add(key_of(obj))

    def _owned_changed(self, obj: dict[str, Any]) -> None:
        task = fields.labels(obj).get(crd.TASK_LABEL)
        if task:
            self.queue.add((key_of(obj)[0], task))

    def _pod_changed(self, obj: dict[str, Any]) -> None:
        task = fields.labels(obj).get(crd.TASK_LABEL)
        if task and self.keeper is not None:
            self.keeper.saw(obj, deleted=self.pods.get(key_of(obj)) is None)
        if task and self.pods.get(key_of(obj)) is None:
            self._tombstones.keep((key_of(obj)[0], task), obj)
        self._owned_changed(obj)

    def _node_changed(self, obj: dict[str, Any]) -> None:
        """A node about to go concerns the tasks of the pods on it (a heartbeat of any other node, nothing);
        any node's news, the elastic gangs shrunk onto the nodes left (one may take a worker again)."""
        if node_about_to_go(self.nodes.get(key_of(obj)) or obj):
            for pod in self.pods.by_index(indexes.BY_NODE, key_of(obj)[1]):
                self._owned_changed(pod)
        for t in self.tasks.by_index(indexes.ELASTIC, True):
            if elastic.shrunk_onto_nodes_left(t):
                self.queue.add(key_of(t))

    def _task_uid(self, namespace: str, name: str) -> str:
        task = self.tasks.get((namespace, name))
        return str(((task or {}).get("metadata") or {}).get("uid") or "")

    def _queue_changed(self, _obj: dict[str, Any]) -> None:
        """Quota freed or taken: every elastic gang may now fit at another size."""
        for t in self.tasks.by_index(indexes.ELASTIC, True):
            self.queue.add(key_of(t))

    def _workload_changed(self, obj: dict[str, Any]) -> None:
        uid = adapter.workload_job_uid(obj)
        if not uid:
            return
        for js in self.jobsets.by_index(indexes.BY_UID, uid):
            self._owned_changed(js)

    # -- one reconcile --------------------------------------------------------------------------------

    def sync(self, key: Key) -> None:
        """Reconcile one task. Raises (ApiError, ...) when it should be retried."""
        namespace, name = key
        task = self.tasks.get(key)
        if task is None:  # deleted: its JobSets go with it through their ownerReference
            return
        now = self.clock()
        state = load_state(task, now=now)  # the attempt and gangSeen exactly as reconcile reads them
        uid = str((task.get("metadata") or {}).get("uid") or "")
        current = elastic.current_jobset(task, state.attempt)
        js = self.jobsets.get((namespace, current))
        if js is None and state.gang_seen:
            js = self._live_jobset(namespace, current)
        if js is not None and not adapter.belongs_to(js, uid):
            js = None  # an earlier task's of this name, being deleted: ours is created once it is gone
        owned = [j for j in self.jobsets.by_index(indexes.BY_TASK, key) if adapter.belongs_to(j, uid)]
        gone = self._tombstones.of(key)
        live = self.pods.by_index(indexes.BY_TASK, key)
        names = {(p.get("metadata") or {}).get("name") for p in live}
        pods = [p for p in [*live, *(g for n, g in gone.items() if n not in names)]
                if reports.reports_for(adapter.attempt_of(p), state.attempt) and adapter.belongs_to(p, uid)]
        pods = self._notices.overlay(namespace, pods)  # the notices written that the cache does not show yet
        lookup = self._workloads_for(js)
        spec = spec_or_none(task)
        capacity = self._capacity(task, spec.queue, owned, lookup) if spec is not None and spec.elastic else None
        nodes = self._nodes_of(pods)
        placeable_now = self._placeable(pods) if spec is not None and spec.elastic else None
        asked = in_place.targets(spec, in_place.InPlace.load(task, state.attempt), pods) if spec is not None else {}
        new_status, actions = reconcile(task, js, lookup, pods, now=now, owned_jobsets=owned, capacity=capacity,
                                        live=self.live.of(pods) if self.live is not None else None, nodes=nodes,
                                        rounds=self._notices.ask(asked) if asked else None, placeable=placeable_now)
        actions = preemptor.name_in(actions, lookup.items,
                                    jobsets_by_uid=partial(self.jobsets.by_index, indexes.BY_UID),
                                    workloads_by_job_uid=partial(self.workloads.by_index, indexes.BY_JOB_UID))
        notices = self._notices.write(namespace, actions)  # alongside the status write, not after it
        if new_status is not None:
            rv = (task.get("metadata") or {}).get("resourceVersion")
            patch = {"metadata": {"resourceVersion": rv}, "status": new_status}
            updated = self.api.patch(TASKS, namespace, name, patch, subresource="status")  # Conflict: retry
            if isinstance(updated, dict):
                updated.setdefault("kind", crd.KIND)
                self.tasks.upsert(updated)
                task = updated
            for action in actions:  # counted once the status holds what they describe
                if isinstance(action, RecordEvent):
                    self.metrics.count(action.event)
        stop_notices.settle(notices, before_delete=any(isinstance(a, DeleteJobSet | EvictPods) for a in actions))
        self._tombstones.forget(key, task)
        index = 0
        for action in actions:
            if isinstance(action, CreateJobSet):
                self._create_jobset(namespace, action.body)
            elif isinstance(action, DeleteJobSet):
                self._delete_jobset(namespace, action.name)
            elif isinstance(action, EvictPods):
                self._evict(namespace, action.names)
            elif isinstance(action, RecordEvent):
                self._record(task, action, index)
                index += 1
            elif isinstance(action, RequeueAt):
                self.queue.add_after(key, max((action.at - now).total_seconds(), 0.0))
        if self.boost is not None and spec is not None:
            self._booster.keep(self.boost, key, task, spec, lookup, now=now)

    def _capacity(self, task: dict[str, Any], queue: str, owned: list[dict[str, Any]],
                  lookup: WorkloadLookup) -> Capacity | None:
        """The free quota of an elastic task's ClusterQueue (`queues.py`), named by its LocalQueue `queue`."""
        namespace = key_of(task)[0]
        mine = adapter.newest_workload(lookup.items) if lookup.read is WorkloadRead.FOUND else None
        return self.queues.capacity(namespace, queue,
                                    workloads=self.workloads.items(), own_jobs={adapter.uid(j) for j in owned},
                                    priority=priority_of(mine))

    def _live_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self.api.get(JOBSETS, namespace, name)
        except NotFound:
            return None
        self.jobsets.upsert(obj)
        return obj

    def _placeable(self, pods: list[dict[str, Any]]) -> int | None:
        """How many nodes may take the gang's workers (`nodes.placeable`), by its pods' tolerations; None
        before it has a pod."""
        return placeable(self.nodes.items(), tolerations(pods[0])) if pods else None

    def _nodes_of(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The Nodes the pods are on, by name. A node the cache says is about to go for one of them is read
        again from the API server: the node and pod streams are not ordered, and a cordon or taint lifted
        just before a pod was bound there, not yet seen, would move a gang that has just started."""
        nodes: dict[str, dict[str, Any]] = {}
        for pod in pods:
            name = node_name(pod)
            if not name or name in nodes or (node := self.nodes.get(("", name))) is None:
                continue
            if about_to_go(pod, {name: node}):
                try:
                    fresh = self.api.get(NODES, None, name)
                except NotFound:
                    continue
                self.nodes.upsert(fresh)
                node = node_kept(fresh)
            nodes[name] = node
        return nodes

    def _workloads_for(self, js: dict[str, Any] | None) -> WorkloadLookup:
        uid = adapter.uid(js) if js is not None else ""
        if js is None or not uid:
            return WorkloadLookup()
        cached = self.workloads.by_index(indexes.BY_JOB_UID, uid)
        if adapter.is_suspended(js) and not self._explains_suspension(cached):
            try:
                doc = self.api.list(WORKLOADS, key_of(js)[0], label_selector=f"{kueue.JOB_UID_LABEL}={uid}")
            except ApiError as e:
                if e.status == 403:
                    self._rbac_hint()
                    return WorkloadLookup.unreadable(str(e))
                if e.status == 404:  # Kueue's CRD is not installed
                    return WorkloadLookup()
                raise  # 5xx, timeouts: retry the reconcile rather than misread an eviction
            return WorkloadLookup.found(doc.get("items") or [])
        if self.workloads.forbidden:
            self._rbac_hint()
            return WorkloadLookup.unreadable("forbidden to list workloads")
        return WorkloadLookup.found(cached)

    def _explains_suspension(self, cached: list[dict[str, Any]]) -> bool:
        """Whether the cached Workload already says why its JobSet is suspended (an eviction, or not
        active): then the cache is as good as a fresh read. Otherwise the JobSet's stream may simply
        be ahead of the Workload's, and the API server is asked (S7)."""
        wl = adapter.to_workload(adapter.newest_workload(cached))
        return wl is not None and (not wl.active or classify_eviction(wl).kind not in NO_EVICTION)

    def _rbac_hint(self) -> None:
        if not self._hinted:
            self._hinted = True
            log.warning(RBAC_HINT)

    def _create_jobset(self, namespace: str, body: dict[str, Any]) -> None:
        body = {**body, "metadata": {**body["metadata"], "namespace": namespace}}
        try:
            created = self.api.create(JOBSETS, namespace, body)
        except Conflict:  # AlreadyExists: an earlier reconcile created it
            return
        if isinstance(created, dict):
            self.jobsets.upsert(created)
        log.info("created JobSet %s/%s", namespace, body["metadata"]["name"])

    def _delete_jobset(self, namespace: str, name: str) -> None:
        try:
            self.api.delete(JOBSETS, namespace, name)
            log.info("deleted JobSet %s/%s", namespace, name)
        except NotFound:
            pass

    def _evict(self, namespace: str, names: tuple[str, ...]) -> None:
        """Evict workers whose node is about to go; a 429 (a PodDisruptionBudget refusing) retries the sync."""
        for name in names:
            try:
                self.api.evict(namespace, name)
                log.info("evicted pod %s/%s: its node is about to go", namespace, name)
            except NotFound:
                pass

    def _record(self, task: dict[str, Any], action: RecordEvent, index: int) -> None:
        ev = action.event
        body = events.to_k8s(task, ev, type_=event_type(ev), index=index, instance=self.identity)
        try:
            self.api.create(EVENTS, key_of(task)[0], body)
        except Conflict:
            pass
        except ApiError as e:
            if e.status in (400, 422):  # the API server refused what gangrun built: a bug, never the cluster's
                log.error("%s %s on %s: %s", REJECTED_EVENT, ev.type.value, key_of(task), e)
                if self.strict_events:
                    raise
                return
            # Unreachable, throttled, forbidden: an Event is worth a log line, never a retry of the reconcile.
            log.warning("could not record event %s on %s: %s", ev.type.value, key_of(task), e)

    # -- loops ----------------------------------------------------------------------------------------

    def process_one(self, timeout: float | None = None) -> bool:
        """Take one key from the queue and sync it. Returns False when none came within `timeout`."""
        key = self.queue.get(timeout)
        if key is None:
            return False
        started = time.monotonic()
        try:
            self.sync(key)
            self.queue.forget(key)
        except Exception as e:
            self.metrics.errors.inc()
            delay = self.queue.add_rate_limited(key)
            level = logging.INFO if isinstance(e, ApiError) else logging.ERROR  # Conflict is an ApiError
            log.log(level, "reconcile of %s/%s failed (%s: %s); retrying in %.2fs", *key, type(e).__name__, e, delay,
                    exc_info=level == logging.ERROR)
        finally:
            self.metrics.reconcile.observe(time.monotonic() - started)
            self.queue.done(key)
        return True

    def refresh_gauges(self) -> None:
        """The gauges from the cached tasks: their phases, the gangs waiting in each queue, their goodput."""
        now = self.clock()
        self.metrics.observe_views(
            {"name": (t.get("metadata") or {}).get("name"), "phase": (t.get("status") or {}).get("phase"),
             "queue": spec.queue if (spec := spec_or_none(t)) is not None else None,
             "eviction": (t.get("status") or {}).get("eviction"),
             "accounting": {"goodput": load_accounting(t).goodput(now=now)} if persisted(t) is not None else None}
            for t in self.tasks.items())

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def run(self, stop: threading.Event, *, workers: int = DEFAULT_WORKERS) -> None:
        """Run informers and workers until `stop` is set."""
        threads = [threading.Thread(target=i.run, args=(stop,), name=f"watch-{i.res.plural}", daemon=True)
                   for i in self.informers]
        if self.live is not None:
            threads.append(threading.Thread(target=self.live.run, args=(stop,), name="live-reports", daemon=True))
        for t in threads:
            t.start()
        while not stop.is_set() and not self.synced:  # never decide on a half-filled cache
            stop.wait(0.1)
        log.info("caches synced; reconciling")

        def work() -> None:
            while not stop.is_set():
                self.process_one(timeout=0.5)

        workers_ = [threading.Thread(target=work, name=f"worker-{n}", daemon=True) for n in range(workers)]
        for t in workers_:
            t.start()
        stop.wait()
        self.queue.shutdown()
        for t in workers_:
            t.join(timeout=10)
        self._notices.close()
        if self.keeper is not None:
            self.keeper.close()
