"""An absolute local checkpoint path is opened without fsspec, and spelled exactly as fsspec spells it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gangrun._ckpt import storage


@pytest.mark.parametrize("uri", ["/var/lib/gangrun/checkpoints", "/var/lib/gangrun/checkpoints/", "file:///ckpt/t",
                                 "file:///ckpt//t/", "file:///", "/", "ckpt/relative", "~/ckpt", "file:ckpt",
                                 "s3://bucket/ckpt", "memory://x", "simplecache::file:///x", "local:///x"])
def test_a_local_path_is_fsspec_s_spelling_or_left_to_fsspec(uri: str) -> None:
    from fsspec.implementations.local import LocalFileSystem

    fast = storage.local_path(uri)
    fs, path = storage.filesystem(uri)
    absolute = uri.startswith(("/", "file:///")) and "::" not in uri
    assert (fast is not None) is absolute
    assert fast is None or (isinstance(fs, LocalFileSystem) and fast == path)


def test_opening_a_local_checkpoint_root_does_not_import_fsspec() -> None:
    code = ("import sys; from gangrun._ckpt.storage import open_storage; "
            "s, p = open_storage('file:///var/lib/gangrun/checkpoints/'); "
            "print(type(s).__name__, p, 'fsspec' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["LocalStorage", "/var/lib/gangrun/checkpoints", "False"]
