"""`gangrun logs` on a cluster: an attempt's worker output, first what the controller kept of pods that
are gone (`kept_output.py`), then the pods still there, read or followed (`logfollow.py`).

The task is read, and API errors explained, as the backend does for every call (`backend.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from gangrun._backends.clock import system_clock
from gangrun._backends.kube import adapter, crd, fields, kept_output, logfollow
from gangrun._backends.kube.client import CONFIGMAPS, PODS, KubeApi
from gangrun._backends.kube.render import CONTAINER
from gangrun._backends.kube.stored import load_state, spec_or_none
from gangrun._core import jobset
from gangrun._core.phases import Phase
from gangrun._errors import ApiError, NotFound, UsageError


@dataclass(frozen=True)
class WorkerLogs:
    api: KubeApi
    namespace: str
    task: Callable[[str], dict[str, Any]]  # the ClusteredTask of a name, read now
    calling: Callable[[str], AbstractContextManager[None]]  # API errors explained, naming what was done
    explain: Callable[[ApiError, str], ApiError]
    poll: float  # seconds between the listings of pods `follow` makes

    def read(self, name: str, *, rank: int | None, attempt: int | None, round: int | None,
             follow: bool) -> Iterator[str]:
        """The attempt's worker output: first what the controller kept of pods that are gone
        (`kept_output.py`), oldest first, then the pods still there (of `round`, else of the newest round)."""
        task = self.task(name)
        status, spec = task.get("status") or {}, spec_or_none(task)
        current = int(status.get("attempt") or 1)
        n = attempt or current
        if not 1 <= n <= current:
            raise UsageError(f'task "{name}" has attempts 1..{current}, not {n}')
        # A spec gangrun refuses never ran a worker: its one rank has no output, which is said below.
        nproc, world = (spec.nproc_per_node, spec.world_size) if spec is not None else (1, 1)
        if rank is not None and not 0 <= rank < world:
            raise UsageError(f'task "{name}" has ranks 0..{world - 1}, not {rank}')
        if round is not None and round < 0:
            raise UsageError(f"a round is a JobSet restart number, 0 or more, not {round}")
        if follow and round is not None:
            raise UsageError("--round (round=) shows one round's output; --follow (follow=True) follows the attempt "
                             "from its first round on: use one or the other")
        node = None if rank is None else rank // nproc  # one pod per node runs ranks node*nproc .. +nproc-1
        prefix = rank is None and world > 1
        if follow:
            yield from self._follow(name, n, node, prefix, task)
            return
        with self.calling("read the worker pods of"):
            there = [(r, p, u) for r, p, u in self._round_pods(name, n, uid=adapter.uid(task), round=round)
                     if node is None or r == node]
        pods = [(r, p) for r, p, _ in there]
        kept = [(piece, text) for piece, text in self._kept(name, task, n, round, node)
                if piece.uid not in {u for _, _, u in there}]  # a pod still there is read whole, not its tail
        if not pods and not kept:
            state = load_state(task, now=system_clock())
            # An open eviction of a Running task is a preempted gang kept for re-admission (S5).
            if n == current and round is None and state.eviction is not None and state.phase is Phase.RUNNING:
                raise UsageError(f"task {name} was preempted and its workers are stopped until Kueue admits it "
                                 f"again ({state.info.reason})")
            which = f"rank {rank} of " if rank is not None else ""
            which += f"round {round} of " if round is not None else ""
            raise UsageError(f"no worker pods for {which}attempt {n} of task {name} (yet, or any more), "
                             f"and no output kept of them")
        for piece, text in kept:
            yield from _kept_lines(piece, text, prefix=prefix)
        with self.calling("read the logs of"):
            for r, pod in pods:
                for line in self.api.log_lines(self.namespace, pod, container=CONTAINER):
                    yield f"[rank {r}] {line}" if prefix else line

    def _kept(self, name: str, task: dict[str, Any], attempt: int, round: int | None,
              node: int | None) -> list[tuple[kept_output.Piece, str]]:
        """The output the controller kept of the attempt's gone pods; none where the ConfigMap is missing, or
        a user may not read it (then `logs` shows the pods still there, as before kept output)."""
        try:
            cm = self.api.get(CONFIGMAPS, self.namespace, kept_output.name_of(name))
        except NotFound:
            return []
        except ApiError as e:
            if e.status == 403:
                return []
            raise self.explain(e, "read the kept output of") from None
        if not adapter.belongs_to(cm, adapter.uid(task)):
            return []  # an earlier task's of this name, not yet collected
        return kept_output.read(cm.get("data"), attempt=attempt, round=round, rank=node)

    def _follow(self, name: str, attempt: int, node: int | None, prefix: bool,
                task: dict[str, Any]) -> Iterator[str]:
        """Follow the attempt's worker output until the task ends or moves to a later attempt: first the
        kept output of its pods that are gone, then every round's pods (a gang readmitted after a
        preemption, or restarted whole, runs in new pods), each streamed once as it starts (`logfollow.py`)."""
        uid = adapter.uid(task)
        with self.calling("read the worker pods of"):
            there = {u for _, _, u in self._round_pods(name, attempt, uid=uid)}
        shown: set[str] = set()  # UIDs of the pods whose kept output was printed
        for piece, text in self._kept(name, task, attempt, None, node):
            if piece.uid in there:
                continue  # still there: streamed from its first line below
            shown.add(piece.uid)
            yield from _kept_lines(piece, text, prefix=prefix)

        def ended() -> bool:
            nonlocal uid
            task = self.task(name)
            uid = adapter.uid(task)
            current = int((task.get("status") or {}).get("attempt") or 1)
            return load_state(task, now=system_clock()).phase.terminal or current > attempt

        def pods() -> list[tuple[int, str]]:
            with self.calling("read the worker pods of"):
                return [(r, p) for r, p, u in self._round_pods(name, attempt, running=True, uid=uid)
                        if (node is None or r == node) and u not in shown]

        def stream(pod: str) -> Iterator[str]:
            with self.calling("read the logs of"):
                yield from self.api.log_lines(self.namespace, pod, container=CONTAINER, follow=True)

        yield from logfollow.follow(pods=pods, ended=ended, stream=stream, prefix=prefix, poll=self.poll)

    def _round_pods(self, name: str, attempt: int, *, running: bool = False, uid: str = "",
                    round: int | None = None) -> list[tuple[int, str, str]]:
        """(node index, pod name, pod UID) of the attempt's pods of `round`, else of its newest round (of the
        task with `uid`: not an earlier task's of the same name); `running`: only pods whose container
        started (a pod still being created has no log to stream yet)."""
        selector = f"{crd.TASK_LABEL}={name},{crd.ATTEMPT_LABEL}={attempt}"
        items = [p for p in self.api.list(PODS, self.namespace, label_selector=selector).get("items") or []
                 if adapter.belongs_to(p, uid)]
        if round is None:
            round = max((int(fields.labels(p).get(jobset.RESTART_ATTEMPT_KEY, "0") or 0) for p in items), default=0)
        out = []
        for p in adapter.current_round(items, round):
            if running and (p.get("status") or {}).get("phase") == "Pending":
                continue
            md = p.get("metadata") or {}
            index = (md.get("annotations") or {}).get(jobset.JOB_COMPLETION_INDEX_KEY) \
                or fields.labels(p).get(jobset.JOB_COMPLETION_INDEX_KEY, "")
            if str(index).isdigit():
                out.append((int(index), md.get("name", ""), str(md.get("uid") or "")))
        return sorted(out)


def _kept_lines(piece: kept_output.Piece, text: str, *, prefix: bool) -> Iterator[str]:
    """A gone pod's kept output, a line at a time, prefixed with its rank as live pods' lines are."""
    for line in text.split("\n") if text else []:
        yield f"[rank {piece.rank}] {line}" if prefix else line
