"""Fixtures of the image tests: the image built by hack/image.sh (once per session; the script
itself returns at once when its inputs are unchanged), its OCI configuration, and a way to run
a command in its root filesystem as the image's user, read-only, as a pod would.

A build that fails is a test failure, never a skip (hack/image.sh installs what it needs)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.image import ImageBuildError, build_image


def _blob(layout: Path, digest: str) -> Any:
    return json.loads((layout / "blobs" / digest.replace(":", "/", 1)).read_text())


@pytest.fixture(scope="session")
def image_dir() -> Path:
    """The output directory of hack/image.sh: image.tar (docker-archive), oci/ (OCI layout),
    rootfs/ (the root filesystem that was packed)."""
    try:
        return build_image().parent
    except ImageBuildError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def image_tag(image_dir: Path) -> str:
    """The one tag in the OCI layout."""
    index = json.loads((image_dir / "oci/index.json").read_text())
    [tag] = [m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]]
    return str(tag)


@pytest.fixture(scope="session")
def image_manifest(image_dir: Path) -> dict[str, Any]:
    index = json.loads((image_dir / "oci/index.json").read_text())
    [descriptor] = index["manifests"]
    manifest: dict[str, Any] = _blob(image_dir / "oci", descriptor["digest"])
    return manifest


@pytest.fixture(scope="session")
def image_config(image_dir: Path, image_manifest: dict[str, Any]) -> dict[str, Any]:
    """The ``config`` member of the image's configuration (User, Entrypoint, Env, ...)."""
    config: dict[str, Any] = _blob(image_dir / "oci", image_manifest["config"]["digest"])["config"]
    return config


RunInImage = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def run_in_image(image_dir: Path, image_config: dict[str, Any]) -> RunInImage:
    """Run ``argv`` chrooted into the root filesystem as the image's user, with only the image's
    environment, the root filesystem bind-mounted read-only in a private mount namespace (it
    goes away with the process: nothing to unmount). No /proc, no /dev: nothing needs them."""

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        script = ('r=$1 u=$2 w=$3; shift 3; mount --bind "$r" "$r" '
                  '&& mount -o remount,bind,ro "$r" '
                  '&& exec chroot --userspec="$u" "$r" /usr/bin/env -i -C "$w" "$@"')
        command = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script,
                   "sh", str(image_dir / "rootfs"), image_config["User"],
                   image_config.get("WorkingDir") or "/", *image_config["Env"], *argv]
        return subprocess.run(command, capture_output=True, text=True, timeout=120,
                              check=False, cwd="/")

    return run
