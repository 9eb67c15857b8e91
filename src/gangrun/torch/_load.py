"""`load_state`: the newest committed torch checkpoint, own attempt first, read by DCP on every rank.

The choice follows `ctx.checkpoint.load()` (catalog.py): this attempt's saves newest first, then each
earlier attempt's, then those at `spec.checkpoint.resumeFrom` (resume.py), loaded as "previous". Rank
0 chooses and tells every rank, so all ranks load the same checkpoint even if a save commits while
they look. A candidate is a torch checkpoint when its manifest lists DCP's
``.metadata`` and gangrun's ``gangrun-torch.json``; one with a file missing or of the wrong size is
skipped with a log line. One that is complete but that DCP cannot load into the given state dict
raises CheckpointError (see `load`): that is a mismatch older checkpoints would not cure.

DCP reshards on load: each rank reads the pieces of every saved shard that overlap what its own
state dict holds, so a checkpoint written by 4 ranks loads on 2 (or 8). `LoadedState.resharded`
says when that happened. Values passed as `per_rank` load on the rank that saved them (_per_rank.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from gangrun._ckpt import catalog, resume, transfer
from gangrun._ckpt.catalog import Candidate
from gangrun._ckpt.layout import DATA, join
from gangrun._ckpt.logs import say
from gangrun._errors import CheckpointError
from gangrun.torch import _dcp, _files, _gang, _per_rank
from gangrun.torch._save import INFO
from gangrun.torch._target import Target

log = logging.getLogger("gangrun")


@dataclass(frozen=True)
class LoadedState:
    """What `load_state` restored."""

    uri: str
    attempt: int
    seq: int
    step: int | None
    loaded_from: Literal["own", "previous"]
    world_size: int  # the world size the checkpoint was written with
    resharded: bool  # True when that differs from this gang's
    per_rank: bool = False  # this rank's per_rank values were loaded (False: the checkpoint has none for it)


@dataclass(frozen=True)
class _Choice:
    path: str  # storage path of the ckpt-<seq> folder
    attempt: int
    seq: int
    step: int | None
    world_size: int
    resumed: bool = False  # found at resume_from, not under the task's own root
    per_rank: tuple[int, ...] = ()  # the ranks that saved per_rank values


def load(target: Target, state_dict: dict[str, Any], per_rank: dict[str, Any] | None = None) -> LoadedState | None:
    group = _gang.side_group()
    world = _gang.world_size()
    choice: _Choice | str | None = None
    if _gang.rank() == 0:
        try:
            choice = next(_committed(target), None)
        except Exception as e:  # every rank must hear it, or they wait in the broadcast forever
            choice = f"could not list checkpoints under {target.root}: {e!r}"
    choice = _gang.broadcast(choice, group)
    if isinstance(choice, str):
        raise CheckpointError(choice)
    if choice is None:
        also = f" nor at resumeFrom {target.resume_from}" if target.resume_from else ""
        say(f"gangrun: no torch checkpoint found (looked in attempts {target.attempt} to 1 under {target.root}{also})")
        return None
    source = (target.resumed() if choice.resumed else None) or target
    uri = source.uri_for_path(choice.path)
    me = _per_rank.own_rank()
    mine = per_rank is not None and _per_rank.loads_section(me, choice.per_rank)
    request = _per_rank.with_section(state_dict, per_rank if mine else None, me)
    try:
        dcp_load(
            request, storage_reader=_dcp.reader(source, join(choice.path, DATA)), process_group=group,
            no_dist=group is None,
        )  # fmt: skip
    except CheckpointException as e:
        # Not skipped like a torn or mismatched checkpoint: its files are all there (checked
        # above), so this is most often a state dict that does not match what was saved (a key
        # renamed, a shape changed), which an older checkpoint would not cure; falling back
        # would silently start training from an older state, or from scratch.
        raise CheckpointError(f"could not load torch checkpoint {uri} into this state dict: {_first(e)}") from e
    if request is not state_dict:  # DCP replaced the copy's plain values, not the caller's
        state_dict.update((k, request[k]) for k in state_dict)
    own = not choice.resumed and choice.attempt == target.attempt
    where = ("this attempt" if own else f"previous attempt {choice.attempt}" if not choice.resumed else
             f"spec.checkpoint.resumeFrom {target.resume_from}")
    resharded = choice.world_size != world
    shape = f"{choice.world_size} ranks" + (f", resharded to {world}" if resharded else "")
    say(f"gangrun: loaded torch checkpoint from {where} (seq {choice.seq}, step {choice.step}, {shape}): {uri}")
    if per_rank is not None and not mine:
        saved = ", ".join(map(str, choice.per_rank)) or "none"
        say(f"gangrun: rank {me}: no per_rank values of this rank in the checkpoint (ranks that saved some: "
            f"{saved}; of {choice.world_size}); per_rank left as it was")  # fmt: skip
    return LoadedState(
        uri=uri, attempt=choice.attempt, seq=choice.seq, step=choice.step, loaded_from="own" if own else "previous",
        world_size=choice.world_size, resharded=resharded, per_rank=mine,
    )  # fmt: skip


def _committed(target: Target) -> Iterator[_Choice]:
    """Committed, complete torch checkpoints, newest first (lazy: stops listing once one is taken): the
    task's own, then those at resume_from."""
    yield from _committed_in(target, catalog.candidates(target.storage, target.root_path, attempt=target.attempt),
                             resumed=False)
    source = target.resumed()
    if source is not None:
        yield from _committed_in(source, resume.candidates(source.storage, source.root_path), resumed=True)


def _committed_in(target: Target, candidates: Iterator[Candidate], *, resumed: bool) -> Iterator[_Choice]:
    storage = target.storage
    for cand in candidates:
        uri = target.uri_for_path(cand.path)
        try:
            manifest = transfer.read_manifest(storage, cand.path)
            if manifest is None:
                log.debug("gangrun: %s has no manifest: an unfinished save, not a checkpoint", uri)
                continue
            names = {f.path for f in manifest.files}
            if manifest.kind != "dir" or not {_dcp.METADATA, INFO} <= names:
                log.debug("gangrun: %s is not a torch checkpoint; skipped", uri)
                continue
            data = join(cand.path, DATA)
            for f in manifest.files:
                have = _files.size(storage, join(data, f.path))
                if have != f.size:
                    raise CheckpointError(f"{f.path} has {have} bytes, manifest says {f.size}")
            info = json.loads(storage.read_bytes(join(data, INFO)))
            world = int(info["world_size"])
            saved_per_rank = tuple(int(r) for r in info.get("per_rank", ()))
        except (CheckpointError, OSError, ValueError, KeyError, TypeError) as e:
            say(f"gangrun: skipping torch checkpoint {uri}: {e}; trying the next one", logging.WARNING)
            continue
        yield _Choice(cand.path, cand.attempt, cand.seq, manifest.step, world, resumed, saved_per_rank)


def _first(e: CheckpointException) -> str:
    """The first rank's error, without DCP's per-rank tracebacks (they go to the debug log)."""
    log.debug("gangrun: DCP load failed: %s", e)
    failures = getattr(e, "failures", None) or {}
    for rank, err in sorted(failures.items()):
        cause = err[0] if isinstance(err, tuple) else err  # DCP pairs each rank's exception with its traceback
        return _per_rank.readable(f"rank {rank}: {cause}")
    return _per_rank.readable(str(e))
