"""Locate (building on demand) the cached control-plane binaries and the pinned upstream CRDs.

The binaries are built from source by hack/build-controlplane.sh, which keeps versioned files in
a cache directory outside the repo and stable symlinks (etcd, kube-apiserver, kubectl, helm,
promtool).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path
from typing import Final

from fgentic_devenv.paths import repo_root

BINARIES = ("etcd", "kube-apiserver", "kubectl", "helm", "promtool")

# Which build-controlplane.sh target produces each binary.
_TARGET = {"etcd": "etcd", "kube-apiserver": "kubernetes", "kubectl": "kubernetes", "helm": "helm",
           "promtool": "prometheus"}

UPSTREAM_CRD_GLOBS = (
    "kagent-v0.9.11/crds/*.yaml",
    "agentgateway-v1.3.1/crds/*.yaml",
    "gateway-api-v1.6.0/crds/*.yaml",
)


class BinaryUnavailableError(RuntimeError):
    """A control-plane binary is missing and could not be built."""


def cache_dir() -> Path:
    """The same directory hack/build-controlplane.sh writes to."""
    if env := os.environ.get("FGENTIC_BIN_CACHE"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "fgentic-governance" / "bin"


def _usable(path: Path) -> bool:
    # The script creates symlinks even for targets it did not build, so follow them.
    return path.is_file() and os.access(path, os.X_OK)


def build(target: str = "all") -> None:
    """Run hack/build-controlplane.sh for ``target`` (all | etcd | kubernetes | helm |
    prometheus)."""
    script = repo_root() / "hack" / "build-controlplane.sh"
    if not script.is_file():
        raise BinaryUnavailableError(f"{script} not found; set FGENTIC_REPO_ROOT")
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FGENTIC_BIN_CACHE": str(cache)}
    # The script writes <binary>.tmp files, so concurrent builds (xdist workers) must queue.
    with (cache / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(
            [str(script), target], env=env, capture_output=True, text=True, check=False
        )
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).splitlines()[-30:])
        raise BinaryUnavailableError(f"{script} {target} failed ({result.returncode}):\n{tail}")


def binary(name: str) -> Path:
    """Path of a cached binary, building it first when it is missing."""
    if name not in _TARGET:
        raise ValueError(f"unknown binary {name!r}; expected one of {BINARIES}")
    path = cache_dir() / name
    if not _usable(path):
        build(_TARGET[name])
    if not _usable(path):
        raise BinaryUnavailableError(f"{path} still missing after building {_TARGET[name]}")
    return path


def upstream_dir() -> Path:
    """The pinned upstream release tree: FGENTIC_UPSTREAM_DIR, else <repo>/../shared/upstream."""
    if env := os.environ.get("FGENTIC_UPSTREAM_DIR"):
        return Path(env)
    return (repo_root() / ".." / "shared" / "upstream").resolve()


def upstream_crds() -> list[Path]:
    """Every upstream CRD manifest (kagent, agentgateway, Gateway API); fails if any set is gone."""
    root = upstream_dir()
    found: list[Path] = []
    for pattern in UPSTREAM_CRD_GLOBS:
        matches = sorted(root.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"no upstream CRDs match {root / pattern}")
        found += matches
    return found


AGENTGATEWAY: Final = "agentgateway-1.3.1"


def agentgateway_candidates() -> list[Path]:
    """AGENTGATEWAY_BIN alone if set, else the shared build beside the repository (and
    /work/shared/bin)."""
    if override := os.environ.get("AGENTGATEWAY_BIN"):
        return [Path(override)]
    return [upstream_dir().parent / "bin" / AGENTGATEWAY, Path("/work/shared/bin") / AGENTGATEWAY]


def find_agentgateway() -> Path | None:
    """The agentgateway v1.3.1 binary, or None where none is executable."""
    return next((p for p in agentgateway_candidates() if p.is_file() and os.access(p, os.X_OK)),
                None)
