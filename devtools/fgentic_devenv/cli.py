"""The `fgentic-dev` command (development only, never in the image).

``fgentic-dev up`` is the main job on the embedded default (hack/up.sh): a local control plane,
PostgreSQL, the operator, the webhook and the memory API, the examples applied, every object's
content-free status, and a governed save beside a refused one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fgentic-dev", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="local control plane + PostgreSQL + operator + webhook + "
                                   "memory API, the examples applied")
    up.add_argument("--workdir", type=Path, default=Path(".run"))
    up.add_argument("--hold", action="store_true", help="keep running until interrupted")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from fgentic_devenv.up import run_dev

    return int(run_dev(args))


if __name__ == "__main__":
    sys.exit(main())
