"""Where checkpoints live, and how their names are read back.

One task's checkpoints sit under one root; every attempt has its own folder (the worker contract:
attempt N saves under ``<root>/attempt-<N>``), and every save inside it is numbered::

    <spec.checkpoint.uri>/<task>/            # the root
      attempt-1/
        ckpt-000001/                         # committed: final name + manifest
          data/...                           #   a directory save: the tree itself
          manifest.json                      #   written last (sizes, checksums, step)
        ckpt-000002.tmp-3f2a.../             # not committed (rename stores): never loaded, removed later
      attempt-2/
        ckpt-000001/                         # seq counts per attempt folder; newest = (attempt, seq)
          data/payload                       #   a bytes save (a file save keeps its own name)
          manifest.json
        ckpt-000002/                         # object stores: final name from the start; without
          data/...                           #   manifest.json it is not committed (torn save)
        ckpt-000003/                         # a sharded save: one part per rank, one commit
          data/rank-00000/...                #   rank 0's part (bytes, file or directory)
          data/rank-00001/...
          parts/rank-00001.json              #   each rank's part marker, written after its data
          manifest.json                      #   kind "sharded": world size and every part
        ckpt-000004.shard-r0-s140/           # a sharded save in progress (rename stores), the same
                                             #   name on every rank: restart attempt 0, step 140
      shards-r0-s140.json                    # its rendezvous: the seq rank 0 chose, read by the others
                                             #   (marked abandoned if rank 0 gave the save up)

The newest complete checkpoint is found by listing names only: attempts by number, then saves by seq,
both newest first; no byte of data is read until a candidate is chosen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gangrun._core.checkpoint_root import attempt_name as attempt_name  # the folder name is the contract's

MANIFEST = "manifest.json"
DATA = "data"
BYTES_NAME = "payload"
PARTS = "parts"

_ATTEMPT = re.compile(r"^attempt-([1-9][0-9]*)$")
# "ckpt-000012" is a final name; "ckpt-000012.<suffix>" is a leftover of an unfinished write or delete.
_ENTRY = re.compile(r"^ckpt-([0-9]{6,})(?:\.(.+))?$")


def parse_attempt(name: str) -> int | None:
    """The attempt number of a folder name, or None when the name is not an attempt folder."""
    m = _ATTEMPT.match(name)
    return int(m.group(1)) if m else None


def entry_name(seq: int) -> str:
    return f"ckpt-{seq:06d}"


@dataclass(frozen=True, order=True)
class Entry:
    """One name found in an attempt folder. `final` is False for tmp/trash leftovers."""

    seq: int
    name: str
    final: bool


def part_name(rank: int) -> str:
    """The folder of one rank's part under ``data/`` (and, + ".json", its marker under ``parts/``)."""
    return f"rank-{rank:05d}"


def shard_tag(restart: int, step: int) -> str:
    """What names one sharded save on every rank before its seq is known: (restart attempt, step)."""
    return f"shard-r{restart}-s{step}"


def rendezvous_name(restart: int, step: int) -> str:
    return f"shards-r{restart}-s{step}.json"


def is_rendezvous(name: str) -> bool:
    return re.match(r"^shards-r[0-9]+-s-?[0-9]+\.json(\.part)?$", name) is not None


def parse_entry(name: str) -> Entry | None:
    """Read a name listed in an attempt folder; None for names gangrun did not write."""
    m = _ENTRY.match(name.rstrip("/"))
    if not m:
        return None
    return Entry(seq=int(m.group(1)), name=name.rstrip("/"), final=m.group(2) is None)


def split_attempt_path(uri: str) -> tuple[str, int] | None:
    """Split ``<root>/attempt-<N>`` into (root, N); None when the last part is not ``attempt-<N>``."""
    stripped = uri.rstrip("/")
    parent, sep, last = stripped.rpartition("/")
    n = parse_attempt(last)
    if not sep or n is None or not parent:
        return None
    return parent, n


def join(base: str, *parts: str) -> str:
    """Join URI parts with '/' (fsspec paths and local paths both accept it)."""
    out = base.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out
