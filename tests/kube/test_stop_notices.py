"""The controller's memory of the stop notices it wrote, laid over a cache that has not seen them yet."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from gangrun._backends.kube import crd, stop_notices
from gangrun._backends.kube.reconcile import AnnotatePods
from gangrun._backends.kube.stop_notices import StopNotices
from gangrun._core import stop_causes
from gangrun._errors import ApiError, NotFound

MAINTENANCE = json.dumps({"cause": stop_causes.NODE_MAINTENANCE, "message": "node a is about to go", "deadline": 1.0})


class Api:
    """A pod patch that waits until `release` is set, then answers, or raises `error`."""

    def __init__(self, error: Exception | None = None) -> None:
        self.release, self.error = threading.Event(), error
        self.patched: list[tuple[str, dict[str, Any]]] = []

    def patch(self, _res: Any, _ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.release.wait(5)
        if self.error is not None:
            raise self.error
        self.patched.append((name, body))
        return {"metadata": {"name": name, **body["metadata"]}}


def pod(name: str, notice: str | None = None) -> dict[str, Any]:
    annotations = {crd.STOP_NOTICE_ANNOTATION: notice} if notice is not None else {}
    return {"metadata": {"name": name, "annotations": annotations}, "status": {"phase": "Running"}}


def told(p: dict[str, Any]) -> str | None:
    return p["metadata"]["annotations"].get(crd.STOP_NOTICE_ANNOTATION)


def test_b9_a_notice_being_written_is_seen_by_the_next_sync_before_the_cache_has_it() -> None:
    """A drain: the cordon's NodeMaintenance notice is in flight when the eviction's sync reads the pods;
    it must read them told, or it would tell them NodeDisruption over it."""
    api = Api()
    notices = StopNotices(api)  # type: ignore[arg-type]
    try:
        written = notices.write("ns", [AnnotatePods(names=("w-0", "w-1"), notice=MAINTENANCE)])
        seen = notices.overlay("ns", [pod("w-0"), pod("w-1"), pod("other")])
        assert [told(p) for p in seen] == [MAINTENANCE, MAINTENANCE, None]
        assert notices.overlay("elsewhere", [pod("w-0")])[0] == pod("w-0")  # a pod of that name elsewhere
        api.release.set()
        for f in written:
            f.result(timeout=5)
        assert sorted(api.patched) == [(n, {"metadata": {"annotations": {crd.STOP_NOTICE_ANNOTATION: MAINTENANCE}}})
                                       for n in ("w-0", "w-1")]  # one annotation, the notice
        # Written, the cache not there yet: still laid over; once it shows the notice, forgotten.
        assert told(notices.overlay("ns", [pod("w-0")])[0]) == MAINTENANCE
        assert told(notices.overlay("ns", [pod("w-0", MAINTENANCE)])[0]) == MAINTENANCE
        assert told(notices.overlay("ns", [pod("w-0", "{}")])[0]) == "{}"  # the cache's own, later
    finally:
        notices.close()


@pytest.mark.parametrize("error", [NotFound(404, "pod gone"), ApiError(500, "etcd timeout")])
def test_a_notice_that_was_not_written_is_not_laid_over_the_cache(error: Exception) -> None:
    api = Api(error)
    notices = StopNotices(api)  # type: ignore[arg-type]
    try:
        (written,) = notices.write("ns", [AnnotatePods(names=("w-0",), notice=MAINTENANCE)])
        api.release.set()
        if isinstance(error, NotFound):
            assert written.result(timeout=5) is None  # a pod already gone needs no notice
        else:
            with pytest.raises(ApiError):
                written.result(timeout=5)
        assert told(notices.overlay("ns", [pod("w-0")])[0]) is None  # the next sync tells it again
    finally:
        notices.close()


def test_the_notices_kept_for_a_stale_cache_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod that goes before any sync sees its notice cached is never looked at again: the oldest go."""
    monkeypatch.setattr(stop_notices, "TOLD_LIMIT", 2)
    api = Api()
    api.release.set()
    notices = StopNotices(api)  # type: ignore[arg-type]
    try:
        for name in ("w-0", "w-1", "w-2"):
            notices.write("ns", [AnnotatePods(names=(name,), notice=MAINTENANCE)])
        assert [told(p) for p in notices.overlay("ns", [pod("w-0"), pod("w-1"), pod("w-2")])] == [
            None, MAINTENANCE, MAINTENANCE]
    finally:
        notices.close()
