"""An in-memory Kubernetes API for controller and backend tests: the `KubeApi` Protocol on dicts.

It keeps resourceVersions (one counter, like etcd), uids, label and field selectors, JSON merge
patch, the status subresource with optimistic concurrency, a watch log per resource, and error
injection: `fail(verb, plural, status, times=n)` makes the next n calls fail, `forbid(plural)`
answers 403 until `allow(plural)`; `compact()` makes older watches answer 410 Gone.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Iterator
from typing import Any

from gangrun._backends.kube.client import Resource, error_for


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _matches(obj: dict[str, Any], label_selector: str, field_selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, label_selector.split(",")):
        if "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v:
                return False
        elif term not in labels:
            return False
    for term in filter(None, field_selector.split(",")):
        path, v = term.split("=", 1)
        cur: Any = obj
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur != v:
            return False
    return True


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.log: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, type, plural, obj)
        self._rv = itertools.count(100)
        self._uid = itertools.count(1)
        self._failures: dict[tuple[str, str], list[int]] = {}
        self._forbidden: set[str] = set()
        self.compacted = 0
        self.calls: list[tuple[str, str, str]] = []  # (verb, plural, name)
        self.logs: dict[tuple[str, str], list[str]] = {}
        self.followed: list[str] = []  # pods whose log was read with follow (to their container's end)
        self.dry_runs: list[tuple[str, dict[str, Any]]] = []

    # -- test controls ------------------------------------------------------------------------------

    def fail(self, verb: str, plural: str, status: int, *, times: int = 1) -> None:
        self._failures.setdefault((verb, plural), []).extend([status] * times)

    def forbid(self, plural: str) -> None:
        self._forbidden.add(plural)

    def allow(self, plural: str) -> None:
        self._forbidden.discard(plural)

    def compact(self) -> None:
        self.compacted = next(self._rv)

    def put(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Store an object as another writer (Kueue, JobSet, the kubelet) would, bypassing failures."""
        md = obj.setdefault("metadata", {})
        key = (res.plural, md.get("namespace", ""), md["name"])
        old = self.objects.get(key)
        md.setdefault("uid", (old or {}).get("metadata", {}).get("uid") or f"uid-{next(self._uid)}")
        md.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        md["resourceVersion"] = str(next(self._rv))
        self.objects[key] = copy.deepcopy(obj)
        self.log.append((int(md["resourceVersion"]), "MODIFIED" if old else "ADDED", res.plural, copy.deepcopy(obj)))
        return copy.deepcopy(obj)

    def remove(self, res: Resource, namespace: str, name: str) -> None:
        obj = self.objects.pop((res.plural, namespace, name))
        self.log.append((next(self._rv), "DELETED", res.plural, obj))

    def obj(self, res: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get((res.plural, namespace, name)))

    def names(self, res: Resource, namespace: str | None = None) -> list[str]:
        return sorted(n for (p, ns, n) in self.objects if p == res.plural and namespace in (None, ns))

    def _check(self, verb: str, res: Resource, name: str = "") -> None:
        self.calls.append((verb, res.plural, name))
        if res.plural in self._forbidden:
            raise error_for(403, f'{res.plural} is forbidden: cannot {verb}')
        queued = self._failures.get((verb, res.plural))
        if queued:
            raise error_for(queued.pop(0), f"injected failure of {verb} {res.plural}")

    # -- KubeApi ------------------------------------------------------------------------------------

    def get(self, res: Resource, namespace: str | None, name: str, *,
            subresource: str | None = None) -> dict[str, Any]:
        # A subresource (a LocalQueue's pendingworkloads) is stored with `put` under "<plural>/<subresource>".
        plural = f"{res.plural}/{subresource}" if subresource else res.plural
        self._check("get", res if not subresource else Resource(res.group, res.version, plural, res.kind), name)
        obj = self.objects.get((plural, namespace or "", name))
        if obj is None:
            raise error_for(404, f'{res.plural} "{name}" not found')
        return copy.deepcopy(obj)

    def list(self, res: Resource, namespace: str | None, *, label_selector: str = "",
             field_selector: str = "") -> dict[str, Any]:
        self._check("list", res)
        items = [copy.deepcopy(o) for (p, ns, _), o in sorted(self.objects.items())
                 if p == res.plural and (namespace is None or ns == namespace)
                 and _matches(o, label_selector, field_selector)]
        return {"items": items, "metadata": {"resourceVersion": str(next(self._rv))}}

    def create(self, res: Resource, namespace: str | None, body: dict[str, Any], *,
               dry_run: bool = False) -> dict[str, Any]:
        md = body.get("metadata") or {}
        if not md.get("name") and md.get("generateName"):  # the API server's way: the prefix and 5 characters
            md = {**md, "name": f"{md['generateName']}{next(self._uid):05x}"}
            body = {**body, "metadata": md}
        self._check("create", res, md.get("name", ""))
        if dry_run:  # the fake validates nothing: a dry run only tells the test it was asked
            self.dry_runs.append((res.plural, copy.deepcopy(body)))
            return copy.deepcopy(body)
        if (res.plural, namespace or "", md.get("name")) in self.objects:
            raise error_for(409, f'{res.plural} "{md.get("name")}" already exists')
        body = copy.deepcopy(body)
        body.setdefault("metadata", {})["namespace"] = namespace or ""
        body["metadata"].pop("resourceVersion", None)
        return self.put(res, body)

    def replace(self, res: Resource, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check("replace", res, name)
        old = self.objects.get((res.plural, namespace or "", name))
        if old is None:
            raise error_for(404, f'{res.plural} "{name}" not found')
        if (body.get("metadata") or {}).get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise error_for(409, "the object has been modified")
        return self.put(res, copy.deepcopy(body))

    def patch(self, res: Resource, namespace: str | None, name: str, patch: dict[str, Any], *,
              subresource: str | None = None) -> dict[str, Any]:
        self._check("patch-status" if subresource == "status" else "patch", res, name)
        old = self.objects.get((res.plural, namespace or "", name))
        if old is None:
            raise error_for(404, f'{res.plural} "{name}" not found')
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != old["metadata"]["resourceVersion"]:
            raise error_for(409, "the object has been modified; please apply your changes to the latest version")
        if subresource == "status":
            new = copy.deepcopy(old)
            new["status"] = merge_patch(old.get("status"), patch.get("status"))
        else:
            new = merge_patch(old, {k: v for k, v in patch.items() if k != "status"})
        new["metadata"].pop("resourceVersion", None)
        return self.put(res, new)

    def delete(self, res: Resource, namespace: str | None, name: str) -> None:
        self._check("delete", res, name)
        if (res.plural, namespace or "", name) not in self.objects:
            raise error_for(404, f'{res.plural} "{name}" not found')
        self.remove(res, namespace or "", name)

    def evict(self, namespace: str, pod: str) -> None:
        """The Eviction API: the pod gets DisruptionTarget (EvictionByEvictionAPI) and is being deleted; a
        kubelet would stop it (tests finish that with `remove` or a Failed status)."""
        pods = Resource("", "v1", "pods", "Pod")
        self._check("evict", pods, pod)
        old = self.objects.get(("pods", namespace, pod))
        if old is None:
            raise error_for(404, f'pods "{pod}" not found')
        new = copy.deepcopy(old)
        conds = [c for c in (new.setdefault("status", {}).get("conditions") or []) if c.get("type") != "DisruptionTarget"]
        conds.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                      "message": "Eviction API: evicting", "lastTransitionTime": "2026-01-01T00:00:01Z"})
        new["status"]["conditions"] = conds
        new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
        new["metadata"].pop("resourceVersion", None)
        self.put(pods, new)

    def watch(self, res: Resource, namespace: str | None, *, resource_version: str, label_selector: str = "",
              timeout_seconds: int = 300) -> Iterator[dict[str, Any]]:
        self._check("watch", res)
        if int(resource_version or 0) < self.compacted:
            raise error_for(410, "too old resource version")
        for rv, type_, plural, obj in list(self.log):
            if plural != res.plural or rv <= int(resource_version or 0):
                continue
            if namespace is not None and (obj.get("metadata") or {}).get("namespace") != namespace:
                continue
            if _matches(obj, label_selector, ""):
                yield {"type": type_, "object": copy.deepcopy(obj)}
        time.sleep(0.01)  # then the "server" closes the watch, as at its timeout

    def log_lines(self, namespace: str, pod: str, *, container: str | None = None,
                  follow: bool = False) -> Iterator[str]:
        self.calls.append(("log", "pods", pod))
        if follow:
            self.followed.append(pod)
        yield from self.logs.get((namespace, pod), [])
