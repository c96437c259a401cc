"""Start-up of ``fgentic-governance control-api``: store pool, directory, policy, server.

The API does not migrate the schema (the operator owns it); a missing or older schema is
answered with STORE_SCHEMA_MISMATCH per request. The pool is created empty, so the server
starts while PostgreSQL is down and answers STORE_UNAVAILABLE until it is back
(STORE_RESTARTING while it recovers from a crash; memory/readiness.py).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from fgentic_governance.serving.process import add_serving_flags

if TYPE_CHECKING:  # Imported when the server starts: building the CLI parser stays light.
    from fgentic_governance.controlapi.directory import ScopeDirectory
    from fgentic_governance.serving.process import Shell

log = logging.getLogger("fgentic_governance.controlapi")
POOL_SIZE = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fgentic_governance.api import appservice  # one flag, the same in every process

    parser.add_argument("--store-dsn-file", type=Path, required=True,
                        help="file holding the PostgreSQL DSN (mounted from a Secret)")
    parser.add_argument("--token-file", type=Path, required=True,
                        help="file holding the bridge's bearer token (mounted from a Secret)")
    parser.add_argument("--local-homeserver", required=True,
                        help="server name of the local homeserver")
    appservice.add_flag(parser)
    parser.add_argument("--bot-mxid", required=True, help="the bridge bot's MXID")
    parser.add_argument("--ghost-template", required=True,
                        help="ghost MXID of an Agent, e.g. '@agent-{namespace}-{name}:{server}'")
    parser.add_argument("--kubeconfig", type=Path, help="default: in-cluster ServiceAccount")
    parser.add_argument("--namespace", action="append",
                        help="read MemoryScopes only in these namespaces (default: all)")
    add_serving_flags(parser, port=8443, metrics=True)
    parser.add_argument("--confirm-seconds", type=float, default=120.0,
                        help="lifetime of a forget-all/off confirmation token")
    parser.add_argument("--snapshot-max-age", type=float, default=30.0,
                        help="seconds a control-room snapshot may be old")


async def start(args: argparse.Namespace, shell: Shell,
                directory: ScopeDirectory | None = None) -> None:
    """The server listening, its shutdown registered on ``shell``: the server, then the store
    pool (created on the running loop)."""
    import asyncpg

    from fgentic_governance.controlapi.auth import BearerTokenFile
    from fgentic_governance.controlapi.cluster_directory import KubeDirectory
    from fgentic_governance.controlapi.confirm import ConfirmationBook
    from fgentic_governance.controlapi.http import make_handler
    from fgentic_governance.controlapi.room import RoomPolicy
    from fgentic_governance.controlapi.service import ControlService
    from fgentic_governance.kube.client import api_client
    from fgentic_governance.memory import MemoryStore, bounds, dsn
    from fgentic_governance.memory.confirmations import StoreLedger
    from fgentic_governance.memory.readiness import StoreReadiness

    policy = RoomPolicy(args.local_homeserver, args.bot_mxid, args.ghost_template,
                        max_snapshot_age=args.snapshot_max_age,
                        appservice=args.appservice_namespaces)
    if directory is None:
        kubeconfig = str(args.kubeconfig) if args.kubeconfig else None
        directory = KubeDirectory(api_client(kubeconfig), args.namespace or ())
    # Every erasure and its read-back on the primary (memory/dsn.py, docs/ha.md).
    pool = await asyncpg.create_pool(dsn.from_file(args.store_dsn_file),
                                     **bounds.pool_kwargs(min_size=0, max_size=POOL_SIZE))
    shell.on_stop(pool.close)
    # Erasures may wait on their fence (bounds.POOL); they never take the whole pool, so
    # other users' status and inspect calls keep a connection.
    store = MemoryStore(pool, erasure_slots=POOL_SIZE // 2)
    confirmations = ConfirmationBook(StoreLedger(pool), args.confirm_seconds)
    service = ControlService(store, directory, policy, confirmations)
    await shell.serve(make_handler(service, BearerTokenFile(args.token_file),
                                   store_ready=StoreReadiness(pool, log)),
                      args.host, args.port)


def run_control_api(args: argparse.Namespace) -> int:
    from fgentic_governance.serving import process

    async def setup(shell: Shell) -> None:
        await shell.metrics(args.host, args.metrics_port)
        await start(args, shell)
        log.info("control api listening port=%d", args.port)

    return process.run(setup)
