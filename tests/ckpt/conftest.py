"""Fixtures for checkpoint tests: stores (local, memory://, a real S3 server on loopback), history
builders, and guards that fail a test leaving a writer thread or a SIGTERM handler behind."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from gangrun import Checkpoint
from gangrun._ckpt import notice, writer

S3_KEY = {"key": "testing", "secret": "testing"}


@pytest.fixture(autouse=True)
def _no_leftover_writers_or_handlers() -> Iterator[None]:
    yield
    deadline = time.monotonic() + 5
    while any(t.name.startswith("gangrun-ckpt") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    left = [t.name for t in threading.enumerate() if t.name.startswith("gangrun-ckpt")]
    notice.uninstall()
    writer.exit_deadline = None
    assert not left, f"test left checkpoint writer threads running: {left}"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A real S3-protocol server (moto) on 127.0.0.1; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def s3_options(endpoint: str) -> dict:
    return {**S3_KEY, "client_kwargs": {"endpoint_url": endpoint, "region_name": "eu-west-1"}}


@pytest.fixture
def s3_root(s3_server: str) -> tuple[str, dict]:
    import s3fs

    opts = s3_options(s3_server)
    bucket = f"ckpt-{uuid.uuid4().hex[:10]}"
    s3fs.S3FileSystem(**opts).mkdir(bucket)
    return f"s3://{bucket}/runs/train", opts


@pytest.fixture(params=["local", "memory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path) -> Callable[..., Checkpoint]:
    """make(attempt=N, **kw) -> Checkpoint on a fresh root, for each kind of store."""
    opts: dict = {}
    if request.param == "local":
        root = str(tmp_path / "runs" / "train")
    elif request.param == "memory":
        root = f"memory://gangrun-tests/{uuid.uuid4().hex}/train"
    else:
        root, opts = request.getfixturevalue("s3_root")

    def make(attempt: int = 1, **kw: object) -> Checkpoint:
        kw.setdefault("cache_dir", tmp_path / f"cache-{uuid.uuid4().hex[:6]}")
        if opts:
            kw.setdefault("storage_options", opts)
        return Checkpoint.for_path(root, attempt=attempt, **kw)

    make.root = root
    return make


@pytest.fixture
def run_history() -> Callable[..., None]:
    """replay(make, {attempt: [steps saved, in order]}): earlier attempts' saves (payload b"step-<n>")."""

    def replay(make: Callable[..., Checkpoint], history: dict[int, list[int]]) -> None:
        for attempt, steps in sorted(history.items()):
            ckpt = make(attempt, keep_last=None)
            for step in steps:
                ckpt.save(f"step-{step}".encode(), step=step)

    return replay
