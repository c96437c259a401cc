"""The `fgentic-dev` command (development only, never in the image).

``fgentic-dev up`` is the main job on the embedded default (hack/up.sh): a local control plane,
PostgreSQL, the operator, the webhook and the memory API, the examples applied, every object's
content-free status, and a governed save beside a refused one. Every run starts fresh (what a
previous run left is stopped, its API server objects dropped: the database is new too).
``fgentic-dev down`` stops what a run killed outright left (by its pid files in --workdir).

``fgentic-dev fence`` renders the store's fence after migration (roles, privileges, tables,
views, functions) to docs/store-fence.md; ``--check`` fails when the committed page drifts.
``fgentic-dev chart-schema`` writes the chart's values.schema.json from values.yaml.
``fgentic-dev pgvector --self-test`` installs the portable pgvector into the embedded PostgreSQL
and proves it on this CPU (hack/bootstrap.sh).
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
    up.add_argument("--hold", action="store_true",
                    help="keep running until Ctrl-C, SIGTERM or SIGHUP (each stops everything)")
    down = sub.add_parser("down", help="stop whatever a run in --workdir left running (a run "
                                       "killed outright); nothing to stop is not an error")
    down.add_argument("--workdir", type=Path, default=Path(".run"))
    fence = sub.add_parser("fence", help="render the store's fence after migration to one "
                                         "page, or --check the committed one")
    fence.add_argument("--check", action="store_true", help="fail if the committed page differs")
    fence.add_argument("--output", type=Path, default=None, metavar="PATH",
                       help="the page (default: docs/store-fence.md)")
    schema = sub.add_parser("chart-schema", help="generate the chart's values.schema.json "
                                                 "from values.yaml, or --check it")
    schema.add_argument("--check", action="store_true", help="fail if the committed one differs")
    vap = sub.add_parser("chart-policy", help="generate the chart's ValidatingAdmissionPolicies "
                                              "from the policy's CEL rules, or --check them")
    vap.add_argument("--check", action="store_true", help="fail if the committed one differs")
    pgvector = sub.add_parser("pgvector", help="install the portable pgvector (built once, "
                                               "cached) into the embedded PostgreSQL")
    pgvector.add_argument("--self-test", action="store_true",
                          help="then start the server and run one vector insert, an HNSW build "
                               "and a <=> query")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "fence":
        from fgentic_devenv import fence

        return fence.run(args.output or fence.DEFAULT_OUTPUT, check=args.check)
    if args.command == "chart-schema":
        from fgentic_devenv import chartschema

        return chartschema.run(check=args.check)
    if args.command == "chart-policy":
        from fgentic_devenv import chartpolicy

        return chartpolicy.run(check=args.check)
    if args.command == "pgvector":
        from fgentic_devenv import selftest

        return selftest.run(test=args.self_test)
    from fgentic_devenv.up import run_dev, run_down

    return int(run_down(args) if args.command == "down" else run_dev(args))


if __name__ == "__main__":
    sys.exit(main())
