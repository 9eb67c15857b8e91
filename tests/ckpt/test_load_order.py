"""S10 and B1: which checkpoint load() returns, for every way an attempt can (re)start."""

from __future__ import annotations

import pytest

# history: the steps each attempt saved before the current process starts; `attempt`: the attempt
# the current process belongs to; want: (loaded_from, attempt loaded, step loaded).
CASES = [
    pytest.param({1: [1, 2, 3]}, 1, ("own", 1, 3), id="readmission-on-first-attempt-resumes-own"),
    pytest.param({1: [2], 2: [4, 5]}, 2, ("own", 2, 5), id="readmission-on-later-attempt-prefers-own-over-previous"),
    pytest.param({1: [7]}, 1, ("own", 1, 7), id="jobset-restart-same-attempt-resumes-own"),
    pytest.param({1: [1, 6]}, 2, ("previous", 1, 6), id="fresh-attempt-resumes-previous"),
    pytest.param({1: [3], 2: []}, 2, ("previous", 1, 3), id="restart-before-first-save-resumes-previous"),
    pytest.param({}, 1, (None, None, None), id="nothing-saved-starts-fresh"),
    pytest.param({1: [4], 2: []}, 3, ("previous", 1, 4), id="middle-attempt-never-saved-keeps-first-attempts-work"),
    pytest.param({1: [1], 2: [2], 3: [3]}, 5, ("previous", 3, 3), id="newest-of-all-earlier-attempts-not-only-n-minus-1"),
]


@pytest.mark.parametrize(("history", "attempt", "want"), CASES)
def test_s10_own_attempt_checkpoint_loads_first(store, run_history, history, attempt, want, capsys) -> None:
    run_history(store, history)
    ckpt = store(attempt)
    path = ckpt.load()
    loaded_from, loaded_attempt, step = want
    assert (ckpt.loaded_from, ckpt.loaded_attempt, ckpt.loaded_step) == want
    if step is None:
        assert path is None and ckpt.loaded_uri is None
        assert "gangrun: no checkpoint found" in capsys.readouterr().err
    else:
        assert path is not None and path.read_bytes() == f"step-{step}".encode()
        assert ckpt.loaded_uri.startswith(f"{store.root}/attempt-{loaded_attempt}/ckpt-")
        source = "this attempt" if loaded_from == "own" else f"previous attempt {loaded_attempt}"
        assert f"gangrun: loaded checkpoint from {source}" in capsys.readouterr().err


def test_s10_jobset_restart_attempt_is_not_consulted(tmp_path, monkeypatch) -> None:
    """A readmission keeps JOBSET_RESTART_ATTEMPT unchanged; the own checkpoint must load anyway."""
    import gangrun

    root = tmp_path / "ck" / "train"
    gangrun.Checkpoint.for_path(str(root), attempt=2).save(b"own", step=9)
    for restart in ("0", "3"):
        env = {
            "GANGRUN_TASK": "train", "GANGRUN_ATTEMPT": "2", "JOBSET_RESTART_ATTEMPT": restart,
            "GANGRUN_CHECKPOINT_PATH": f"{root}/attempt-2", "GANGRUN_PREV_CHECKPOINT_PATH": f"{root}/attempt-1",
        }  # fmt: skip
        ctx = gangrun.Context.from_env(env, install_stop_handler=False)
        assert ctx.checkpoint.load().read_bytes() == b"own"
        assert ctx.checkpoint.loaded_from == "own"


def test_b1_load_is_decided_once_per_object(store) -> None:
    ckpt = store(1)
    ckpt.save(b"a", step=1)
    first = ckpt.load()
    ckpt.save(b"b", step=2)
    assert ckpt.load() == first and ckpt.loaded_step == 1
    assert store(1).load().read_bytes() == b"b"
