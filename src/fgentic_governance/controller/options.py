"""The operator's flags (``fgentic-governance operator``): its own, beside its start-up
(``controller.main``), as every process of the product declares its own."""

from __future__ import annotations

import argparse

from fgentic_governance.serving.process import add_lease_flags, add_runtime_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_runtime_flags(parser)
    add_lease_flags(parser, "--leader-lease", "running the handlers; the others wait as standbys")
    parser.add_argument("--cluster-kinds", action=argparse.BooleanOptionalAction, default=True,
                        help="handle the cluster-scoped kinds (PrincipalOffboarding, "
                             "MemoryPostureFloor); with several shards (--namespace sets, one "
                             "--leader-lease each) exactly one does, the others pass "
                             "--no-cluster-kinds (docs/scale.md)")
    parser.add_argument("--erasure-process", action=argparse.BooleanOptionalAction,
                        default=False,
                        help="run each offboarding's store flow in a process of its own, forked "
                             "at start-up: its time no longer grows with a creation burst's "
                             "load, for 25-36 MiB more (docs/scale.md); off: on the erasure "
                             "lane's thread")
    parser.add_argument("--memory-model-url", default="",
                        help="the governed model route (<memory API>/v1): each MemoryScope's "
                             "ModelRouteGoverned condition says whether its Agent's ModelConfigs "
                             "use it (empty: none configured, the condition is False)")
