"""Start-up of ``fgentic-governance memory-api``: store pool, identity, upstream, server.

The pool runs as the restricted ``fgentic_memory_delegate`` role whatever the DSN's login (SET
ROLE at connect): the runtime role's privileges plus delegation, the one way into a leased
scope, which sql/0010 grants to this role alone (a runtime login cannot delegate). A login
that could leave that role is reported, and refused with ``--require-delegate-login``
(:mod:`login`). It is
created empty, so the server starts while PostgreSQL is down and answers STORE_UNAVAILABLE
until it is back.
Several replicas may serve at once: leases, counters and buckets live in PostgreSQL.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from fgentic_governance.serving.process import add_serving_flags

if TYPE_CHECKING:
    from fgentic_governance.memoryapi.http import Identify
    from fgentic_governance.serving.process import Shell

log = logging.getLogger("fgentic_governance.memoryapi")
POOL_SIZE = 8
DELEGATE_ROLE = "fgentic_memory_delegate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fgentic_governance.api import appservice  # one flag, the same in every process

    parser.add_argument("--store-dsn-file", type=Path, required=True,
                        help="file holding the PostgreSQL DSN (mounted from a Secret)")
    parser.add_argument("--upstream", required=True,
                        help="the kagent controller's URL, e.g. http://kagent-controller.kagent"
                             ":8083 (everything but memory is passed through to it)")
    parser.add_argument("--local-homeserver", required=True,
                        help="server name of the local homeserver (X-User-Id must be local)")
    appservice.add_flag(parser)
    parser.add_argument("--embeddings-upstream", default="",
                        help="the embeddings endpoint (e.g. http://gateway/v1/embeddings) that "
                             "memory-enabled Agents reach through POST /v1/embeddings here, "
                             "each request admitted against the Agent's live lease first")
    parser.add_argument("--model-upstream", default="",
                        help="the chat completions endpoint (e.g. http://gateway/v1/chat/"
                             "completions) that memory-enabled Agents reach through POST "
                             "/v1/chat/completions here; kagent's summarisation is admitted "
                             "against the Agent's live lease first")
    parser.add_argument("--upstream-connections", type=int, default=None,
                        help="connections at once to each upstream: the controller, the "
                             "embeddings endpoint and the model, each its own (default: "
                             "proxy.CONNECTIONS)")
    parser.add_argument("--upstream-per-client", type=int, default=None,
                        help="requests one source address may have in flight to one upstream, "
                             "below --upstream-connections (default: proxy.PER_CLIENT)")
    parser.add_argument("--activity-seconds", type=float, default=None,
                        help="an embedding or summary is charged to the one user whose "
                             "session or memory calls the Agent's Pod made within this many "
                             "seconds; none or several is refused (default: "
                             "activity.WINDOW_SECONDS)")
    parser.add_argument("--kubeconfig", type=Path, help="default: in-cluster ServiceAccount")
    parser.add_argument("--store-role", default=DELEGATE_ROLE,
                        help="the database role the pool assumes (default: %(default)s)")
    parser.add_argument("--require-delegate-login", action="store_true",
                        help="not ready (STORE_LOGIN_PRIVILEGED) while the DSN's login could "
                             "act as the store's owner: a superuser or a member of the owner "
                             "role (set by the chart with memoryApi.dsnSecret)")
    add_serving_flags(parser, port=8083, metrics=True)


async def start(args: argparse.Namespace, shell: Shell,
                identify: Identify | None = None) -> None:
    """The server listening, its shutdown registered on ``shell``: the server, the upstream
    session, then the store pool."""
    import asyncpg

    from fgentic_governance.memory import bounds, dsn
    from fgentic_governance.memory.delegated import DelegatedStore
    from fgentic_governance.memory.readiness import StoreReadiness
    from fgentic_governance.memoryapi import proxy
    from fgentic_governance.memoryapi.activity import WINDOW_SECONDS, Activity
    from fgentic_governance.memoryapi.http import make_handler
    from fgentic_governance.memoryapi.login import LoginReadiness
    from fgentic_governance.memoryapi.service import MemoryApi

    identify_address = None
    if identify is None:
        from fgentic_governance.kube.client import api_client
        from fgentic_governance.memoryapi.workloads import KubeIdentity

        kubeconfig = str(args.kubeconfig) if args.kubeconfig else None
        identity = KubeIdentity(api_client(kubeconfig))
        identify, identify_address = identity.agent_for, identity.agent_for_address
    kwargs = bounds.pool_kwargs(min_size=0, max_size=POOL_SIZE)
    kwargs["server_settings"] = {**kwargs.get("server_settings", {}), "role": args.store_role}
    # Every save, lease and charge on the primary (memory/dsn.py, docs/ha.md).
    pool = await asyncpg.create_pool(dsn.from_file(args.store_dsn_file), **kwargs)
    shell.on_stop(pool.close)
    # The defaults live with the pass-through (proxy), imported only here: the parser stays light.
    upstream = proxy.Upstreams(args.upstream_connections or proxy.CONNECTIONS,
                               args.upstream_per_client or proxy.PER_CLIENT)
    shell.on_stop(upstream.close)
    api = MemoryApi(DelegatedStore(pool), args.local_homeserver, args.appservice_namespaces)
    await shell.serve(
        make_handler(api, identify, upstream, args.upstream,
                     store_ready=LoginReadiness(StoreReadiness(pool, log), pool, log,
                                                require=args.require_delegate_login),
                     embeddings_url=args.embeddings_upstream,
                     model_url=args.model_upstream,
                     identify_address=identify_address,
                     activity=Activity(args.activity_seconds or WINDOW_SECONDS)),
        args.host, args.port)


def run_memory_api(args: argparse.Namespace) -> int:
    from fgentic_governance.serving import process

    async def setup(shell: Shell) -> None:
        await shell.metrics(args.host, args.metrics_port)
        await start(args, shell)
        log.info("memory api listening port=%d", args.port)

    return process.run(setup)
