"""List-then-watch one resource into an in-memory cache, calling back on every change.

The loop is the only code that knows about watch mechanics (kopf keeps its `infinite_watch` apart for
the same reason): it lists to get a consistent snapshot and a resourceVersion, then watches from there
with bookmarks so a reconnect resumes where it left off. `410 Gone` (the version was compacted) means
"list again"; any other error backs off and resumes. After each relist, objects that vanished while
we were not watching are reported as deleted, so nothing is missed.

Cached objects carry no `metadata.managedFields` (controller-runtime's default transform): nothing
here reads them, and in a pod they are a large part of the object, kept for every pod of every task.
An informer given `keep` caches only what it returns (the nodes: their names, cordons and taints).

`forbidden` records a 403 on list or watch, until one succeeds: the controller reads that as "the
Workload is unreadable" (S4). A 404 (the resource's CRD is not installed) counts as synced and empty.

Indexes (client-go's `Indexers`): each named function maps an object to the values it is filed
under, and `by_index(name, value)` returns the objects filed there. They are kept in step with the
cache on every upsert, remove and relist, under the same lock, so a reconcile reads its own
objects in O(own objects) instead of scanning the whole cache (1,000 tasks mean 1,000 JobSets and
2,000 pods in the caches).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from gangrun._backends.kube.client import KubeApi, Resource
from gangrun._backends.kube.fields import resource_version
from gangrun._errors import ApiError

log = logging.getLogger(__name__)
Key = tuple[str, str]  # (namespace, name)
IndexFunc = Callable[[dict[str, Any]], Iterable[Hashable]]  # the values an object is filed under


def _trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without `metadata.managedFields` (dropped in place)."""
    md = obj.get("metadata")
    if isinstance(md, dict):
        md.pop("managedFields", None)
    return obj


def key_of(obj: dict[str, Any]) -> Key:
    md = obj.get("metadata") or {}
    return md.get("namespace") or "", md.get("name") or ""


class Informer:
    def __init__(self, api: KubeApi, res: Resource, *, namespace: str | None, label_selector: str = "",
                 on_change: Callable[[dict[str, Any]], None] = lambda obj: None,
                 indexers: Mapping[str, IndexFunc] | None = None,
                 keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 watch_timeout: int = 300, max_backoff: float = 30.0) -> None:
        self.api, self.res, self.namespace, self.label_selector = api, res, namespace, label_selector
        self.on_change = on_change
        self._keep = keep  # what of each object the cache keeps (all of it but managedFields by default)
        self.watch_timeout, self.max_backoff = watch_timeout, max_backoff
        self._lock = threading.Lock()
        self._cache: dict[Key, dict[str, Any]] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        # index name -> value -> keys filed under it; empty sets are dropped so the maps stay O(objects)
        self._indices: dict[str, dict[Hashable, set[Key]]] = {name: {} for name in self._indexers}
        self.synced = threading.Event()
        self.forbidden = False
        self.relists = 0

    # -- cache ----------------------------------------------------------------------------------------

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            return self._cache.get(key)

    def items(self, predicate: Callable[[dict[str, Any]], bool] = lambda o: True) -> list[dict[str, Any]]:
        with self._lock:
            return [o for o in self._cache.values() if predicate(o)]

    def by_index(self, index: str, value: Hashable) -> list[dict[str, Any]]:
        """The cached objects that index `index` files under `value`, by key (KeyError: no such index).

        Sorted so a reconcile sees its objects in the same order every time, as a list would give them.
        """
        with self._lock:
            keys = sorted(self._indices[index].get(value, ()))
            return [self._cache[k] for k in keys]

    def _unindex_locked(self, key: Key, obj: dict[str, Any]) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            for value in fn(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _index_locked(self, key: Key, obj: dict[str, Any]) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            for value in fn(obj):
                index.setdefault(value, set()).add(key)

    def _kept(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._keep(obj) if self._keep is not None else _trimmed(obj)

    def upsert(self, obj: dict[str, Any]) -> bool:
        """Store `obj` unless the cache already holds a newer version of it. Returns whether stored.

        Our own writes update the cache from the response; a watch event that lags behind must not
        roll it back (resourceVersions are etcd revisions; when they are not numbers, the latest wins).
        """
        obj = self._kept(obj)
        key = key_of(obj)
        with self._lock:
            old = self._cache.get(key)
            old_rv, new_rv = resource_version(old), resource_version(obj)
            if old_rv is not None and new_rv is not None and new_rv < old_rv:
                return False
            if old is not None:  # labels may have changed: file the object afresh
                self._unindex_locked(key, old)
            self._cache[key] = obj
            self._index_locked(key, obj)
            return True

    def remove(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        with self._lock:
            old = self._cache.pop(key, None)
            if old is not None:  # unfile what was cached: the deleted object's labels may differ
                self._unindex_locked(key, old)

    # -- loop -----------------------------------------------------------------------------------------

    def relist(self) -> str:
        """Replace the cache with a fresh list; returns the list's resourceVersion."""
        doc = self.api.list(self.res, self.namespace, label_selector=self.label_selector)
        items = [self._kept(i) for i in doc.get("items") or [] if isinstance(i, dict)]
        for i in items:  # list items carry no apiVersion/kind
            i.setdefault("kind", self.res.kind)
        fresh = {key_of(i): i for i in items}
        with self._lock:
            gone = [o for k, o in self._cache.items() if k not in fresh]
            self._cache = fresh
            self._indices = {name: {} for name in self._indexers}
            for k, o in fresh.items():
                self._index_locked(k, o)
        self.forbidden = False
        self.relists += 1
        for obj in [*items, *gone]:
            self.on_change(obj)
        return (doc.get("metadata") or {}).get("resourceVersion") or ""

    def handle(self, event: dict[str, Any]) -> str | None:
        """Apply one watch event; returns the resourceVersion to resume from (None: keep the old one)."""
        obj = event.get("object")
        if not isinstance(obj, dict):
            return None
        kind = event.get("type")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            return rv
        if kind == "DELETED":
            self.remove(obj)
        elif kind in ("ADDED", "MODIFIED"):
            self.upsert(obj)
        else:
            return None
        self.on_change(obj)
        return rv

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop` is set. Never raises."""
        backoff = 0.5
        rv = ""
        while not stop.is_set():
            try:
                if not rv:
                    rv = self.relist()
                    self.synced.set()
                for event in self.api.watch(self.res, self.namespace, resource_version=rv,
                                            label_selector=self.label_selector, timeout_seconds=self.watch_timeout):
                    rv = self.handle(event) or rv
                    if stop.is_set():
                        return
                # The server closed the watch at its timeout: resume from rv. It served us, so a 403
                # from an earlier watch no longer holds.
                backoff = 0.5
                self.forbidden = False
            except ApiError as e:
                if e.status == 410:
                    log.info("watch of %s: resourceVersion too old, listing again", self.res.plural)
                    rv = ""
                    continue
                if e.status in (403, 404):
                    # Forbidden, or the CRD is not installed (no Kueue yet): there is nothing to wait for,
                    # and the controller must not hang on it. Readers see "unreadable" / nothing.
                    self.forbidden = e.status == 403
                    self.synced.set()
                log.warning("watch of %s failed (%s); retrying in %.1fs", self.res.plural, e, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except Exception:  # a bug or a malformed stream must not kill the informer thread
                log.exception("watch of %s failed; listing again", self.res.plural)
                rv = ""
                stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
