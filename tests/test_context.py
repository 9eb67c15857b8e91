"""gangrun.context(): the worker environment every backend sets, read into a Context."""

from __future__ import annotations

import json

import pytest

import gangrun
from gangrun import Context
from gangrun._ckpt import notice
from gangrun._errors import UsageError, WorkerEnvError


@pytest.fixture(autouse=True)
def _restore_sigterm():
    yield
    notice.uninstall()


def gang_env(**over: str) -> dict[str, str]:
    env = {
        "GANGRUN_TASK": "train",
        "GANGRUN_ATTEMPT": "3",
        "JOBSET_RESTART_ATTEMPT": "1",
        "NNODES": "2",
        "NODE_RANK": "1",
        "NPROC_PER_NODE": "4",
        "RANK": "6",
        "LOCAL_RANK": "2",
        "WORLD_SIZE": "8",
        "MASTER_ADDR": "train-workers-0-0.train",
        "MASTER_PORT": "29500",
        "GANGRUN_CHECKPOINT_PATH": "s3://bucket/ck/train/attempt-3",
        "GANGRUN_PREV_CHECKPOINT_PATH": "s3://bucket/ck/train/attempt-2",
    }
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def test_context_reads_every_worker_variable() -> None:
    ctx = Context.from_env(gang_env(), install_stop_handler=False)
    assert ctx and ctx.in_gang
    got = (ctx.task, ctx.attempt, ctx.restart_attempt, ctx.rank, ctx.local_rank, ctx.world_size,
           ctx.node_rank, ctx.nnodes, ctx.nproc_per_node, ctx.master_addr, ctx.master_port)  # fmt: skip
    assert got == ("train", 3, 1, 6, 2, 8, 1, 2, 4, "train-workers-0-0.train", 29500)
    ckpt = ctx.checkpoint
    assert (ckpt.root, ckpt.attempt, ckpt.uri) == ("s3://bucket/ck/train", 3, "s3://bucket/ck/train/attempt-3")
    assert (ckpt.rank, ckpt.writer, ckpt.task) == (6, False, "train")


def test_outside_a_gang_context_says_so_instead_of_raising() -> None:
    ctx = Context.from_env({})
    assert not ctx and ctx.in_gang is False and ctx.checkpoint is None and ctx.attempt is None
    assert (ctx.rank, ctx.world_size, ctx.nnodes, ctx.restart_attempt) == (0, 1, 1, 0)
    assert not notice.STATE.installed, "no SIGTERM handler outside a gang unless asked"


def test_plain_torchrun_variables_are_read_outside_a_gang() -> None:
    ctx = Context.from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "NPROC_PER_NODE": "2"})
    assert (ctx.in_gang, ctx.rank, ctx.world_size, ctx.checkpoint) == (False, 1, 2, None)


def test_rank_zero_writes_checkpoints() -> None:
    ctx = Context.from_env(gang_env(RANK="0", NODE_RANK="0", LOCAL_RANK="0"), install_stop_handler=False)
    assert ctx.is_main and ctx.checkpoint.writer


def test_in_a_gang_from_the_main_thread_the_stop_handler_is_installed() -> None:
    Context.from_env(gang_env())
    assert notice.STATE.installed


@pytest.mark.parametrize(
    ("over", "name"),
    [
        pytest.param({"GANGRUN_ATTEMPT": "zero"}, "GANGRUN_ATTEMPT", id="attempt-not-a-number"),
        pytest.param({"GANGRUN_ATTEMPT": "0"}, "GANGRUN_ATTEMPT", id="attempt-is-1-based"),
        pytest.param({"RANK": "8"}, "RANK", id="rank-beyond-world-size"),
        pytest.param({"RANK": "-1"}, "RANK", id="negative-rank"),
        pytest.param({"WORLD_SIZE": "0"}, "WORLD_SIZE", id="empty-world"),
        pytest.param({"NODE_RANK": "2"}, "NODE_RANK", id="node-rank-beyond-nnodes"),
        pytest.param({"LOCAL_RANK": "4"}, "LOCAL_RANK", id="local-rank-beyond-nproc"),
        pytest.param({"MASTER_PORT": "70000"}, "MASTER_PORT", id="port-out-of-range"),
        pytest.param({"JOBSET_RESTART_ATTEMPT": "x"}, "JOBSET_RESTART_ATTEMPT", id="restart-attempt-not-a-number"),
        pytest.param({"GANGRUN_CHECKPOINT_PATH": "s3://b/ck/train/attempt-2"}, "GANGRUN_CHECKPOINT_PATH", id="checkpoint-path-of-another-attempt"),
        pytest.param({"GANGRUN_CHECKPOINT_PATH": "s3://b/ck/train"}, "GANGRUN_CHECKPOINT_PATH", id="checkpoint-path-without-attempt-folder"),
        pytest.param({"GANGRUN_PREV_CHECKPOINT_PATH": "s3://other/train/attempt-2"}, "GANGRUN_PREV_CHECKPOINT_PATH", id="prev-path-off-the-layout-rule"),
        pytest.param({"GANGRUN_GRACE_PERIOD": "soon"}, "GANGRUN_GRACE_PERIOD", id="grace-period-not-a-number"),
    ],
)  # fmt: skip
def test_malformed_worker_variable_is_an_error_naming_it(over, name) -> None:
    with pytest.raises(WorkerEnvError, match=name) as exc:
        Context.from_env(gang_env(**over), install_stop_handler=False)
    assert exc.value.name == name and isinstance(exc.value, UsageError)


def test_empty_prev_path_on_first_attempt_and_no_checkpoint_path() -> None:
    env = gang_env(GANGRUN_ATTEMPT="1", GANGRUN_CHECKPOINT_PATH="/ck/train/attempt-1", GANGRUN_PREV_CHECKPOINT_PATH="")
    assert Context.from_env(env, install_stop_handler=False).checkpoint.attempt == 1
    env.pop("GANGRUN_CHECKPOINT_PATH")
    assert Context.from_env(env, install_stop_handler=False).checkpoint is None


def test_context_is_cached_until_the_environment_changes(monkeypatch) -> None:
    for k in gang_env():
        monkeypatch.delenv(k, raising=False)
    first = gangrun.context()
    assert gangrun.context() is first and not first
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert gangrun.context() is not first and gangrun.context().world_size == 2


def test_public_surface_is_sorted_and_exported() -> None:
    assert gangrun.__all__ == sorted(gangrun.__all__)
    assert {"Checkpoint", "Context", "context"} <= set(gangrun.__all__)


def test_should_stop_and_progress_report_the_first_step_once(tmp_path) -> None:
    """The first step after a load ends the gang's restoring time; later calls report nothing."""
    events = tmp_path / "events.jsonl"
    env = gang_env(GANGRUN_EVENTS_FILE=str(events), GANGRUN_CHECKPOINT_PATH=None, GANGRUN_PREV_CHECKPOINT_PATH=None)
    ctx = Context.from_env(env, install_stop_handler=False)
    ctx.progress(7)
    assert ctx.should_stop() is False
    ctx.progress(8)
    (line,) = [json.loads(x) for x in events.read_text().splitlines()]
    assert (line["type"], line["task"], line["attempt"], line["rank"], line["step"]) == ("first_step", "train", 3, 6, 7)


# torchrun's variables as torchrun sets them for one worker, outside a gang.
def torchrun_env(*, nnodes: int, nproc: int, node: int, local: int, **over: str) -> dict[str, str]:
    env = {
        "RANK": str(node * nproc + local), "LOCAL_RANK": str(local), "GROUP_RANK": str(node),
        "ROLE_RANK": str(node * nproc + local), "LOCAL_WORLD_SIZE": str(nproc), "WORLD_SIZE": str(nnodes * nproc),
        "GROUP_WORLD_SIZE": str(nnodes), "ROLE_WORLD_SIZE": str(nnodes * nproc), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_RUN_ID": "none",
    }  # fmt: skip
    env.update(over)
    return env


@pytest.mark.parametrize(
    ("env", "want"),
    [
        pytest.param(torchrun_env(nnodes=1, nproc=2, node=0, local=1), (1, 1, 2, 0, 1, 2, 0), id="1x2-rank-1"),
        pytest.param(torchrun_env(nnodes=2, nproc=2, node=1, local=1), (3, 1, 4, 1, 2, 2, 0), id="2x2-rank-3"),
        pytest.param(torchrun_env(nnodes=3, nproc=1, node=2, local=0), (2, 0, 3, 2, 3, 1, 0), id="3x1-rank-2"),
        pytest.param(torchrun_env(nnodes=1, nproc=2, node=0, local=1, NPROC_PER_NODE="1", NODE_RANK="3", NNODES="1"),
                     (1, 1, 2, 0, 1, 2, 0), id="torchrun-wins-over-stale-shell-variables"),
        pytest.param(torchrun_env(nnodes=1, nproc=4, node=0, local=3, TORCHELASTIC_RESTART_COUNT="2"),
                     (3, 3, 4, 0, 1, 4, 2), id="a-torchrun-restart-is-the-restart-attempt"),
        pytest.param({k: v for k, v in torchrun_env(nnodes=2, nproc=2, node=1, local=0).items() if k != "GROUP_WORLD_SIZE"},
                     (2, 0, 4, 1, 2, 2, 0), id="nodes-from-the-world-size-without-GROUP_WORLD_SIZE"),
        pytest.param({}, (0, 0, 1, 0, 1, 1, 0), id="plain-python"),
    ],
)
def test_a_script_under_torchrun_outside_a_gang_reads_torchruns_ranks(env: dict[str, str], want: tuple) -> None:
    ctx = Context.from_env(env, standalone_root="/proj/.gangrun/checkpoints/train")
    assert not ctx and not notice.STATE.installed
    got = (ctx.rank, ctx.local_rank, ctx.world_size, ctx.node_rank, ctx.nnodes, ctx.nproc_per_node, ctx.restart_attempt)
    assert got == want
    ckpt = ctx.checkpoint
    assert ckpt is not None and (ckpt.root, ckpt.attempt, ckpt.rank, ckpt.world_size) == (
        "/proj/.gangrun/checkpoints/train", 1, want[0], want[2])
    assert ckpt.writer == (want[0] == 0) and ckpt.restart_attempt == want[6]


@pytest.mark.parametrize(
    ("path", "root", "attempt"),
    [("/data/ck", "/data/ck", 1), ("/data/ck/attempt-3", "/data/ck", 3), ("s3://b/runs/train", "s3://b/runs/train", 1)],
)
def test_outside_a_gang_checkpoint_path_names_the_folder(path: str, root: str, attempt: int) -> None:
    ctx = Context.from_env({"GANGRUN_CHECKPOINT_PATH": path}, standalone_root="/proj/.gangrun/checkpoints/train")
    assert (ctx.checkpoint.root, ctx.checkpoint.attempt) == (root, attempt)


def test_outside_a_gang_the_first_load_names_the_checkpoint_folder_once(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    ctx = Context.from_env({}, standalone_root=str(tmp_path / ".gangrun" / "checkpoints" / "train"))
    assert ctx.checkpoint.load() is None
    ctx.checkpoint.save(b"state", step=3)
    err = capsys.readouterr().err
    line = f"gangrun: not in a gangrun task: checkpoints go to {tmp_path}/.gangrun/checkpoints/train"
    assert err.count(line) == 1, err
    again = Context.from_env({}, standalone_root=str(tmp_path / ".gangrun" / "checkpoints" / "train")).checkpoint
    assert again.load().read_bytes() == b"state" and again.loaded_step == 3  # the next run of the script


def test_context_outside_a_gang_puts_checkpoints_under_the_current_folder(tmp_path, monkeypatch) -> None:
    from gangrun._worker import context as _context

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [str(tmp_path / "train.py")])
    for name in ("GANGRUN_TASK", "GANGRUN_CHECKPOINT_PATH", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    _context._standalone_root.cache_clear()
    monkeypatch.setattr(_context, "_cache", None)
    try:
        assert gangrun.context().checkpoint.root == f"{tmp_path}/.gangrun/checkpoints/train"
    finally:
        _context._standalone_root.cache_clear()
