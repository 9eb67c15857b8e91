"""gangrun.torch on an object store (a real S3-protocol server): every rank writes its shards to
``ckpt-<seq>/`` directly and the manifest, written last by rank 0, is the commit."""

from __future__ import annotations

import json
from typing import Any

import s3fs

from gangrun import Checkpoint
from tests.torch_sdk.torchgang import Gang, require_torch

torch = require_torch()


def test_b1_sharded_save_on_s3_commits_by_manifest_and_loads_resharded(s3_root: tuple[str, dict[str, Any]]) -> None:
    from gangrun.torch import load_state

    uri, opts = s3_root
    saved = Gang(uri, world=2, mode="save", env={"STEP": "3", "STORAGE_OPTIONS": json.dumps(opts)}).wait()
    assert {r["seq"] for r in saved} == {1}
    fs = s3fs.S3FileSystem(**opts)
    folder = f"{uri.removeprefix('s3://')}/attempt-1/ckpt-000001"
    names = {p.rsplit("/", 1)[-1] for p in fs.find(folder)}
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "gangrun-torch.json", "manifest.json"} <= names
    # A torn save (data, no manifest) with a higher seq is not a checkpoint.
    fs.pipe_file(f"{uri.removeprefix('s3://')}/attempt-1/ckpt-000002/data/__0_0.distcp", b"half")
    sd = {"w": torch.zeros(8, 8), "b": torch.zeros(8), "meta": {"note": None}}
    loaded = load_state(sd, checkpoint=Checkpoint.for_path(uri, attempt=2), storage_options=opts)
    assert loaded is not None and (loaded.seq, loaded.step, loaded.world_size, loaded.loaded_from) == (1, 3, 2, "previous")
    assert loaded.resharded and bool((sd["w"] == 3).all()) and bool((sd["b"] == -3).all())
