"""A pod's stop notice: what the controller pushes and what the pod's annotation says, in one file.

On Kubernetes the controller tells a worker why and until when it is stopped in two ways at once: the
pod annotation `gangrun.dev/stop-notice`, which the kubelet projects as a file
(GANGRUN_STOP_ANNOTATION_FILE), and a POST of the same JSON to the launcher's report port
(`worker_env.NOTICE_PATH`). The push lands in milliseconds. The projection waits for the kubelet's next
sync of the pod (hundreds of milliseconds) and never comes once the pod is being deleted, which is how
Kueue's own evictions end a gang: a notice the controller wrote in time could still reach no worker.

The launcher keeps GANGRUN_STOP_FILE (in the pod's writable run folder) as what the worker reads at
SIGTERM (`gangrun._ckpt.notice`):

    PodNotice(path, annotation)
      .pushed(body) -> bool   a POSTed notice, written (atomically) when it replaces what is there
                              (`stop_causes.replaces`); False for a body that is not a notice
      .clear()                a new round of an in-place restart: no notice yet (the file goes)
      .at_stop()              at SIGTERM, before it is forwarded: the annotation's notice, unless it is
                              one the controller pushed already (an older one is projected late) or the
                              one there replaces it
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from gangrun._core import stop_causes


def _parse(data: bytes) -> dict[str, Any] | None:
    """A notice as the controller writes it ({"cause", "message", "deadline"}), or None."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("cause"), str) or not doc["cause"]:
        return None
    if doc.get("deadline") is not None and not isinstance(doc["deadline"], int | float):
        return None
    return {"cause": doc["cause"], "message": doc.get("message"), "deadline": doc.get("deadline")}


class PodNotice:
    def __init__(self, path: str, annotation: str) -> None:
        self._path, self._annotation = path, annotation
        self._lock = threading.Lock()
        self._current: dict[str, Any] | None = None
        self._pushed: list[dict[str, Any]] = []

    def pushed(self, body: bytes) -> bool:
        notice = _parse(body)
        if notice is None:
            return False
        with self._lock:
            self._pushed.append(notice)
            self._offer(notice)
        return True

    def clear(self) -> None:
        with self._lock:
            self._current = None
            try:
                os.unlink(self._path)
            except OSError:
                pass

    def at_stop(self) -> None:
        try:
            with open(self._annotation, "rb") as f:
                notice = _parse(f.read())
        except OSError:
            return
        with self._lock:
            if notice is not None and notice not in self._pushed:
                self._offer(notice)

    def _offer(self, notice: dict[str, Any]) -> None:
        told = self._current["cause"] if self._current is not None else None
        if not stop_causes.replaces(told, notice["cause"]):
            return
        tmp = f"{self._path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                json.dump(notice, f, sort_keys=True)
            os.replace(tmp, self._path)
        except OSError:
            return  # the worker then reads no cause, as it would with no notice at all
        self._current = notice
