"""Fixtures for torch tests: a real S3-protocol server (moto) on loopback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_root(s3_server: str) -> tuple[str, dict[str, Any]]:
    """A fresh bucket; yields the task root URI and the fsspec options to reach it."""
    import s3fs

    opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": s3_server, "region_name": "eu-west-1"}}
    bucket = f"ckpt-{uuid.uuid4().hex[:10]}"
    s3fs.S3FileSystem(**opts).mkdir(bucket)
    return f"s3://{bucket}/runs/train", opts
