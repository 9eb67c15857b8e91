"""The controller's side of kept output: read each ended worker pod's log once, into `kept_output`.

The pod informer hands every pod change to `Keeper.saw(pod)`. A pod whose worker container has
terminated is read then: its whole output is there, and the pod still is. A pod being deleted whose
worker still runs (a preemption's grace period, in which it prints its last lines) is followed from
then on: the stream ends as the container does, and being open it outlasts the kubelet's removal of the
log file, which comes moments after the pod is gone (a read that starts after it finds nothing). A pod
deleted before either was seen (a DELETED event first) is read at once, while the kubelet may still
serve it; its log may be gone already, which is then logged and let be: the kubelet's words for that
("failed to try resolving symlinks in path ...") are never kept as the worker's output.

Reads go to a pool of POOL threads (a log is a streamed GET that can take a while; the informer must
not wait on it) and each pod is read once, by UID; writes to one task's ConfigMap are one at a time
(a lock per task, taken after the read), each from the newest ConfigMap and retried on a conflict,
so two pods of a gang ending together both land. After a controller restart, a pod already in the
ConfigMap's index is not read again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from gangrun._backends.kube import adapter, crd, fields, kept_output
from gangrun._backends.kube.client import CONFIGMAPS, KubeApi
from gangrun._core import jobset, pod_template
from gangrun._errors import ApiError, Conflict, NotFound

log = logging.getLogger(__name__)
POOL = 16  # pods' logs read at once
WRITE_TRIES = 5
# How the kubelet answers for a container whose log file it has removed: as the log's text, not an error.
LOG_GONE = ("failed to try resolving symlinks in path", "unable to retrieve container logs for")
SEEN_MAX = 100_000  # UIDs remembered as kept or being kept; past it the ConfigMap's index says


class Keeper:
    def __init__(self, api: KubeApi, *, task_uid: Callable[[str, str], str], pool: int = POOL) -> None:
        self.api = api
        self.task_uid = task_uid  # (namespace, task) -> the UID of the task now of that name, "" if none
        self._pool = ThreadPoolExecutor(max_workers=pool, thread_name_prefix="log-keep")
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._task_locks: dict[tuple[str, str], threading.Lock] = {}
        self._pending: set[Future[None]] = set()

    def saw(self, pod: dict[str, Any], *, deleted: bool = False) -> None:
        """A worker pod changed (`deleted`: it is gone from the API server): keep its output if it ended."""
        md = pod.get("metadata") or {}
        uid = str(md.get("uid") or "")
        task = fields.labels(pod).get(crd.TASK_LABEL)
        ended, going = _worker_ended(pod), bool(md.get("deletionTimestamp"))
        if not uid or not task or not (deleted or ended or going):
            return
        with self._lock:
            if uid in self._seen:
                return
            if len(self._seen) >= SEEN_MAX:
                self._seen.clear()
            self._seen.add(uid)
        future = self._pool.submit(self._keep_logged, pod, follow=going and not (deleted or ended))
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)

    def wait(self, timeout: float | None = None) -> None:
        """Until every read asked for so far is done (tests)."""
        with self._lock:
            pending = list(self._pending)
        futures.wait(pending, timeout=timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _keep_logged(self, pod: dict[str, Any], *, follow: bool) -> None:
        try:
            self.keep(pod, follow=follow)
        except ApiError as e:
            log.info("output of pod %s not kept: %s", (pod.get("metadata") or {}).get("name"), e)
        except Exception:  # a thread of the pool: nothing above it would see the error
            log.exception("output of pod %s not kept", (pod.get("metadata") or {}).get("name"))

    def keep(self, pod: dict[str, Any], *, follow: bool = False) -> bool:
        """Read the pod's log (`follow`: until its container ends) and add its tail to its task's ConfigMap;
        False if it was there already, or the log is gone."""
        md = pod.get("metadata") or {}
        namespace, name, uid = str(md.get("namespace") or ""), str(md.get("name") or ""), str(md.get("uid") or "")
        labels = fields.labels(pod)
        task = labels.get(crd.TASK_LABEL, "")
        task_uid = self.task_uid(namespace, task)
        if not task_uid or not adapter.belongs_to(pod, task_uid):
            return False  # the task is gone (its pods go with it), or this pod is an earlier task's of the name
        cm = self._get(namespace, task)
        if cm is not None and (not adapter.belongs_to(cm, task_uid) or kept_output.kept(cm.get("data"), uid)):
            return False  # kept already; or an earlier task's of the name, which the collector is deleting
        # Read outside the task's lock: a long log must not hold up the other pods of the gang.
        text, cut = kept_output.tail(self.api.log_lines(namespace, name, container=pod_template.WORKER,
                                                        follow=follow))
        if text.startswith(LOG_GONE):
            log.info("output of pod %s not kept: the kubelet has removed it (%s)", name, text.splitlines()[0])
            return False
        with self._lock:
            task_lock = self._task_locks.setdefault((namespace, task), threading.Lock())
        with task_lock:
            for _ in range(WRITE_TRIES):
                cm = self._get(namespace, task)  # the newest: another pod of the gang may just have written it
                if cm is not None and not adapter.belongs_to(cm, task_uid):
                    return False
                patch = kept_output.add(
                    (cm or {}).get("data"), attempt=adapter.attempt_of(pod) or 1,
                    round=_int(labels.get(jobset.RESTART_ATTEMPT_KEY)), rank=_rank(pod), pod=name, uid=uid,
                    created=str(md.get("creationTimestamp") or ""), text=text, cut=cut)
                if not patch:
                    return False
                try:
                    if cm is None:
                        self.api.create(CONFIGMAPS, namespace, kept_output.configmap(
                            task, namespace, task_uid, crd.API_VERSION, crd.KIND, kept_output.merged(None, patch)))
                    else:
                        rv = (cm.get("metadata") or {}).get("resourceVersion")
                        self.api.patch(CONFIGMAPS, namespace, kept_output.name_of(task),
                                       {"metadata": {"resourceVersion": rv}, "data": patch})
                    return True
                except Conflict:  # created or changed since it was read (another controller's term)
                    continue
            return False

    def _get(self, namespace: str, task: str) -> dict[str, Any] | None:
        try:
            return self.api.get(CONFIGMAPS, namespace, kept_output.name_of(task))
        except NotFound:
            return None


def _worker_ended(pod: dict[str, Any]) -> bool:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(cs, dict) and cs.get("name") == pod_template.WORKER:
            return isinstance((cs.get("state") or {}).get("terminated"), dict)
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _rank(pod: dict[str, Any]) -> int:
    md = pod.get("metadata") or {}
    index = (md.get("annotations") or {}).get(jobset.JOB_COMPLETION_INDEX_KEY) \
        or fields.labels(pod).get(jobset.JOB_COMPLETION_INDEX_KEY, "")
    return _int(index)


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0
