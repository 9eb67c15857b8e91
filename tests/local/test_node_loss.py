"""Issue-9 behaviours on the local backend: a lost node is never charged, one worker-env contract,
disjoint GPUs, and a podTemplate whose pod-only fields are reported, not dropped."""

from __future__ import annotations

import re
import sys
import warnings

import pytest

import gangrun
from gangrun._backends.local import LocalBackend
from gangrun._errors import IgnoredLocally

from .conftest import checkpointed, event_types, phase, wait_for

LOST = "worker lost to node disruption (EvictionByEvictionAPI): Eviction API: evicting"


def test_a_worker_lost_to_its_node_restarts_the_gang_in_the_same_attempt_charged_to_nothing(
        backend: LocalBackend, manifest) -> None:
    backend.submit(manifest("train", steps=16, max_restarts=0, retries=0))
    wait_for(backend, "train", checkpointed(3))
    backend.evict("train", "NodeDisruption")
    # The restart is over in well under a second: read what was said from the timeline, not by polling.
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["restartAttempt"], done["userRetriesUsed"], done["systemRetriesUsed"]) == (1, 1, 0, 0)
    disrupted = [e for e in backend.events("train") if e.type.value == "WorkerDisrupted"]
    assert len(disrupted) == 1 and disrupted[0].attempt == 1, disrupted
    assert disrupted[0].message.startswith(LOST) and disrupted[0].message.endswith("; restarting the gang (not counted)")
    assert not {"AttemptEnded", "Failed"} & set(event_types(backend, "train"))  # the attempt went on
    assert [w["cause"] for w in done["accounting"]["workLost"]] == ["NodeDisruption"]
    lines = list(backend.logs("train", rank=0))
    assert any("stop requested (cause NodeDisruption" in line for line in lines), lines  # the peers were told why
    restart = [line for line in lines if line.startswith("start ") and "restart=1" in line]
    assert restart and "loaded_from=own" in restart[0]


def test_every_worker_gets_the_whole_torchrun_contract(backend: LocalBackend, manifest) -> None:
    script = ("import os; print('ENV ' + ' '.join(f'{k}={os.environ.get(k)}' for k in "
              "('RANK', 'LOCAL_RANK', 'GROUP_RANK', 'NODE_RANK', 'LOCAL_WORLD_SIZE', 'WORLD_SIZE', "
              "'TORCHELASTIC_RUN_ID', 'JOBSET_RESTART_ATTEMPT', 'GANGRUN_GANG')))")
    backend.submit(manifest("envs", nodes=2, command=[sys.executable, "-c", script],
                            extra={"nprocPerNode": 2}, cpu="500m"))
    wait_for(backend, "envs", phase("Succeeded"))
    seen = sorted(line.split("] ", 1)[1] for line in backend.logs("envs") if "ENV " in line)
    want = sorted(f"ENV RANK={n * 2 + i} LOCAL_RANK={i} GROUP_RANK={n} NODE_RANK={n} LOCAL_WORLD_SIZE=2 WORLD_SIZE=4 "
                  f"TORCHELASTIC_RUN_ID=envs-a1-0 JOBSET_RESTART_ATTEMPT=0 GANGRUN_GANG=envs-a1"
                  for n in range(2) for i in range(2))
    assert seen == want


def test_admitted_gangs_with_gpus_see_disjoint_devices(backend: LocalBackend, manifest) -> None:
    backend.up(gpu=4)
    show = [sys.executable, "-c", "import os, time; print('CVD', os.environ['CUDA_VISIBLE_DEVICES']); time.sleep(3)"]
    for name in ("a", "b"):
        backend.submit(manifest(name, nodes=1, gpu=2, cpu="500m", command=show))
    for name in ("a", "b"):
        wait_for(backend, name, phase("Succeeded"))
    devices = {name: next(line.split()[1] for line in backend.logs(name) if line.startswith("CVD"))
               for name in ("a", "b")}
    assert sorted(devices.values()) == ["0,1", "2,3"], devices


def test_a_pod_template_applies_its_env_and_reports_what_a_local_run_ignores(backend: LocalBackend, manifest,
                                                                              tmp_path) -> None:
    template = {"metadata": {"labels": {"team": "ml"}},
                "spec": {"containers": [{"name": "worker", "env": [{"name": "FROM_TEMPLATE", "value": "yes"}],
                                         "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}],
                         "volumes": [{"name": "ckpt", "emptyDir": {}}],
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    spec = manifest("tmpl", nodes=1, command=[sys.executable, "-c", "import os; print('T', os.environ['FROM_TEMPLATE'])"],
                    extra={"podTemplate": template})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = gangrun.submit(gangrun.ClusteredTask.from_dict(spec.raw), backend=backend)
    (w,) = [c for c in caught if issubclass(c.category, IgnoredLocally)]
    for field in ("spec.podTemplate.metadata.labels", "spec.podTemplate.spec.volumes",
                  "spec.podTemplate.spec.tolerations", "spec.podTemplate.spec.containers[worker].volumeMounts"):
        assert field in str(w.message)
    assert run.wait(timeout=60)["phase"] == "Succeeded"
    assert "T yes" in run.logs(rank=0)
    submitted = next(e for e in backend.events("tmpl") if e.type.value == "Submitted")
    assert re.search(r"ignored locally: .*spec\.podTemplate\.spec\.tolerations", submitted.message)


@pytest.mark.parametrize("flag", [False])
def test_with_restart_on_disruption_off_a_lost_node_is_an_ordinary_failure(backend: LocalBackend, manifest,
                                                                           flag: bool) -> None:
    backend.submit(manifest("train", steps=200, extra={"failurePolicy": {"restartOnDisruption": flag}}))
    wait_for(backend, "train", lambda v: v["phase"] == "Running" and all(w["running"] for w in v["gang"]["workers"]))
    backend.evict("train", "NodeDisruption")
    done = wait_for(backend, "train", phase("Failed"))
    assert done["code"] == "MaxRetriesExceeded" and "WorkerFailed" in done["message"]
    assert "(no restarts allowed: maxRestarts is 0)" in done["message"], done["message"]


def test_a_node_about_to_go_stops_the_gang_with_its_own_cause_and_it_resumes_from_its_save_charged_to_nothing(
        backend: LocalBackend, manifest) -> None:
    """A node cordoned for maintenance: every worker hears NodeMaintenance before the node goes, saves in its
    grace period, and the gang restarts in the same attempt from that save; no budget pays for it."""
    # Saves every 4 steps, and once more when stopped (LINGER_SECONDS): the restart resumes from that last save.
    backend.submit(manifest("train", nodes=2, steps=30, max_restarts=0, retries=0,
                            env={"CHECKPOINT_EVERY": "4", "LINGER_SECONDS": "0.2"}))
    wait_for(backend, "train", checkpointed(1))
    backend.evict("train", "NodeMaintenance")
    done = wait_for(backend, "train", phase("Succeeded"))
    assert (done["attempt"], done["restartAttempt"], done["userRetriesUsed"], done["systemRetriesUsed"]) == (1, 1, 0, 0)
    assert not {"AttemptEnded", "Failed"} & set(event_types(backend, "train"))
    disrupted = [e for e in backend.events("train") if e.type.value == "WorkerDisrupted"]
    assert len(disrupted) == 1 and "cordoned for maintenance" in disrupted[0].message, disrupted
    stopped, resumed = [], set()
    for rank in (0, 1):
        lines = list(backend.logs("train", rank=rank))
        assert any("stop requested (cause NodeMaintenance" in line for line in lines), lines
        stopped += [int(line.split("step=")[1]) for line in lines if line.startswith("stopped at step=")]
        restart = [line for line in lines if line.startswith("start ") and "restart=1" in line]
        assert restart and "loaded_from=own" in restart[0], restart
        resumed.add(int(restart[0].split("resumed_from=")[1].split()[0]))
    assert len(stopped) == 2 and resumed == {max(stopped)}, (stopped, resumed)  # both from the save at the notice
