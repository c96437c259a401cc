"""Start-up of ``fgentic-governance retrieval-server``: corpus pool, embeddings client, the MCP
protocol, the HTTP server and its readiness. One process serves one RetrievalBinding's tool.
Stateless, so any number of replicas may serve at once.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from fgentic_governance.serving.process import add_serving_flags

if TYPE_CHECKING:
    import asyncpg

    from fgentic_governance.serving.process import Shell

log = logging.getLogger("fgentic_governance.retrievalserver")
POOL_SIZE = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help="the configuration the operator renders from the RetrievalBinding "
                             "(its ConfigMap <ns>.<binding>.retrieval-server); replaces --agent, "
                             "--tool and --mcp-path")
    parser.add_argument("--agent", metavar="NAMESPACE/NAME",
                        help="the retrieval Agent every X-Fgentic-Identity must name")
    parser.add_argument("--tool", help="the one tool's name (the RetrievalBinding's "
                                       "mcpServer.tool)")
    parser.add_argument("--mcp-path", default="/mcp", help="the Streamable HTTP path")
    parser.add_argument("--store-dsn-file", type=Path, required=True,
                        help="file holding the corpus database's DSN (mounted from a Secret)")
    parser.add_argument("--embeddings-url", required=True,
                        help="an OpenAI-compatible embeddings endpoint, e.g. agentgateway's "
                             "embeddings listener: http://gateway:4001/v1/embeddings")
    parser.add_argument("--embeddings-model", required=True)
    parser.add_argument("--embeddings-key-file", type=Path, default=None,
                        help="file holding the Bearer key for the embeddings endpoint")
    parser.add_argument("--dimensions", type=int, choices=(768, 1024), default=768,
                        help="the corpus's and the embeddings' dimension (the server is not "
                             "ready while the corpus table has another)")
    add_serving_flags(parser, port=8080, metrics=True)


def _binding(args: argparse.Namespace) -> tuple[str, str, str, str]:
    """(agent namespace, agent name, tool, MCP path), from --config or the flags."""
    if args.config is not None:
        from fgentic_governance.retrieval.server_config import ServerConfigError, load_config

        if args.agent or args.tool:
            raise SystemExit("--config replaces --agent and --tool: give one or the other")
        try:
            config = load_config(args.config)
        except (OSError, ServerConfigError) as exc:
            raise SystemExit(f"--config: {exc}") from None
        return config.agent.namespace, config.agent.name, config.tool, config.mcp_path
    if not args.agent or not args.tool:
        raise SystemExit("give --config, or both --agent and --tool")
    namespace, _, name = args.agent.partition("/")
    if not namespace or not name or "/" in name:
        raise SystemExit("--agent must be NAMESPACE/NAME")
    return namespace, name, args.tool, args.mcp_path


async def start(args: argparse.Namespace, shell: Shell) -> None:
    import aiohttp
    import asyncpg

    from fgentic_governance.contract import AgentRef
    from fgentic_governance.memory import dsn
    from fgentic_governance.retrievalserver.embeddings import Embedder
    from fgentic_governance.retrievalserver.http import BOUNDS, make_handler
    from fgentic_governance.retrievalserver.protocol import Protocol
    from fgentic_governance.retrievalserver.readiness import Readiness
    from fgentic_governance.retrievalserver.service import RetrievalService
    from fgentic_governance.serving import http as serving

    namespace, name, tool, path = _binding(args)
    agent = AgentRef(namespace=namespace, name=name)
    key = args.embeddings_key_file.read_text().strip() if args.embeddings_key_file else ""
    # The primary, as every store pool (memory/dsn.py): ACLs revoked there are revoked here.
    pool = await asyncpg.create_pool(dsn.from_file(args.store_dsn_file), min_size=0,
                                     max_size=POOL_SIZE, command_timeout=5.0,
                                     reset=keep_session)
    shell.on_stop(pool.close)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32))
    shell.on_stop(session.close)
    embedder = Embedder(session, args.embeddings_url, args.embeddings_model,
                        dimensions=args.dimensions, api_key=key)
    search = RetrievalService(pool, embedder, dimensions=args.dimensions)
    protocol = Protocol(tool, search)
    running = protocol.running()
    await running.__aenter__()
    shell.on_stop(lambda: running.__aexit__(None, None, None))
    readiness = Readiness(pool, args.embeddings_url, dimensions=args.dimensions)
    shell.background(readiness.watch())
    if args.metrics_port:
        await shell.serve(serving.health_handler(readiness.ready), args.host, args.metrics_port)
    await shell.serve(make_handler(protocol, agent=agent, path=path),
                      args.host, args.port, bounds=BOUNDS)


async def keep_session(_conn: asyncpg.Connection) -> None:
    """The pool's reset between checkouts: nothing to undo. asyncpg still rolls back an open
    transaction first; a checkout here is one search-function call, which changes no session
    state (its settings are the function's SET clauses; no cursor, LISTEN or advisory lock).
    The default reset (``RESET ALL`` and friends) is one more round trip per call (~0.2 ms)."""


def run_retrieval_server(args: argparse.Namespace) -> int:
    from fgentic_governance.serving import process

    async def setup(shell: Shell) -> None:
        await start(args, shell)
        log.info("knowledge retrieval server listening port=%d", args.port)

    return process.run(setup, fast_loop=True)
