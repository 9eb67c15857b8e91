"""How a valid `spec.podTemplate` is used (`pod_template.py` says what one may hold).

    merge_pod_template(template, ...)    the worker pod template: the user's merged with gangrun's
    local_ignored(template)              the fields a local run cannot apply, to report once at submit
    worker_plain_env(template)           the worker container's plain `env` values (they apply locally)

Merge, the way Kubernetes merges lists of named things (strategic merge keys): metadata maps and
`nodeSelector` key by key, `containers`/`initContainers`/`volumes`/`env`/`ports` by name,
`volumeMounts` by mountPath; where both set the same key gangrun's value wins. Everything else
(tolerations, affinity, serviceAccountName, imagePullSecrets, securityContext, sidecars, init
containers, ...) passes through unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from gangrun._core.pod_template import HOST_NETWORK_DNS_POLICY, WORKER


def worker_container(template: Mapping[str, Any]) -> dict[str, Any] | None:
    for c in (template.get("spec") or {}).get("containers") or []:
        if isinstance(c, dict) and c.get("name") == WORKER:
            return dict(c)
    return None


def worker_plain_env(template: Mapping[str, Any]) -> dict[str, str]:
    """The worker container's `env` entries that carry a plain value, in order."""
    worker = worker_container(template)
    env = (worker or {}).get("env") or []
    return {e["name"]: e["value"] for e in env if isinstance(e.get("value"), str) and "valueFrom" not in e}


def local_ignored(template: Mapping[str, Any]) -> list[str]:
    """The fields of a podTemplate that a local run ignores: everything but the worker's plain env.

    A local backend reports them once, at submit, so nothing a user wrote is dropped silently.
    """
    base = "spec.podTemplate"
    out = [f"{base}.metadata.{k}" for k, v in (template.get("metadata") or {}).items() if v]
    for key, value in (template.get("spec") or {}).items():
        if key != "containers":
            if value not in (None, [], {}):
                out.append(f"{base}.spec.{key}")
            continue
        for c in value:
            where = f"{base}.spec.containers[{c['name']}]"
            if c["name"] != WORKER:
                out.append(where)
                continue
            out += [f"{where}.{k}" for k, v in c.items() if k not in ("name", "env") and v not in (None, [], {})]
            out += [f"{where}.env[{e['name']}]" for e in c.get("env") or [] if "value" not in e]
    return out


def merge_named(theirs: Iterable[dict[str, Any]], ours: Iterable[dict[str, Any]], *keys: str,
                ours_first: bool = False) -> list[dict[str, Any]]:
    """Merge two lists of named things: an item of `theirs` that shares any of `keys` with one of
    `ours` is dropped (ours wins); `ours_first` puts gangrun's items before the user's."""
    ours = [dict(o) for o in ours]
    taken = {(k, o[k]) for o in ours for k in keys if k in o}
    kept = [dict(t) for t in theirs if not any((k, t.get(k)) in taken for k in keys if k in t)]
    return ours + kept if ours_first else kept + ours


def merge_pod_template(template: Mapping[str, Any], *, labels: Mapping[str, str], annotations: Mapping[str, str],
                       pod: Mapping[str, Any], worker: Mapping[str, Any], volumes: Iterable[dict[str, Any]] = ()
                       ) -> dict[str, Any]:
    """The worker pods' template: the user's `template` with gangrun's pod fields, worker container and
    volumes merged in. gangrun's values win wherever both set the same key."""
    tpl = copy.deepcopy(dict(template))
    meta = tpl.get("metadata") or {}
    spec = dict(tpl.get("spec") or {})
    out_meta: dict[str, Any] = {"labels": {**(meta.get("labels") or {}), **labels}}
    merged_annotations = {**(meta.get("annotations") or {}), **annotations}
    if merged_annotations:
        out_meta["annotations"] = merged_annotations
    theirs = worker_container(tpl) or {}
    own_worker = dict(worker)
    container = {**own_worker, **{k: v for k, v in theirs.items() if k not in own_worker}}
    container["env"] = merge_named(theirs.get("env") or [], own_worker.get("env") or [], "name", ours_first=True)
    container["ports"] = merge_named(theirs.get("ports") or [], own_worker.get("ports") or [], "name",
                                     "containerPort")
    mounts = merge_named(theirs.get("volumeMounts") or [], own_worker.get("volumeMounts") or [], "mountPath")
    if mounts:
        container["volumeMounts"] = mounts
    containers = [container] + [c for c in spec.get("containers") or [] if c.get("name") != WORKER]
    spec.update({k: v for k, v in pod.items()})
    if spec.get("hostNetwork") is True:
        spec.setdefault("dnsPolicy", HOST_NETWORK_DNS_POLICY)
    if "nodeSelector" in pod:
        spec["nodeSelector"] = {**(tpl.get("spec", {}).get("nodeSelector") or {}), **pod["nodeSelector"]}
    spec["containers"] = containers
    all_volumes = merge_named(spec.get("volumes") or [], volumes, "name")
    if all_volumes:
        spec["volumes"] = all_volumes
    return {"metadata": out_meta, "spec": spec}
