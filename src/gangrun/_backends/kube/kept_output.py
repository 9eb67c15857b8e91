"""Worker output kept past its pods: the ConfigMap `<task>.gangrun-output`, one tail per ended pod.

A pod's log goes with the pod, and a gang's pods are deleted at every whole-gang restart, every
preemption and every new attempt. The controller reads each worker pod's log once, when its worker
container has ended (or, failing that, when the pod is being deleted: `logkeep.py`), and keeps the
newest PER_POD bytes of it here; `gangrun logs` reads them back for the pods that are gone.

    data:
      index.json           [{"key": "a1.r0.3.n0", "attempt": 1, "round": 0, "rank": 0, "pod": "...",
                             "uid": "...", "created": "2026-...Z", "seq": 3, "cut": false}, ...]
      a1.r0.3.n0           the pod's newest lines (at most PER_POD bytes of UTF-8), "\n"-joined

`round` is the JobSet restart number (`jobset.sigs.k8s.io/restart-attempt`). A gang Kueue preempts
and readmits keeps its round, and its new pods are new pieces of the same round: pieces sort by
(attempt, round, pod creation time, rank, seq), so within a round the pods of a gang that ran before a
preemption come before those that ran after it. `seq` counts the pieces kept for the task; a pod is
kept once (by UID). The task keeps at most PER_TASK bytes (a ConfigMap holds 1 MiB): the oldest pieces
go first, in that same order. The ConfigMap is owned by the ClusteredTask, and goes with it.

The functions here are pure: the controller reads, `add`s and writes; the backend `read`s.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

SUFFIX = ".gangrun-output"
INDEX = "index.json"
PER_POD = 64 * 1024  # bytes of a pod's newest output kept
PER_TASK = 900 * 1024  # bytes of a task's kept output, index included (a ConfigMap holds 1 MiB)


def name_of(task: str) -> str:
    """The ConfigMap of a task's kept output."""
    return f"{task}{SUFFIX}"


@dataclass(frozen=True)
class Piece:
    """One pod's kept output, as the index lists it."""

    key: str  # its data key
    attempt: int
    round: int  # the JobSet restart number: a preemption's readmission stays in the same round
    rank: int  # the node index (pod per node): ranks rank*nproc .. rank*nproc + nproc - 1
    pod: str
    uid: str
    created: str  # the pod's creationTimestamp (RFC 3339, sorts as text)
    seq: int  # the order it was kept in, for the task
    cut: bool  # older lines were dropped (more than PER_POD bytes)

    def order(self) -> tuple[int, int, str, int, int]:
        return self.attempt, self.round, self.created, self.rank, self.seq


def tail(lines: Iterable[str], limit: int = PER_POD) -> tuple[str, bool]:
    """The newest whole lines of `lines` whose UTF-8 fits in `limit` bytes ("\n"-joined), read once
    holding no more than that, and whether older ones were left out. A last line longer than `limit`
    keeps its end."""
    kept: deque[tuple[str, int]] = deque()
    size, cut = 0, False
    for line in lines:
        n = len(line.encode()) + 1
        kept.append((line, n))
        size += n
        while size > limit + 1 and len(kept) > 1:
            size -= kept.popleft()[1]
            cut = True
    if size > limit + 1:  # one line longer than the whole budget: its newest bytes
        raw = kept[0][0].encode()[-limit:]
        return raw.decode("utf-8", "ignore"), True
    return "\n".join(line for line, _ in kept), cut


def pieces(data: dict[str, str] | None) -> list[Piece]:
    """The index of a ConfigMap's `data`, oldest first; pieces whose text is missing are left out."""
    data = data or {}
    try:
        raw = json.loads(data.get(INDEX) or "[]")
    except ValueError:
        return []
    out = []
    for entry in raw if isinstance(raw, list) else []:
        try:
            p = Piece(**entry)
        except TypeError:
            continue
        if p.key in data:
            out.append(p)
    return sorted(out, key=Piece.order)


def kept(data: dict[str, str] | None, uid: str) -> bool:
    return any(p.uid == uid for p in pieces(data))


def add(data: dict[str, str] | None, *, attempt: int, round: int, rank: int, pod: str, uid: str, created: str,
        text: str, cut: bool, limit: int = PER_TASK) -> dict[str, str | None]:
    """The merge patch of `data` (a ConfigMap's) that keeps one more pod's output, dropping the oldest
    pieces while the whole would pass `limit` bytes (a dropped key is None). {} if the pod is kept already."""
    data = data or {}
    have = pieces(data)
    if any(p.uid == uid for p in have):
        return {}
    seq = max((p.seq for p in have), default=0) + 1
    new = Piece(key=f"a{attempt}.r{round}.{seq}.n{rank}", attempt=attempt, round=round, rank=rank, pod=pod, uid=uid,
                created=created, seq=seq, cut=cut)
    everything = sorted([*have, new], key=Piece.order)
    texts = {p.key: data[p.key] for p in have} | {new.key: text}
    dropped: list[Piece] = []

    def size() -> int:
        return sum(len(texts[p.key].encode()) + len(p.key) for p in everything) + len(_index(everything))

    while size() > limit and len(everything) > 1:
        oldest = next(p for p in everything if p is not new)
        everything.remove(oldest)
        dropped.append(oldest)
    patch: dict[str, str | None] = {p.key: None for p in dropped}
    patch[new.key] = text
    patch[INDEX] = _index(everything)
    return patch


def read(data: dict[str, str] | None, *, attempt: int, round: int | None = None,
         rank: int | None = None) -> list[tuple[Piece, str]]:
    """The attempt's kept pieces (of one round, of one node index), oldest first, with their text."""
    data = data or {}
    return [(p, data[p.key]) for p in pieces(data)
            if p.attempt == attempt and (round is None or p.round == round) and (rank is None or p.rank == rank)]


def _index(ps: list[Piece]) -> str:
    return json.dumps([asdict(p) for p in ps], separators=(",", ":"))


def merged(data: dict[str, str] | None, patch: dict[str, str | None]) -> dict[str, str]:
    """`data` after `patch` (what the API server does with the merge patch)."""
    out = dict(data or {})
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def configmap(task: str, namespace: str, owner_uid: str, api_version: str, kind: str,
              data: dict[str, str]) -> dict[str, Any]:
    """A new ConfigMap for `task`'s kept output, owned by the task (deleted with it)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name_of(task), "namespace": namespace,
                         "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": task,
                                              "uid": owner_uid}]},
            "data": data}
