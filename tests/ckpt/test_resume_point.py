"""B7: one resume point per gang start. Every rank of a start loads the checkpoint rank 0 chose for it,
whatever was committed, removed or still being written by the time a slow rank gets to its load:
rank 0 trained on and committed, `keep_last` retention ran, a `resumeFrom` source kept saving, or the
slow rank loaded first and had to wait for rank 0. A new start chooses anew.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from gangrun import Checkpoint
from gangrun._ckpt import catalog, resume_point
from gangrun._ckpt.layout import join
from gangrun._errors import CheckpointError


def ranks(make: Callable[..., Checkpoint], start: str, world: int = 2, **kw: object) -> list[Checkpoint]:
    return [make(1, rank=r, world_size=world, start=start, **kw) for r in range(world)]


def step_of(ckpt: Checkpoint) -> int | None:
    path = ckpt.load()
    return None if path is None else int(path.read_bytes().decode().removeprefix("step-"))


def test_b7_a_rank_that_loads_after_rank_0_committed_a_new_save_loads_what_rank_0_loaded(store, run_history) -> None:
    run_history(store, {1: [10, 20]})
    r0, r1 = ranks(store, "s2")
    assert step_of(r0) == 20
    r0.save(b"step-30", step=30)  # rank 0 trains on and commits before rank 1 gets to its load
    assert step_of(r1) == 20
    assert (r1.loaded_step, r1.loaded_seq, r1.loaded_uri) == (r0.loaded_step, r0.loaded_seq, r0.loaded_uri)


def test_b7_retention_keeps_the_start_s_resume_point_until_a_slow_rank_loaded_it(store, run_history) -> None:
    run_history(store, {1: [10]})
    r0, r1 = ranks(store, "s2", keep_last=1)
    assert step_of(r0) == 10
    for step in (11, 12, 13):
        r0.save(f"step-{step}".encode(), step=step)
    r0.wait()  # retention runs in the background: let it finish
    assert step_of(r1) == 10
    # kept beside keep_last's one newest save, and only while this start runs: the next start prunes it
    nxt = store(1, rank=0, world_size=2, start="s3", keep_last=1)
    assert step_of(nxt) == 13
    nxt.save(b"step-14", step=14)
    nxt.wait()
    committed = [c.seq for c in catalog.candidates(nxt._storage, nxt._root_path, attempt=1)]
    assert committed == [5, 4]  # step 14, and step 13 as start s3's resume point; s2's (step 10) is gone


def test_b7_a_rank_that_loads_before_rank_0_waits_for_rank_0_s_choice(store, run_history) -> None:
    run_history(store, {1: [10]})
    r0, r1 = ranks(store, "s2")
    got: list[int | None] = []
    waiter = threading.Thread(target=lambda: got.append(step_of(r1)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive(), "rank 1 must wait for rank 0's choice"
    store(1, keep_last=None).save(b"step-15", step=15)  # committed while rank 1 waits, before rank 0 chooses
    assert step_of(r0) == 15
    waiter.join(timeout=10)
    assert got == [15]


def test_b7_an_empty_choice_is_shared_too(store) -> None:
    r0, r1 = ranks(store, "s1")
    assert r0.load() is None
    store(1, keep_last=None).save(b"step-1", step=1)
    assert r1.load() is None and r1.loaded_step is None


def test_b7_a_new_start_chooses_anew_and_a_second_load_in_the_same_start_gets_the_same_answer(
        store, run_history) -> None:
    run_history(store, {1: [10]})
    r0, _ = ranks(store, "s1")
    assert step_of(r0) == 10
    r0.save(b"step-20", step=20)
    r0.wait()
    again = store(1, rank=0, world_size=2, start="s1")  # another Checkpoint of rank 0, same start
    assert step_of(again) == 10
    fresh0, fresh1 = ranks(store, "s3")
    assert step_of(fresh0) == 20 and step_of(fresh1) == 20


def test_b7_a_sharded_load_takes_every_part_from_the_one_checkpoint_rank_0_chose(store) -> None:
    writers = [store(1, rank=r, world_size=2, keep_last=None) for r in range(2)]
    threads = [threading.Thread(target=w.save, args=(f"part-{r}-step-5".encode(),), kwargs={"step": 5, "shard": True})
               for r, w in enumerate(writers)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    r0, r1 = ranks(store, "s2")
    p0 = r0.load()
    assert p0 is not None and p0.read_bytes() == b"part-0-step-5"
    writers = [store(1, rank=r, world_size=2, keep_last=None, restart_attempt=1) for r in range(2)]
    threads = [threading.Thread(target=w.save, args=(f"part-{r}-step-6".encode(),), kwargs={"step": 6, "shard": True})
               for r, w in enumerate(writers)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    p1 = r1.load()
    assert p1 is not None and p1.read_bytes() == b"part-1-step-5"


def test_b7_ranks_resuming_from_a_source_that_is_still_saving_load_the_same_checkpoint(tmp_path) -> None:
    src_root = str(tmp_path / "ck" / "src" / "id-1")
    source = Checkpoint.for_path(src_root, attempt=1, keep_last=1)
    source.save(b"step-3", step=3)
    dst = str(tmp_path / "ck" / "dst" / "id-2")
    r0, r1 = (Checkpoint.for_path(dst, rank=r, world_size=2, start="s1", resume_from=src_root,
                                  cache_dir=tmp_path / f"c{r}") for r in range(2))
    assert r0.load() is not None and r0.loaded_step == 3
    source.save(b"step-4", step=4)  # the source goes on saving, and its retention removes step 3's data ...
    source.wait()
    with pytest.raises(CheckpointError, match="the checkpoint this start of the gang resumes from"):
        r1.load()  # ... so rank 1 says so, rather than resume from step 4 beside rank 0's step 3


def test_b7_a_rank_whose_rank_0_never_chooses_says_so_after_the_timeout(store) -> None:
    r1 = store(1, rank=1, world_size=2, start="s1", shard_timeout=0.3)
    with pytest.raises(CheckpointError, match="rank 0 did not choose the checkpoint to resume from within 0.3 s"):
        r1.load()


def test_b7_the_choice_of_each_earlier_start_is_removed_at_the_first_commit_of_the_next(store, run_history) -> None:
    run_history(store, {1: [1]})
    for start in ("a", "b"):
        ckpt = store(1, rank=0, world_size=2, start=start)
        ckpt.load()
    attempt_dir = join(ckpt._root_path, "attempt-1")
    names = lambda: sorted(n for n in ckpt._storage.list_names(attempt_dir) if resume_point.is_marker(n))  # noqa: E731
    assert names() == ["start-a.json", "start-b.json"]
    ckpt.save(b"step-2", step=2)
    ckpt.wait()
    assert names() == ["start-b.json"]


def test_b7_without_a_start_id_or_with_one_rank_a_load_chooses_alone(store, run_history) -> None:
    run_history(store, {1: [10]})
    alone = store(1, rank=1, world_size=2)  # no start id: an older backend; nothing to wait for
    assert step_of(alone) == 10
    single = store(1, rank=0, world_size=1, start="s1")
    assert step_of(single) == 10
    assert not [n for n in single._storage.list_names(join(single._root_path, "attempt-1"))
                if resume_point.is_marker(n)]
