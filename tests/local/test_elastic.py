"""Elastic gangs on the local backend, with real processes: start on what fits, shrink instead of
waiting, grow back; the workers see the size they run at, and no budget is spent."""

from __future__ import annotations

import re

from gangrun._backends.local import LocalBackend

from .conftest import checkpointed, phase, wait_for


def starts(lines: list[str]) -> list[tuple[int, int, str]]:
    """(world size, resumed-from step, loaded_from) of every rank-0 start."""
    return [(int(m[3]), int(m[1]), m[2]) for line in lines
            if (m := re.search(r"rank=0 resumed_from=(\d+) loaded_from=(\w+) .* world=(\d+)", line))]


def resized(b: LocalBackend, name: str) -> list[tuple[int, int]]:
    return [(e.data["from"], e.data["to"]) for e in b.events(name) if e.type.value == "Resized"]


def test_elastic_gang_shrinks_instead_of_waiting_then_grows_back_in_one_attempt(backend: LocalBackend,
                                                                               manifest) -> None:
    backend.up(cpu="4", memory="2Gi", gpu=0)
    backend.submit(manifest("train", nodes=4, steps=60, step_seconds=0.15, resume=True, priority="low",
                            extra={"minNodes": 2, "resizeCooldown": "1s"}))
    first = wait_for(backend, "train", checkpointed(4), what="step 4 saved at 4 nodes")
    assert (first["nodes"], first["minNodes"], first["runningNodes"]) == (4, 2, 4)
    backend.submit(manifest("urgent", nodes=2, steps=12, step_seconds=0.15, priority="high"))
    small = wait_for(backend, "train", lambda v: v["runningNodes"] == 2, what="running on 2 nodes")
    assert small["attempt"] == 1 and small["phase"] == "Running"
    wait_for(backend, "urgent", phase("Succeeded"))
    wait_for(backend, "train", lambda v: v["runningNodes"] == 4, what="grown back to 4 nodes")
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["userRetriesUsed"], done["systemRetriesUsed"]) == (1, 0, 0)
    assert resized(backend, "train") == [(4, 2), (2, 4)]
    worlds = starts(list(backend.logs("train", rank=0)))
    assert [w for w, _, _ in worlds] == [4, 2, 4], worlds
    steps = [s for _, s, _ in worlds]
    assert steps[0] == 0 and steps[1] >= 4 and steps[2] >= steps[1], worlds  # each start loads the newest
    assert all(src == "own" for _, _, src in worlds[1:]), worlds


def test_elastic_gang_starts_on_what_fits_without_preempting(backend: LocalBackend, manifest) -> None:
    backend.up(cpu="4", memory="2Gi", gpu=0)
    backend.submit(manifest("peer", nodes=1, steps=40, priority="low"))
    wait_for(backend, "peer", lambda v: v["runningNodes"] == 1, what="peer running")
    backend.submit(manifest("train", nodes=4, steps=3, resume=True, priority="low",
                            extra={"minNodes": 2, "resizeCooldown": "1h"}))
    view = wait_for(backend, "train", lambda v: v["runningNodes"] == 3, what="running on the 3 nodes that fit")
    assert backend.get("peer")["phase"] == "Running"  # nobody was preempted for it
    admitted = next(e for e in backend.events("train") if e.type.value == "Admitted")
    assert "on 3 of 4 nodes" in admitted.message
    assert view["gang"]["nodes"] == 3
    assert wait_for(backend, "train", phase("Succeeded"))["attempt"] == 1
    assert [w for w, _, _ in starts(list(backend.logs("train", rank=0)))] == [3]  # cooldown: never grew
    backend.cancel("peer")


def test_a_gang_that_is_not_elastic_waits_for_its_full_size(backend: LocalBackend, manifest) -> None:
    backend.up(cpu="4", memory="2Gi", gpu=0)
    backend.submit(manifest("peer", nodes=1, steps=40, priority="low"))
    wait_for(backend, "peer", lambda v: v["runningNodes"] == 1, what="peer running")
    backend.submit(manifest("train", nodes=4, steps=3, priority="low"))
    view = wait_for(backend, "train", lambda v: bool(v["pending"]), what="pending")
    assert view["runningNodes"] == 0 and "waiting for quota" in view["pending"]
    backend.cancel("peer")
    backend.cancel("train")
