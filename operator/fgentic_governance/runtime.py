"""Start-up of the operator process: settings, login, store, handler registration, run."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import kopf

from fgentic_governance import kube_login  # (also registers the login handler)
from fgentic_governance.runtime_context import configure, context

log = logging.getLogger("fgentic_governance")
STORE_RETRY = 10.0
CLEANUP_INTERVAL = 3600.0  # Expired rows are unreadable at once; deletion follows within 24 h.


def _settings(settings: kopf.OperatorSettings) -> None:
    # A watch that the server silently stops feeding would freeze reconciliation.
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.watching.connect_timeout = 10
    # Only our explicit, content-free kopf.event() calls become Kubernetes events; Kopf's own
    # log records are never posted (loggers=False), and they log object diffs only at DEBUG.
    settings.posting.loggers = False
    settings.posting.level = logging.INFO
    settings.persistence.finalizer = "governance.fgentic.dev/finalizer"
    settings.execution.max_workers = 8
    # No settings.queueing.worker_limit: each object's worker indexes it and then waits until
    # every listed object is indexed, so with more objects at start-up than the limit, the
    # workers holding the slots wait for objects that can never get one (a limit of 32
    # deadlocked a cluster-wide operator in CI). Kopf also holds a slot through retry delays.


async def open_store(dsn_file: Path) -> None:
    """Connect, migrate the fenced schema idempotently, and publish the store to handlers."""
    import asyncpg

    from fgentic_governance.memory import MemoryStore, migrate

    pool = await asyncpg.create_pool(dsn_file.read_text().strip(), min_size=1, max_size=8)
    async with pool.acquire() as conn:
        version = await migrate(conn)
    configure(store=MemoryStore(pool), store_schema_version=version, store_pool=pool)
    log.info("content store ready at schema version %d", version)


async def _store_loop(dsn_file: Path) -> None:
    """Connect (retrying while the store is down), then delete expired rows every hour.

    Until the store is ready every MemoryScope stays Disabled (STORE_UNAVAILABLE); the scope
    timer picks the store up on its next round.
    """
    while context().store is None:
        try:
            await open_store(dsn_file)
        except Exception as exc:
            log.warning("content store unavailable (%s); retrying", type(exc).__name__)
            await asyncio.sleep(STORE_RETRY)
    while True:
        with contextlib.suppress(Exception):  # Retried next round; counted in metrics.
            await context().store.cleanup_expired()
        await asyncio.sleep(CLEANUP_INTERVAL)


def run_operator(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = str(args.kubeconfig)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from kubernetes import config

    api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(args.kubeconfig) if args.kubeconfig else None)
    configure(local_homeserver=args.local_homeserver, api_client=api_client)

    from fgentic_governance.handlers import (  # noqa: F401  (registration by import)
        diffbase,
        memoryscope,
        offboarding,
        retrievalbinding,
    )

    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup()
    async def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        _settings(settings)
        settings.persistence.diffbase_storage = diffbase.DIFFBASE
        if args.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(args.metrics_port)
        if args.store_dsn_file:
            tasks.append(asyncio.create_task(_store_loop(args.store_dsn_file)))

    @kopf.on.cleanup()
    async def _cleanup(**_: Any) -> None:
        for task in tasks:
            task.cancel()
        pool = getattr(context(), "store_pool", None)
        if pool is not None:
            await pool.close()

    namespaces = args.namespace or []
    kube_login.expect_namespaces(namespaces)
    asyncio.run(kopf.operator(clusterwide=not namespaces, namespaces=namespaces,
                              standalone=True))
    return 0
