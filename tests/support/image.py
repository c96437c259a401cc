"""The image under test: what hack/image.sh built (it returns at once when its inputs are
unchanged), and the name the chart gives it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from fgentic_devenv.paths import repo_root

CHART = repo_root() / "charts" / "fgentic-governance"


class ImageBuildError(RuntimeError):
    """hack/image.sh failed (or cannot run here): a test failure, never a skip."""


def build_image() -> Path:
    """Run hack/image.sh; the docker-archive it wrote (beside oci/ and rootfs/)."""
    if os.geteuid() != 0:
        raise ImageBuildError("hack/image.sh (mmdebstrap, chroot) needs root")
    result = subprocess.run(["bash", str(repo_root() / "hack" / "image.sh")],
                            capture_output=True, text=True, timeout=3600, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise ImageBuildError(f"hack/image.sh exited {result.returncode}:\n"
                              f"{result.stderr[-6000:]}")
    tar = Path(result.stdout.splitlines()[-1])
    if tar.name != "image.tar" or not tar.is_file():
        raise ImageBuildError(f"hack/image.sh printed no image.tar: {result.stdout[-500:]}")
    return tar


def chart_image_ref() -> str:
    """``repository:tag`` as the chart names it (values.yaml, Chart.yaml appVersion)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return f"{values['image']['repository']}:{chart['appVersion']}"
