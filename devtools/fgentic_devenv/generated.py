"""Write a generated file, or with ``check`` compare it with what would be written (1 on
drift): the one shape of the `fgentic-dev` generators' commands."""

from __future__ import annotations

import sys
from pathlib import Path

from fgentic_devenv.paths import repo_root


def write_or_check(path: Path, text: str, *, check: bool, command: str) -> int:
    shown = path.relative_to(repo_root()) if path.is_relative_to(repo_root()) else path
    if check:
        if not path.exists() or path.read_text() != text:
            print(f"drift: {shown}; run `{command}`", file=sys.stderr)
            return 1
        print(f"{shown} up to date")
        return 0
    path.write_text(text)
    print(f"wrote {shown}")
    return 0
