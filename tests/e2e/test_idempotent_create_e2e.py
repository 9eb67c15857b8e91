"""A retried create never starts a second gang (issue 26 item 4), against the real control plane (tier C:
kube-apiserver, kwok nodes, JobSet, Kueue) with the real `gangrun controller`.

The lost response is injected between gangrun and the real API server: the client performs the create and
then raises as a read timeout does, so the task is stored and the caller does not know it. The Flyte
connector's case is Flyte's own retry: the same create request sent again for the same task execution.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

import gangrun
from gangrun._backends.kube import KubeBackend, crd
from gangrun._backends.kube.client import Resource, connect
from gangrun._errors import ApiError
from tests.e2e.test_api_e2e import crd_installed, gangrun_tasks, kube_env, running, task, until  # noqa: F401  (fixtures)
from tests.harness.tasks import TASK_LABEL

pytestmark = pytest.mark.e2e


class LosesFirstResponse:
    """The real API client, whose first create's response is lost after the API server handled it."""

    def __init__(self, api: Any) -> None:
        self._api, self.creates = api, 0

    def create(self, res: Resource, namespace: str | None, body: dict[str, Any], *,
               dry_run: bool = False) -> dict[str, Any]:
        self.creates += 1
        created = self._api.create(res, namespace, body, dry_run=dry_run)
        if self.creates == 1 and not dry_run:
            raise ApiError(0, f"POST {res.plural}: ReadTimeoutError: read timed out")
        return created

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


def jobsets_of(cp, ns: str, name: str) -> list[str]:
    return [js["metadata"]["name"] for js in cp.kube.list("JobSet", ns, label_selector=f"{TASK_LABEL}={name}")]


def test_a_generate_name_submit_whose_response_is_lost_leaves_one_task_and_one_gang(kube_env) -> None:  # noqa: F811
    cp, ns, ctl = kube_env
    api, _ = connect(kubeconfig=str(cp.kubeconfig))
    wire = LosesFirstResponse(api)
    run = gangrun.submit(task(generate_name="train-"), backend=KubeBackend(api=wire, namespace=ns))  # type: ignore[arg-type]
    assert wire.creates == 2  # the lost one and the retry that found it
    assert run.name.startswith("train-") and len(run.name) == len("train-") + 5
    assert gangrun_tasks(cp, ns) == [run.name]
    until(run, running, "Running", ctl)
    assert len(jobsets_of(cp, ns, run.name)) == 1


def test_submitting_again_with_the_same_client_token_returns_the_first_task(kube_env) -> None:  # noqa: F811
    cp, ns, ctl = kube_env
    on = {"backend": "kubernetes", "kubeconfig": str(cp.kubeconfig), "namespace": ns}
    first = gangrun.submit(task(generate_name="train-", labels={crd.CLIENT_TOKEN_LABEL: "nightly-7"}), **on)
    again = gangrun.submit(task(generate_name="train-", labels={crd.CLIENT_TOKEN_LABEL: "nightly-7"}), **on)
    assert again.name == first.name and gangrun_tasks(cp, ns) == [first.name]
    until(first, running, "Running", ctl)
    assert len(jobsets_of(cp, ns, first.name)) == 1


def test_a_create_flyte_sends_twice_for_one_execution_leaves_one_task_and_one_gang(kube_env) -> None:  # noqa: F811
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        import flyte  # noqa: F401  (CI installs the flyte extra: a missing one fails here)
    else:
        pytest.importorskip("flyte", reason="the flyte extra is not installed: pip install -e '.[flyte]'")
    from tests.e2e.test_flyte_e2e import train
    from tests.with_flyte import connector_calls

    cp, ns, ctl = kube_env
    connection = {"kubeconfig": str(cp.kubeconfig), "namespace": ns}
    metadata = connector_calls.execution_metadata(service_account="")
    first = connector_calls.create(train, connection, metadata, epochs=3)
    again = connector_calls.create(train, connection, metadata, epochs=3)  # Flyte never saw the first reply
    assert again == first and gangrun_tasks(cp, ns) == [first.name]
    run = gangrun.attach(first.name, "kubernetes", kubeconfig=str(cp.kubeconfig), namespace=ns)
    until(run, running, "Running", ctl)
    assert len(jobsets_of(cp, ns, first.name)) == 1
