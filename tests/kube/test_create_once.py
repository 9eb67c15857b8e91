"""A retried create never starts a second gang (issue 26 item 4): a create whose response is lost is tried
again and finds the task its first try stored, by the client token on the task's label; a name made from a
generateName is the token's, so the API server itself refuses a second task of it."""

from __future__ import annotations

from typing import Any

import pytest

from gangrun._backends.kube import KubeBackend, crd
from gangrun._backends.kube.client import LOCAL_QUEUES, NAMESPACES, TASKS, Resource
from gangrun._backends.kube.create import create_once, token_name
from gangrun._core.spec import parse_manifest
from gangrun._errors import ApiError, UsageError
from tests.harness.kube_builders import manifest
from tests.harness.kube_fake import FakeApi


class LosesResponses:
    """The fake API server behind a connection that drops the response of the first `lost` creates after
    the server handled them, as a timeout or a cut connection does."""

    def __init__(self, api: FakeApi, lost: int = 1) -> None:
        self._api, self.lost, self.creates = api, lost, 0

    def create(self, res: Resource, namespace: str | None, body: dict[str, Any], *,
               dry_run: bool = False) -> dict[str, Any]:
        self.creates += 1
        if self.lost <= 0 or dry_run:
            return self._api.create(res, namespace, body, dry_run=dry_run)
        self.lost -= 1
        try:
            self._api.create(res, namespace, body)
        except ApiError:  # its answer (a 409 too) is lost as well
            pass
        raise ApiError(0, "POST clusteredtasks: ReadTimeoutError: read timed out")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


def backend(lost: int = 0) -> tuple[FakeApi, LosesResponses, KubeBackend]:
    api = FakeApi()
    api.put(NAMESPACES, {"metadata": {"name": "ml"}})
    api.put(LOCAL_QUEUES, {"metadata": {"name": "default", "namespace": "ml"}})
    wire = LosesResponses(api, lost)
    return api, wire, KubeBackend(api=wire, namespace="ml")  # type: ignore[arg-type]


def generated(**labels: str) -> dict[str, Any]:
    doc = manifest()
    doc["metadata"] = {"generateName": "train-", **({"labels": labels} if labels else {})}
    return doc


@pytest.mark.parametrize("doc", [pytest.param(manifest(), id="named"), pytest.param(generated(), id="generate-name")])
def test_a_submit_whose_create_response_is_lost_leaves_exactly_one_task(doc: dict[str, Any]) -> None:
    api, wire, b = backend(lost=1)
    name = b.submit(parse_manifest(doc))
    assert wire.creates == 2 and api.names(TASKS) == [name]
    assert api.obj(TASKS, "ml", name)["metadata"]["labels"][crd.CLIENT_TOKEN_LABEL]


def test_a_submit_whose_every_response_is_lost_fails_with_one_task_stored() -> None:
    api, _, b = backend(lost=99)
    with pytest.raises(ApiError, match="cannot reach the Kubernetes API server to create"):
        b.submit(parse_manifest(generated()))
    assert len(api.names(TASKS)) == 1


def test_submitting_again_with_the_same_client_token_returns_the_first_task() -> None:
    api, _, b = backend()
    first = b.submit(parse_manifest(generated(**{crd.CLIENT_TOKEN_LABEL: "job-42"})))
    again = b.submit(parse_manifest(generated(**{crd.CLIENT_TOKEN_LABEL: "job-42"})))
    assert again == first and api.names(TASKS) == [first]
    other = b.submit(parse_manifest(generated()))
    assert other != first and len(api.names(TASKS)) == 2


def test_a_generated_name_taken_by_another_task_moves_on_to_the_tokens_next_name() -> None:
    api, _, _ = backend()
    taken = token_name("train-", "t", 0)
    api.put(TASKS, {"metadata": {"name": taken, "namespace": "ml", "labels": {crd.CLIENT_TOKEN_LABEL: "other"}}})
    body = {"metadata": {"generateName": "train-"}, "spec": {}}
    created = create_once(api, "ml", body, token="t")
    assert created["metadata"]["name"] == token_name("train-", "t", 1) != taken
    assert create_once(api, "ml", body, token="t")["metadata"]["name"] == created["metadata"]["name"]


def test_a_named_task_that_exists_without_our_token_is_still_a_duplicate() -> None:
    api, _, b = backend()
    api.put(TASKS, {"metadata": {"name": "train", "namespace": "ml"}})
    with pytest.raises(UsageError, match="already exists"):
        b.submit(parse_manifest(manifest()))


def test_generated_names_have_the_api_servers_shape() -> None:
    names = {token_name("train-", str(i)) for i in range(200)}
    assert len(names) == 200
    assert all(n.startswith("train-") and len(n) == len("train-") + 5 for n in names)
