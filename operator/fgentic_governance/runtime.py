"""Start-up of the operator process: settings, login, handler registration, run."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

import kopf

from fgentic_governance import kube_login  # noqa: F401  (registers the login handler)
from fgentic_governance.runtime_context import configure

log = logging.getLogger("fgentic_governance")


def _settings(settings: kopf.OperatorSettings) -> None:
    # A watch that the server silently stops feeding would freeze reconciliation.
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.watching.connect_timeout = 10
    # Kopf logs object diffs at DEBUG; keep its posting of events to content-free summaries.
    settings.posting.level = logging.WARNING
    settings.persistence.finalizer = "governance.fgentic.dev/finalizer"
    settings.execution.max_workers = 8


def run_operator(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = str(args.kubeconfig)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from kubernetes import config

    api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(args.kubeconfig) if args.kubeconfig else None)
    configure(local_homeserver=args.local_homeserver, api_client=api_client)

    from fgentic_governance.handlers import (  # noqa: F401  (registration by import)
        memoryscope,
        offboarding,
        retrievalbinding,
    )

    @kopf.on.startup()
    def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        _settings(settings)

    namespaces = args.namespace or []
    asyncio.run(kopf.operator(clusterwide=not namespaces, namespaces=namespaces,
                              standalone=True))
    return 0
