"""Kopf login without a client library: in-cluster service account first, then kubeconfig.

The session Kopf would build itself has no connection limit (``TCPConnector(limit=0)``): a
burst of 1,000 new objects opened about one TLS connection per concurrent request, and each
idle connection keeps asyncio's 256 KiB SSL buffer (38 MiB of the operator's heap after 500
scopes, measured with tracemalloc; docs/load.md). The same credentials, bounded: every watch
stream keeps its own connection, and the handlers share ``FGENTIC_API_CONNECTIONS`` more
(``controller/tuning.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import aiohttp
import kopf

from fgentic_governance.api.registry import KINDS
from fgentic_governance.controller import lanes, tuning
from fgentic_governance.controller.leadership import ensure_leading

WATCHED_KINDS: Final = len(KINDS)  # each watched in every namespace (or cluster-wide)
_GLOB: Final = frozenset("*?[!")
_READS: Final = frozenset({"GET", "HEAD"})
_watch_streams: int | None = WATCHED_KINDS


def expect_namespaces(namespaces: Sequence[str]) -> None:
    """One watch stream per kind and namespace (cluster-wide: per kind). A glob pattern matches
    namespaces unknown in advance: then the count is unknown too, and the session is left
    unbounded rather than risk watches holding every connection."""
    global _watch_streams  # noqa: PLW0603  (set once, before the operator starts)
    if any(set(ns) & _GLOB for ns in namespaces):
        _watch_streams = None
    else:
        _watch_streams = WATCHED_KINDS * max(1, len(namespaces))


def connection_limit() -> int:
    """aiohttp's limit; 0 means none."""
    return 0 if _watch_streams is None else _watch_streams + tuning.API_CONNECTIONS.read()


@kopf.on.login()
async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
    info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    if info is None:
        return None
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connection_limit(), ssl=info.as_ssl_context()),
        headers=info.as_http_headers(), proxy=info.proxy_url, trust_env=info.trust_env,
        trace_configs=[_leader_gate()])
    return kopf.AiohttpSession(server=info.server, default_namespace=info.default_namespace,
                               priority=info.priority, expiration=info.expiration,
                               aiohttp_session=session)


kopf.on.login(registry=lanes.ERASURE_REGISTRY, id="login")(login)  # the erasure operator's too


def _leader_gate() -> aiohttp.TraceConfig:
    """Every write Kopf sends (status and finalizer patches, progress annotations, events)
    passes the leader's renew deadline first (review R4-5); reads and watches do not."""
    async def check(_session: aiohttp.ClientSession, _context: Any,
                    params: aiohttp.TraceRequestStartParams) -> None:
        if params.method.upper() not in _READS:
            ensure_leading()

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(check)
    return trace
