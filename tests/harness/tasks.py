"""ClusteredTasks on the test cluster, as the end-to-end tests and benchmarks read them: their path, labels and
status, a wait for a status, and a recorder of every change to their pods (from a :class:`Watch`)."""

from __future__ import annotations

from typing import Any

from tests.harness.client import Kube, Watch
from tests.harness.controlplane import ControlPlane

TIMEOUT = 120.0
GROUP, VERSION, PLURAL = "gangrun.dev", "v1alpha1", "clusteredtasks"
TASK_LABEL = "gangrun.dev/task"
ATTEMPT_LABEL = "gangrun.dev/attempt"


def task_path(ns: str, name: str | None = None) -> str:
    p = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}"
    return p + f"/{name}" if name else p


def status(kube: Kube, ns: str, name: str) -> dict:
    return kube.request("GET", task_path(ns, name)).get("status") or {}


def wait_status(kube: Kube, ns: str, name: str, pred, what: str, ctl: Any = None,
                timeout: float = TIMEOUT) -> dict:
    last: dict = {}

    def check():
        nonlocal last
        if ctl is not None:
            ctl.check()
        last = status(kube, ns, name)
        return last if pred(last) else None

    try:
        return kube.wait_for(f"task {ns}/{name}: {what}", check, timeout=timeout, interval=0.2)
    except TimeoutError as e:
        raise AssertionError(f"{e}; last status: phase={last.get('phase')} attempt={last.get('attempt')} "
                             f"reason={last.get('reason')!r}\n"
                             + (ctl.log()[-4000:] if ctl else "")) from None


class PodRecorder:
    """Every change to the pods of a namespace, in the API server's order: (resourceVersion, name, pod)."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        self.changes: list[tuple[int, str, dict]] = []
        self.seen_at: dict[int, float] = {}  # resourceVersion -> when the watch delivered it
        self._watch = Watch(cp, ns, "pod", self._add, label_selector=TASK_LABEL, timeout_seconds=5)

    def _add(self, t: float, _type: str, obj: dict) -> None:
        md = obj["metadata"]
        self.changes.append((int(md["resourceVersion"]), md["name"], obj))
        self.seen_at.setdefault(int(md["resourceVersion"]), t)

    def stop(self) -> None:
        self._watch.stop()

    def first(self, name: str, pred) -> int | None:
        """The resourceVersion of the first change of pod `name` that satisfies `pred`."""
        return min((rv for rv, n, o in self.changes if n == name and pred(o)), default=None)
