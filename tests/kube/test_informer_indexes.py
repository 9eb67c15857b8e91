"""Informer indexes stay equal to a scan of the cache through adds, label changes, deletes and
relists, so the controller can read a task's objects by index (issue #12 item 3)."""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangrun._backends.kube import crd, indexes
from gangrun._backends.kube.client import JOBSETS, WORKLOADS
from gangrun._backends.kube.informer import Informer
from gangrun._core import kueue
from tests.harness.kube_fake import FakeApi


def obj(name: str, *, ns: str = "ml", task: str | None = None, uid: str = "", rv: int = 1) -> dict[str, Any]:
    labels = {crd.TASK_LABEL: task} if task else {}
    return {"metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": str(rv), "labels": labels}}


def names(objs: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def jobset_informer(api: FakeApi | None = None) -> Informer:
    return Informer(api or FakeApi(), JOBSETS, namespace=None, indexers=indexes.JOBSET_INDEXERS)


def test_an_added_object_is_found_under_its_task_and_uid() -> None:
    inf = jobset_informer()
    inf.upsert(obj("train-1", task="train", uid="u1"))
    inf.upsert(obj("other-1", task="other", uid="u2"))
    assert names(inf.by_index(indexes.BY_TASK, ("ml", "train"))) == ["train-1"]
    assert names(inf.by_index(indexes.BY_UID, "u2")) == ["other-1"]
    assert inf.by_index(indexes.BY_TASK, ("other-ns", "train")) == []  # a task is namespaced


def test_an_update_that_changes_the_label_moves_the_object_between_buckets() -> None:
    inf = jobset_informer()
    inf.upsert(obj("js", task="a", rv=1))
    inf.upsert(obj("js", task="b", rv=2))
    assert inf.by_index(indexes.BY_TASK, ("ml", "a")) == []
    assert names(inf.by_index(indexes.BY_TASK, ("ml", "b"))) == ["js"]
    assert inf.by_index(indexes.BY_TASK, ("ml", "b"))[0]["metadata"]["resourceVersion"] == "2"


def test_a_stale_update_refused_by_the_cache_leaves_the_index_alone() -> None:
    inf = jobset_informer()
    inf.upsert(obj("js", task="a", rv=5))
    assert not inf.upsert(obj("js", task="b", rv=4))
    assert names(inf.by_index(indexes.BY_TASK, ("ml", "a"))) == ["js"]
    assert inf.by_index(indexes.BY_TASK, ("ml", "b")) == []


def test_a_delete_unfiles_what_was_cached_even_when_the_deleted_object_carries_other_labels() -> None:
    inf = jobset_informer()
    inf.upsert(obj("js", task="a", uid="u1"))
    inf.remove(obj("js", task="b"))  # the tombstone's labels need not match the cached object's
    assert inf.by_index(indexes.BY_TASK, ("ml", "a")) == [] and inf.by_index(indexes.BY_UID, "u1") == []
    assert inf._indices == {indexes.BY_TASK: {}, indexes.BY_UID: {}}  # no empty buckets left to grow


def test_a_relist_rebuilds_the_index_from_the_fresh_list() -> None:
    api = FakeApi()
    inf = jobset_informer(api)
    api.put(JOBSETS, obj("a-1", task="a"))
    api.put(JOBSETS, obj("b-1", task="b"))
    inf.relist()
    api.remove(JOBSETS, "ml", "a-1")
    relabelled = api.obj(JOBSETS, "ml", "b-1")
    relabelled["metadata"]["labels"][crd.TASK_LABEL] = "c"
    api.put(JOBSETS, relabelled)
    inf.relist()
    assert inf.by_index(indexes.BY_TASK, ("ml", "a")) == [] and inf.by_index(indexes.BY_TASK, ("ml", "b")) == []
    assert names(inf.by_index(indexes.BY_TASK, ("ml", "c"))) == ["b-1"]


def test_cached_objects_carry_no_managed_fields_from_a_list_or_a_watch() -> None:
    api = FakeApi()
    inf = jobset_informer(api)
    listed = obj("a-1", task="a")
    listed["metadata"]["managedFields"] = [{"manager": "kueue", "fieldsV1": {"f:spec": {}}}]
    api.put(JOBSETS, listed)
    inf.relist()
    watched = obj("b-1", task="b")
    watched["metadata"]["managedFields"] = [{"manager": "jobset"}]
    inf.handle({"type": "ADDED", "object": watched})
    assert all("managedFields" not in o["metadata"] for o in inf.items())
    assert names(inf.items()) == ["a-1", "b-1"]


def test_objects_without_the_label_or_uid_are_filed_under_nothing() -> None:
    inf = jobset_informer()
    inf.upsert(obj("stray"))
    assert inf._indices == {indexes.BY_TASK: {}, indexes.BY_UID: {}}
    assert names(inf.items()) == ["stray"]


def test_workloads_are_found_by_the_job_uid_label_kueue_sets() -> None:
    inf = Informer(FakeApi(), WORKLOADS, namespace=None, indexers=indexes.WORKLOAD_INDEXERS)
    wl = obj("jobset-train-1-ab12c")
    wl["metadata"]["labels"] = {kueue.JOB_UID_LABEL: "js-uid"}
    inf.upsert(wl)
    assert names(inf.by_index(indexes.BY_JOB_UID, "js-uid")) == ["jobset-train-1-ab12c"]


def test_an_unknown_index_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        jobset_informer().by_index("nope", "x")


def scan(inf: Informer, name: str) -> dict[Hashable, list[str]]:
    """What the index must hold: every cached object filed by the index function, found by a scan."""
    out: dict[Hashable, list[str]] = {}
    for o in inf.items():
        for value in indexes.JOBSET_INDEXERS[name](o):
            out.setdefault(value, []).append(o["metadata"]["name"])
    return {k: sorted(v) for k, v in out.items()}


OPS = st.lists(st.tuples(st.sampled_from(["upsert", "remove", "relist"]), st.sampled_from(["x", "y", "z"]),
                         st.sampled_from([None, "a", "b"]), st.sampled_from(["", "u1", "u2"])), max_size=30)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, seed=st.integers(0, 2**16))
def test_the_index_always_equals_a_scan_of_the_cache(ops: list[tuple[str, str, str | None, str]], seed: int) -> None:
    rng = random.Random(seed)
    api = FakeApi()
    inf = jobset_informer(api)
    for op, name, task, uid in ops:
        o = obj(name, task=task, uid=uid, rv=rng.randint(1, 5))
        if op == "upsert":
            inf.upsert(o)
        elif op == "remove":
            inf.remove(o)
        else:  # the server's truth differs from the cache: one object replaced, the rest as cached
            api.put(JOBSETS, obj(name, task=task, uid=uid))
            inf.relist()
        for index in (indexes.BY_TASK, indexes.BY_UID):
            want = scan(inf, index)
            assert {v: sorted(names(inf.by_index(index, v))) for v in want} == want
            assert set(inf._indices[index]) == set(want)  # and no bucket left over
