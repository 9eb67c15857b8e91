"""One worker-environment contract for both backends, and disjoint GPUs for admitted local gangs."""

from __future__ import annotations

import pytest

from gangrun._core import gpus, worker_env
from gangrun._core.spec import RESERVED_ENV, parse_manifest


def spec(**fields):
    return parse_manifest({"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask", "metadata": {"name": "train"},
                           "spec": {"nodes": 3, "nprocPerNode": 2, "command": ["python", "t.py"],
                                    "terminationGracePeriod": "45s", **fields}})


def env(**kw):
    args = dict(attempt=2, gang="train-a2", node_rank=1, local_rank=1, restart_attempt=3, master_addr="127.0.0.1",
                master_port=41000, checkpoint_path="/c/train/attempt-2", prev_checkpoint_path="/c/train/attempt-1",
                stop_file="/run/stop.json", events_file="/run/events.jsonl")
    args.update(kw)
    return worker_env.worker_env(spec(), **args)


def test_the_whole_contract_for_one_process() -> None:
    assert env() == {
        "GANGRUN_TASK": "train", "GANGRUN_ATTEMPT": "2", "GANGRUN_GANG": "train-a2",
        "NNODES": "3", "NPROC_PER_NODE": "2", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "6",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "41000",
        "GANGRUN_CHECKPOINT_PATH": "/c/train/attempt-2", "GANGRUN_PREV_CHECKPOINT_PATH": "/c/train/attempt-1",
        "GANGRUN_STOP_FILE": "/run/stop.json", "GANGRUN_EVENTS_FILE": "/run/events.jsonl", "GANGRUN_GRACE_PERIOD": "45",
        "NODE_RANK": "1", "GROUP_RANK": "1", "RANK": "3", "LOCAL_RANK": "1", "JOBSET_RESTART_ATTEMPT": "3",
        "TORCHELASTIC_RUN_ID": "train-a2-3",
    }


@pytest.mark.parametrize("node,local,rank", [(0, 0, 0), (0, 1, 1), (1, 0, 2), (2, 1, 5)])
def test_rank_is_node_rank_times_processes_per_node_plus_local_rank(node: int, local: int, rank: int) -> None:
    e = env(node_rank=node, local_rank=local)
    assert (e["RANK"], e["GROUP_RANK"], e["NODE_RANK"], e["LOCAL_RANK"]) == (str(rank), str(node), str(node), str(local))


def test_a_restart_round_gets_its_own_rendezvous_id() -> None:
    assert env(restart_attempt=0)["TORCHELASTIC_RUN_ID"] != env(restart_attempt=1)["TORCHELASTIC_RUN_ID"]


def test_cuda_visible_devices_only_when_the_backend_assigns_gpus() -> None:
    assert "CUDA_VISIBLE_DEVICES" not in env()
    assert env(gpus=(4, 5))["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_every_contract_name_is_reserved_in_the_manifest() -> None:
    names = set(env(resume_from="s3://b/ck/train", start="a1b2"))
    assert names <= RESERVED_ENV
    assert set(worker_env.GANG_VARS + worker_env.PROCESS_VARS) == names


def test_resume_from_is_set_only_for_a_task_that_asks_for_it() -> None:
    assert worker_env.RESUME_FROM not in env()
    assert env(resume_from="s3://b/ck/train")[worker_env.RESUME_FROM] == "s3://b/ck/train"


def test_user_env_is_spec_env_then_the_worker_container_s_plain_values() -> None:
    s = spec(env={"A": "1"}, podTemplate={"spec": {"containers": [{"name": "worker", "env": [
        {"name": "B", "value": "2"}, {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}})
    assert worker_env.user_env(s) == {"A": "1", "B": "2"}


# -- GPUs -------------------------------------------------------------------------------------------


def test_two_four_gpu_gangs_on_an_eight_gpu_box_get_disjoint_gpus() -> None:
    # The issue's case: both used GPUs 0-3.
    out = gpus.assign(8, {"a": (1, 4), "b": (1, 4)})
    assert out == {"a": ((0, 1, 2, 3),), "b": ((4, 5, 6, 7),)}
    assert [gpus.visible_devices(node) for a in out.values() for node in a] == ["0,1,2,3", "4,5,6,7"]


@pytest.mark.parametrize("total,wanted,held,want", [
    pytest.param(8, {"a": (2, 2)}, {}, {"a": ((0, 1), (2, 3))}, id="each-node-its-own"),
    pytest.param(8, {"a": (1, 2), "b": (1, 2)}, {"b": ((6, 7),)}, {"a": ((0, 1),), "b": ((6, 7),)},
                 id="holders-keep-theirs"),
    pytest.param(4, {"b": (1, 2)}, {"a": ((0, 1),)}, {"b": ((0, 1),)}, id="gone-gangs-give-theirs-back"),
    pytest.param(4, {"a": (2, 1)}, {"a": ((3,),)}, {"a": ((0,), (1,))}, id="a-new-shape-is-assigned-afresh"),
    pytest.param(2, {"cpu-only": (3, 0)}, {}, {"cpu-only": ((), (), ())}, id="no-gpus-asked"),
])
def test_assignments(total, wanted, held, want) -> None:
    out = gpus.assign(total, wanted, held)
    assert out == want
    used = [g for a in out.values() for node in a for g in node]
    assert len(used) == len(set(used)) and all(0 <= g < total for g in used)


def test_asking_for_more_than_the_quota_says_how_many_are_free() -> None:
    with pytest.raises(gpus.NotEnoughGPUs, match="8 GPUs wanted, 4 of 8 free"):
        gpus.assign(8, {"a": (1, 4), "b": (2, 4)})


@pytest.mark.parametrize(("name", "kept"), [
    ("PATH", True), ("VIRTUAL_ENV", True), ("HOME", True), ("AWS_PROFILE", True), ("CUDA_VISIBLE_DEVICES", True),
    ("RANK", False), ("WORLD_SIZE", False), ("MASTER_PORT", False), ("JOBSET_RESTART_ATTEMPT", False),
    ("GANGRUN_HOME", False), ("GANGRUN_CHECKPOINT_PATH", False), ("GANGRUN_ANYTHING", False),
])
def test_a_local_task_keeps_its_submitters_variables_but_gangruns_own(name, kept) -> None:
    assert (name in worker_env.submitter_env({name: "x"})) is kept


@pytest.mark.parametrize(
    ("argv0", "name"),
    [
        ("train.py", "train"),
        ("/home/me/proj/train.py", "train"),
        ("./scripts/fine tune.py", "fine-tune"),
        ("/home/me/proj/mypkg/__main__.py", "mypkg"),
        ("-c", "python"),
        ("", "python"),
        ("/usr/bin/ipython", "ipython"),
        ("..py", "python"),
    ],
)
def test_a_script_outside_a_gang_keeps_its_checkpoints_under_its_own_name(argv0: str, name: str) -> None:
    assert worker_env.script_name(argv0) == name
    assert worker_env.standalone_checkpoint_root("/home/me/proj", argv0) == f"/home/me/proj/.gangrun/checkpoints/{name}"
