"""The REST client's error mapping on streams: a cut watch or log stream is an `ApiError`, like a failed request."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from urllib3.exceptions import ProtocolError

from gangrun._backends.kube.client import TASKS, Api
from gangrun._errors import ApiError


class _Response:
    """A streamed response that yields `chunks`, then fails as a dropped connection does."""

    status = 200

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from self.chunks
        raise ProtocolError("Connection broken: IncompleteRead(0 bytes read)")

    def release_conn(self) -> None:
        pass


def _api(*chunks: bytes) -> Api:
    response = _Response(list(chunks))
    api_client = SimpleNamespace(
        configuration=SimpleNamespace(host="https://cluster.example"),
        update_params_for_auth=lambda *args: None,
        rest_client=SimpleNamespace(request=lambda *args, **kwargs: SimpleNamespace(status=200, response=response)))
    return Api(api_client)


def test_a_watch_cut_mid_stream_is_an_api_error_so_the_informer_resumes_instead_of_relisting() -> None:
    added = b'{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "7"}}}\n'
    stream = _api(added).watch(TASKS, "ml", resource_version="5")
    assert next(stream)["type"] == "ADDED"
    with pytest.raises(ApiError) as e:
        next(stream)
    assert e.value.status == 0 and "ProtocolError" in str(e.value)


def test_a_log_stream_cut_mid_way_is_an_api_error_not_a_traceback() -> None:
    lines = _api(b"step 1\nstep 2\n").log_lines("ml", "train-1-workers-0-0-abcde")
    assert [next(lines), next(lines)] == ["step 1", "step 2"]
    with pytest.raises(ApiError):
        next(lines)
