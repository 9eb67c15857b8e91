"""The control plane's binaries and Go modules: the versioned cache ``hack/build-control-plane.sh`` fills
(etcd, kube-apiserver, controller-manager, scheduler, kwok, JobSet, Kueue, kubelet, CoreDNS), and the module
folders the CRD, webhook and kwok stage YAMLs are read from (brought back with ``go mod download`` when the
module cache was cleaned since the build)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-control-plane.sh"
BUILD_SCRIPT_REL = "hack/build-control-plane.sh"


class NotBuiltError(RuntimeError):
    """The control-plane binaries are not in the cache."""


@dataclass(frozen=True)
class Binaries:
    root: Path
    versions: dict[str, str]
    moddirs: dict[str, Path]

    def path(self, name: str) -> Path:
        return self.root / "bin" / name


def _read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def cache_dir() -> Path:
    """The versioned cache directory, as the build script computes it."""
    explicit = os.environ.get("GANGRUN_CONTROL_PLANE_DIR")
    if explicit:
        return Path(explicit)
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def locate_binaries() -> Binaries:
    """Find a complete build, or raise NotBuiltError naming the build script."""
    root = cache_dir()
    if not (root / "complete").exists():
        raise NotBuiltError(
            f"control-plane binaries are not built (no complete cache at {root}); "
            f"run `bash {BUILD_SCRIPT_REL}` first (cold build: about 10-17 minutes on 2 cores)"
        )
    versions = _read_env_file(root / "versions.env")
    moddirs = {k: Path(v) for k, v in _read_env_file(root / "moddirs.env").items()}
    # The module cache may have been cleaned since the build: ask Go to bring it back.
    wanted = {
        "KWOK_DIR": f"sigs.k8s.io/kwok@{versions['KWOK_VERSION']}",
        "JOBSET_DIR": f"sigs.k8s.io/jobset@{versions['JOBSET_VERSION']}",
        "KUEUE_DIR": f"sigs.k8s.io/kueue@{versions['KUEUE_VERSION']}",
    }
    for key, mod in wanted.items():
        if key not in moddirs or not moddirs[key].is_dir():
            out = subprocess.run(
                ["go", "mod", "download", "-json", mod], check=True, capture_output=True, text=True
            )
            moddirs[key] = Path(json.loads(out.stdout)["Dir"])
    return Binaries(root=root, versions=versions, moddirs=moddirs)


def load_yaml_docs(path: Path) -> list[dict]:
    """The documents of a YAML file (of a module folder: CRDs, webhooks, kwok stages)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
