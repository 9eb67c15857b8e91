"""KubeBackend: the CLI's Backend on a cluster (submit, get, list, events, logs, cancel)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gangrun import cli
from gangrun._backends.kube import KubeBackend, events
from gangrun._backends.kube.client import EVENTS, LOCAL_QUEUES, NAMESPACES, PODS, TASKS
from gangrun._backends.kube.stored import load_state
from gangrun._core.eviction import Eviction, EvictionKind
from gangrun._core.phases import Phase
from gangrun._core.spec import parse_manifest
from gangrun._core.timeline import Event, EventType
from gangrun._errors import ApiError, SpecError, UsageError
from tests.harness.kube_builders import manifest, pod_obj
from tests.harness.kube_fake import FakeApi


def backend() -> tuple[FakeApi, KubeBackend]:
    api = FakeApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    return api, KubeBackend(api=api, namespace="ml")


def test_submit_creates_the_clustered_task_in_the_namespace() -> None:
    api, b = backend()
    assert b.submit(parse_manifest(manifest())) == "train"
    obj = api.obj(TASKS, "ml", "train")
    assert obj["apiVersion"] == "gangrun.dev/v1alpha1" and obj["spec"]["nodes"] == 2
    view = b.get("train")
    assert view["phase"] == "Queued" and view["attempt"] == 1 and view["namespace"] == "ml"


def test_submitting_a_duplicate_name_is_a_usage_error() -> None:
    _, b = backend()
    b.submit(parse_manifest(manifest()))
    with pytest.raises(UsageError, match="already exists"):
        b.submit(parse_manifest(manifest()))


def test_submit_refuses_a_missing_queue_and_a_missing_image() -> None:
    _, b = backend()
    with pytest.raises(UsageError, match='LocalQueue "team-z" does not exist'):
        b.submit(parse_manifest(manifest(queue="team-z")))
    with pytest.raises(SpecError, match="spec.image"):
        b.submit(parse_manifest(manifest(image="")))


def test_submit_goes_ahead_when_queues_cannot_be_read() -> None:
    api, b = backend()
    api.forbid("localqueues")
    assert b.submit(parse_manifest(manifest(queue="team-z"))) == "train"


def test_unknown_task_is_a_usage_error() -> None:
    _, b = backend()
    with pytest.raises(UsageError, match="no task named nope"):
        b.get("nope")


def test_list_returns_views_sorted_by_name() -> None:
    _, b = backend()
    b.submit(parse_manifest(manifest("b")))
    b.submit(parse_manifest(manifest("a")))
    assert [v["name"] for v in b.list()] == ["a", "b"]


def test_logs_by_rank_and_all_ranks_prefixed() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    for i in range(2):
        pod = pod_obj("train-1", i)
        api.put(PODS, pod)
        api.logs[("ml", pod["metadata"]["name"])] = [f"hello from {i}"]
    assert list(b.logs("train", rank=1)) == ["hello from 1"]
    assert list(b.logs("train")) == ["[rank 0] hello from 0", "[rank 1] hello from 1"]
    with pytest.raises(UsageError, match=r'task "train" has attempts 1..1, not 3'):
        list(b.logs("train", attempt=3))


def test_logs_show_only_the_newest_restart_round() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    old, new = pod_obj("train-1", 0, restart=0), pod_obj("train-1", 0, restart=1)
    new["metadata"]["name"] = "train-1-workers-0-0-zzzzz"
    for pod, line in ((old, "old"), (new, "new")):
        api.put(PODS, pod)
        api.logs[("ml", pod["metadata"]["name"])] = [line]
    assert list(b.logs("train", rank=0)) == ["new"]


def test_a_missing_kubeconfig_is_one_line_for_the_user_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "kubeconfig"
    with pytest.raises(UsageError, match=f"--kubeconfig {missing}: no such file"):
        KubeBackend(kubeconfig=str(missing)).get("train")
    assert cli.main(["--backend", "kubernetes", "--kubeconfig", str(missing), "get"]) == 2
    err = capsys.readouterr().err
    assert err == f"gangrun: error: --kubeconfig {missing}: no such file\n"
    broken = tmp_path / "broken"
    broken.write_text("not: [a kubeconfig")
    assert cli.main(["--backend", "kubernetes", "--kubeconfig", str(broken), "get"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gangrun: error: cannot load the Kubernetes configuration") and err.count("\n") == 1


# -- issue 13.9-13.11: events by UID, messages that name the object, API failures ----------------------


def _event(task: dict, message: str) -> dict:
    return events.to_k8s(task, Event(time=datetime(2026, 1, 1, tzinfo=UTC), type=EventType.PHASE,
                                      message=message, attempt=1), type_="Normal")


def test_events_of_a_deleted_task_do_not_mix_into_a_new_task_with_its_name() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    old = api.obj(TASKS, "ml", "train")
    api.put(EVENTS, _event(old, "from the deleted task"))
    api.remove(TASKS, "ml", "train")
    b.submit(parse_manifest(manifest()))
    new = api.obj(TASKS, "ml", "train")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    ev = _event(new, "from the new task")
    ev["metadata"]["name"] += "-new"
    api.put(EVENTS, ev)
    assert [e.message for e in b.events("train")] == ["from the new task"]


def test_logs_name_the_valid_ranks_and_attempts() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest(nprocPerNode=2)))
    with pytest.raises(UsageError, match=r'^task "train" has ranks 0..3, not 5$'):
        list(b.logs("train", rank=5))
    with pytest.raises(UsageError, match=r'^task "train" has attempts 1..1, not 3$'):
        list(b.logs("train", attempt=3))
    pod = pod_obj("train-1", 1)
    api.put(PODS, pod)
    api.logs[("ml", pod["metadata"]["name"])] = ["node 1"]
    assert list(b.logs("train", rank=3)) == ["node 1"]  # ranks 2 and 3 run on node 1


def test_logs_of_a_gang_waiting_for_readmission_say_it_was_preempted() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    api.patch(TASKS, "ml", "train", {"status": preempted_and_waiting(api.obj(TASKS, "ml", "train"))},
              subresource="status")
    with pytest.raises(UsageError, match="^task train was preempted and its workers are stopped until Kueue"):
        list(b.logs("train"))


def preempted_and_waiting(task: dict) -> dict:
    """The status the controller writes for a started gang that Kueue preempted, kept for re-admission (S5)."""
    now = datetime.now(UTC)
    ev = Eviction(kind=EvictionKind.PREEMPTED, reason="Preempted", detail="InClusterQueue", message="to make room")
    state = load_state(task, now=now).with_running(at=now, restart_attempt=0).with_eviction_seen(ev, at=now)
    return state.with_info(state.info.advance(Phase.RUNNING, f"{ev.summary()}; waiting for re-admission")).for_storage()


class _CutStreams(FakeApi):
    """An API server whose log streams of one pod fail, as when the kubelet cannot be reached."""

    def log_lines(self, namespace: str, pod: str, *, container: str | None = None,
                  follow: bool = False) -> Iterator[str]:
        yield from super().log_lines(namespace, pod, container=container, follow=follow)
        if pod.startswith("train-1-workers-0-1"):
            raise ApiError(500, "Get https://node-1:10250/containerLogs: dial tcp: connection refused")


@pytest.mark.parametrize("follow", [False, True], ids=["logs", "logs-follow"])
def test_a_log_stream_failure_is_an_api_error_with_and_without_follow(follow: bool) -> None:
    api = _CutStreams()
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    b = KubeBackend(api=api, namespace="ml")
    b.submit(parse_manifest(manifest()))
    for i in range(2):
        pod = pod_obj("train-1", i)
        api.put(PODS, pod)
        api.logs[("ml", pod["metadata"]["name"])] = [f"hello from {i}"]
    lines: list[str] = []
    with pytest.raises(ApiError, match="connection refused") as err:
        lines.extend(b.logs("train", follow=follow))
    assert cli.exit_code(err.value) == 3
    assert sorted(lines) == ["[rank 0] hello from 0", "[rank 1] hello from 1"]


def test_a_missing_namespace_is_named_instead_of_the_queue_or_the_task() -> None:
    _, b = backend()
    with pytest.raises(UsageError, match="^namespace nosuchns does not exist"):
        b.submit(parse_manifest(manifest(namespace="nosuchns")))
    other = KubeBackend(api=b.api, namespace="nosuchns")
    with pytest.raises(UsageError, match="^no task named train: namespace nosuchns does not exist$"):
        other.get("train")
    with pytest.raises(UsageError, match="^namespace nosuchns does not exist$"):
        other.list()
    assert KubeBackend(api=b.api, namespace="ml").list() == []  # an empty namespace that exists is no error


def test_a_forbidden_request_says_what_was_refused_and_the_status_once() -> None:
    api, b = backend()
    api.forbid("clusteredtasks")
    with pytest.raises(ApiError) as err:
        b.list()
    text = cli.error_line(err.value)
    assert text.startswith("gangrun: error: forbidden to list ClusteredTasks in namespace ml: ")
    assert text.count("403") == 1 and "ApiError" not in text
    assert cli.exit_code(err.value) == 3


def test_an_unreachable_api_server_is_named_with_the_cause() -> None:
    api, b = backend()
    api.fail("get", "clusteredtasks", 0)
    with pytest.raises(ApiError, match="^cannot reach the Kubernetes API server to read ClusteredTasks"):
        b.get("train")


def test_a_kubeconfig_variable_naming_no_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(UsageError, match=f"^KUBECONFIG: no such file: {tmp_path / 'nope'}$"):
        KubeBackend().get("train")


def test_a_task_the_api_server_refuses_as_invalid_is_a_manifest_error() -> None:
    api, b = backend()
    api.fail("create", "clusteredtasks", 422)
    with pytest.raises(SpecError, match="^the API server refused the task: injected failure") as err:
        b.submit(parse_manifest(manifest()))
    assert cli.exit_code(err.value) == 2


# -- issue 9: a pod template the API server would refuse is a manifest error at submit ---------------

TEMPLATE = {"spec": {"containers": [{"name": "worker", "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}],
                     "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]}}


def test_submit_asks_the_api_server_to_validate_one_worker_pod_of_a_pod_template() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest(podTemplate=TEMPLATE)))
    ((plural, pod),) = api.dry_runs
    assert plural == "pods" and pod["metadata"]["name"] == "train-1-workers-0-0"
    assert pod["spec"]["volumes"][0] == TEMPLATE["spec"]["volumes"][0]
    assert api.obj(PODS, "ml", pod["metadata"]["name"]) is None  # a dry run stores nothing
    plain_api, plain = backend()
    plain.submit(parse_manifest(manifest("plain")))
    assert plain_api.dry_runs == []  # nothing to check without a template


@pytest.mark.parametrize("status,refused", [(422, True), (400, True), (403, False), (500, False)])
def test_a_refused_worker_pod_names_the_pod_template_and_a_check_that_cannot_run_does_not_block(status, refused) -> None:
    api, b = backend()
    api.fail("create", PODS.plural, status)
    spec = parse_manifest(manifest(podTemplate=TEMPLATE))
    if refused:
        with pytest.raises(SpecError, match=r"^spec\.podTemplate: the API server refuses the worker pod: "):
            b.submit(spec)
        assert api.obj(TASKS, "ml", "train") is None
    else:
        assert b.submit(spec) == "train"


def test_get_shows_the_accounting_from_the_status() -> None:
    api, b = backend()
    b.submit(parse_manifest(manifest()))
    acct = b.get("train")["accounting"]
    assert acct["goodput"] == 0.0 and acct["workLost"] == [] and acct["preemptionsByCause"] == {}


def test_a_pod_template_of_a_task_named_by_generate_name_is_checked_too() -> None:
    api, b = backend()
    doc = manifest(podTemplate=TEMPLATE)
    doc["metadata"] = {"generateName": "train-", "namespace": "ml"}
    b.submit(parse_manifest(doc))
    ((_, pod),) = api.dry_runs
    assert pod["metadata"]["name"].startswith("train-") and pod["metadata"]["name"].endswith("-workers-0-0")
