"""Start-up of ``fgentic-governance memory-api``: store pool, identity, upstream, server.

The pool runs as the restricted ``fgentic_memory_delegate`` role whatever the DSN's login (SET
ROLE at connect): the runtime role's privileges plus delegation, the one way into a leased
scope, which sql/0010 grants to this role alone (a runtime login cannot delegate). It is
created empty, so the server starts while PostgreSQL is down and answers STORE_UNAVAILABLE
until it is back.
Several replicas may serve at once: leases, counters and buckets live in PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

    from fgentic_governance.memoryapi.http import Identify

log = logging.getLogger("fgentic_governance.memoryapi")
POOL_SIZE = 8
DELEGATE_ROLE = "fgentic_memory_delegate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store-dsn-file", type=Path, required=True,
                        help="file holding the PostgreSQL DSN (mounted from a Secret)")
    parser.add_argument("--upstream", required=True,
                        help="the kagent controller's URL, e.g. http://kagent-controller.kagent"
                             ":8083 (everything but memory is passed through to it)")
    parser.add_argument("--local-homeserver", required=True,
                        help="server name of the local homeserver (X-User-Id must be local)")
    parser.add_argument("--embeddings-upstream", default="",
                        help="the embeddings endpoint (e.g. http://gateway/v1/embeddings) that "
                             "memory-enabled Agents reach through POST /v1/embeddings here, "
                             "each request admitted against the Agent's live lease first")
    parser.add_argument("--upstream-connections", type=int, default=None,
                        help="connections to the controller and the embeddings endpoint at "
                             "once (default: proxy.CONNECTIONS)")
    parser.add_argument("--upstream-per-client", type=int, default=None,
                        help="pass-through requests one source address may have in flight, "
                             "below --upstream-connections (default: proxy.PER_CLIENT)")
    parser.add_argument("--kubeconfig", type=Path, help="default: in-cluster ServiceAccount")
    parser.add_argument("--store-role", default=DELEGATE_ROLE,
                        help="the database role the pool assumes (default: %(default)s)")
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 (a pod serves its own IP)
    parser.add_argument("--port", type=int, default=8083)
    parser.add_argument("--metrics-port", type=int, default=0)


async def start(args: argparse.Namespace, identify: Identify | None = None
                ) -> tuple[web.ServerRunner, Callable[[], Awaitable[None]]]:
    """A listening server and its shutdown."""
    import asyncpg

    from fgentic_governance.memory import bounds
    from fgentic_governance.memory.delegated import DelegatedStore
    from fgentic_governance.memory.readiness import StoreReadiness
    from fgentic_governance.memoryapi import proxy
    from fgentic_governance.memoryapi.http import make_handler
    from fgentic_governance.memoryapi.service import MemoryApi
    from fgentic_governance.serving import http as serving

    identify_address = None
    if identify is None:
        from fgentic_governance.kube.client import api_client
        from fgentic_governance.memoryapi.workloads import KubeIdentity

        kubeconfig = str(args.kubeconfig) if args.kubeconfig else None
        identity = KubeIdentity(api_client(kubeconfig))
        identify, identify_address = identity.agent_for, identity.agent_for_address
    kwargs = bounds.pool_kwargs(min_size=0, max_size=POOL_SIZE)
    kwargs["server_settings"] = {**kwargs.get("server_settings", {}), "role": args.store_role}
    pool = await asyncpg.create_pool(args.store_dsn_file.read_text().strip(), **kwargs)
    # The defaults live with the pass-through (proxy), imported only here: the parser stays light.
    upstream = proxy.session(connections=args.upstream_connections or proxy.CONNECTIONS)
    api = MemoryApi(DelegatedStore(pool), args.local_homeserver)
    runner = await serving.serve(
        make_handler(api, identify, upstream, args.upstream,
                     store_ready=StoreReadiness(pool, log),
                     embeddings_url=args.embeddings_upstream,
                     identify_address=identify_address,
                     per_client=args.upstream_per_client or proxy.PER_CLIENT),
        args.host, args.port)

    async def stop() -> None:
        await runner.cleanup()
        await upstream.close()
        await pool.close()

    return runner, stop


def run_memory_api(args: argparse.Namespace) -> int:
    from fgentic_governance.serving import http as serving

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    serving.scrub_library_logs()

    async def main() -> None:
        stopping = serving.stop_on_signals()
        metrics = (await serving.serve(serving.health_handler(), args.host, args.metrics_port)
                   if args.metrics_port else None)
        _, stop = await start(args)
        log.info("memory api listening port=%d", args.port)
        await stopping.wait()
        await stop()
        if metrics is not None:
            await metrics.cleanup()

    asyncio.run(main())
    return 0
