"""Where the repository's generated artefacts live (for the CLI's defaults)."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The source checkout: FGENTIC_REPO_ROOT, else two levels above this package."""
    env = os.environ.get("FGENTIC_REPO_ROOT")
    return Path(env) if env else Path(__file__).resolve().parents[2]


def crd_dirs() -> list[Path]:
    root = repo_root()
    return [root / "crds", root / "charts" / "fgentic-governance" / "files" / "crds"]


def schema_dir() -> Path:
    return repo_root() / "schemas"
