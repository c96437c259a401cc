"""The HTTP face of the memory API: three routes of ours, two refused, the rest passed on.

Every request target is read once (``wire.request_target``: origin-form only, no fragment);
routing, the governed-path check and the forwarded URL all use that one reading.

Served by the shared content-free server (``fgentic_governance.serving.http``): bounded header,
body and keep-alive times, aiohttp's log records reduced to an exception type. One log line
per memory request - action, bounded code, status, a random request id - never a header, a
body, the subject or the Agent.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from types import MappingProxyType
from typing import Final

import aiohttp
from aiohttp import web
from prometheus_client import Counter
from yarl import URL

from fgentic_governance.api.kagent import AgentRef
from fgentic_governance.memoryapi import proxy
from fgentic_governance.memoryapi.codes import ApiError, ApiReason, Code, status_of
from fgentic_governance.memoryapi.service import MemoryApi, Reply, Request
from fgentic_governance.memoryapi.wire import (
    MAX_BODY_BYTES,
    parse_batch,
    parse_save,
    parse_search,
    request_target,
)
from fgentic_governance.reasons import Reason
from fgentic_governance.serving import http as serving
from fgentic_governance.serving import strict_json

log = logging.getLogger("fgentic_governance.memoryapi")
PREFIX: Final = "/api/memories"
REQUESTS: Final = Counter("fgentic_memory_api_requests",
                          "Memory API requests by action and outcome reason code.",
                          ["action", "reason"])
_HEADERS: Final = MappingProxyType({"Cache-Control": "no-store"})
EMBEDDINGS_PATH: Final = "/v1/embeddings"
EMBEDDINGS: Final = Counter("fgentic_memory_api_embeddings",
                            "Embeddings requests by outcome: charged to the one leased scope, "
                            "unattributed (several leased), or refused (reason code).",
                            ["outcome"])
Identify = Callable[[str], Awaitable[AgentRef]]


def _routes(api: MemoryApi) -> dict[str, tuple[str, Callable[[Request, bytes],
                                                             Awaitable[Reply]]]]:
    async def save(request: Request, raw: bytes) -> Reply:
        return await api.save(request, parse_save(raw))

    async def batch(request: Request, raw: bytes) -> Reply:
        return await api.save_batch(request, parse_batch(raw))

    async def search(request: Request, raw: bytes) -> Reply:
        return await api.search(request, parse_search(raw))

    return {PREFIX + "/sessions": ("save", save), PREFIX + "/sessions/batch": ("batch", batch),
            PREFIX + "/search": ("search", search)}


def governed_path(path: str) -> bool:
    """Whether a target's path is, or might be in another spelling, one of the controller's
    memory routes: those never pass through. Encoded characters, empty, dot and backslash
    segments and ``;`` parameters are refused outright rather than normalised the way some
    server might."""
    if "%" in path or "\\" in path or "//" in path or ";" in path:
        return True
    if any(part in (".", "..") for part in path.split("/")):
        return True
    lowered = path.lower()
    return lowered.rstrip("/") == PREFIX or lowered.startswith(PREFIX + "/")


def _bearer(header: str | None) -> str:
    if header is None or header[:7].lower() != "bearer " or not header[7:].strip():
        raise ApiError(ApiReason.UNAUTHENTICATED)
    return header[7:].strip()


async def _body(request: web.BaseRequest, timeout: float) -> bytes:
    try:
        return await serving.read_body(request, MAX_BODY_BYTES, timeout)
    except strict_json.Refused as refused:
        too_large = refused.code is strict_json.Refusal.BODY_TOO_LARGE
    raise ApiError(ApiReason.REQUEST_TOO_LARGE if too_large else ApiReason.REQUEST_MALFORMED)


def _refused_target(code: Code) -> web.Response:
    REQUESTS.labels(action="target", reason=code.value).inc()
    log.info("memory-api action=target reason=%s status=%d request=%s", code.value,
             status_of(code), secrets.token_hex(8))
    return _answer(Reply(status_of(code), {"error": code.value}))


async def _probe(readiness: bool, in_flight: proxy.InFlight,
                 store_ready: Callable[[], Awaitable[Reason]] | None) -> web.Response:
    """Liveness is always OK; readiness is not while every upstream connection is held (a
    pass-through request would wait for one) or while the store is unreachable
    (STORE_UNAVAILABLE) or recovering from a crash (STORE_RESTARTING)."""
    reason: Code = Reason.OK
    if readiness and in_flight.exhausted:
        reason = ApiReason.UPSTREAM_BUSY
    elif readiness and store_ready is not None:
        reason = await store_ready()
    return web.json_response({"reason": reason.value},
                             status=200 if reason is Reason.OK else 503, headers=_HEADERS)


def _answer(reply: Reply) -> web.Response:
    return web.Response(status=reply.status, body=json.dumps(reply.body).encode(),
                        content_type="application/json", headers=_HEADERS)


def make_handler(api: MemoryApi, identify: Identify, upstream: aiohttp.ClientSession,
                 upstream_url: str, *, body_timeout: float = serving.BODY_TIMEOUT,
                 store_ready: Callable[[], Awaitable[Reason]] | None = None,
                 embeddings_url: str = "",
                 identify_address: Identify | None = None,
                 per_client: int = proxy.PER_CLIENT) -> serving.Handler:
    """``embeddings_url`` (with ``identify_address``): serve ``POST /v1/embeddings`` for the
    runtime's embeddings provider route, admitted per Agent before it is forwarded there.
    ``per_client``: pass-through requests one source address may have in flight, of the
    ``upstream`` session's connection limit."""
    routes = _routes(api)
    base = proxy.upstream_base(upstream_url)
    embeddings_target = URL(embeddings_url, encoded=True) if embeddings_url else None
    in_flight = proxy.InFlight(upstream.connector.limit if upstream.connector else 0,
                               per_client)

    async def embeddings(request: web.BaseRequest, target: URL) -> web.StreamResponse:
        code: Code = Reason.OK
        try:
            if request.method != "POST" or identify_address is None:
                raise ApiError(ApiReason.METHOD_NOT_ALLOWED)
            agent = await identify_address(request.remote or "")
            charged = await api.admit_embedding(agent)
        except ApiError as refused:
            code = refused.code
        except Exception as exc:  # a bug: a bare code out, the exception type in the log
            log.error("memory-api unexpected=%s", type(exc).__name__)
            code = Reason.INTERNAL_ERROR
        log.info("memory-api action=embeddings reason=%s request=%s", code.value,
                 secrets.token_hex(8))
        if code is not Reason.OK:
            EMBEDDINGS.labels(outcome=code.value).inc()
            return _answer(Reply(status_of(code), {"error": code.value}))
        EMBEDDINGS.labels(outcome="charged" if charged else "unattributed").inc()
        return await proxy.forward(request, upstream, target, in_flight, body_timeout)

    async def governed(request: web.BaseRequest, path: str) -> web.StreamResponse:
        action, run = routes.get(path, ("refused", None))
        code: Code = Reason.OK
        try:
            if run is None:
                raise ApiError(ApiReason.ERASURE_NOT_HERE
                               if path.rstrip("/") == PREFIX
                               and request.method in ("GET", "DELETE")
                               else ApiReason.PATH_REFUSED)
            if request.method != "POST":
                raise ApiError(ApiReason.METHOD_NOT_ALLOWED)
            agent = await identify(_bearer(request.headers.get("Authorization")))
            caller = Request(agent, request.headers.get("X-Agent-Name"),
                             request.headers.get("X-User-Id"))
            reply = await run(caller, await _body(request, body_timeout))
        except ApiError as refused:
            code = refused.code
            reply = Reply(status_of(code), {"error": code.value})
        except Exception as exc:  # a bug: a bare code out, the exception type in the log
            log.error("memory-api unexpected=%s", type(exc).__name__)
            code = Reason.INTERNAL_ERROR
            reply = Reply(500, {"error": code.value})
        REQUESTS.labels(action=action, reason=code.value).inc()
        log.info("memory-api action=%s reason=%s status=%d request=%s", action, code.value,
                 reply.status, secrets.token_hex(8))
        return _answer(reply)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        try:
            target = request_target(request.method, request.raw_path)
        except ApiError as refused:
            return _refused_target(refused.code)
        if request.method == "GET" and target.path in ("/healthz", "/readyz"):
            return await _probe(target.path == "/readyz", in_flight, store_ready)
        if embeddings_target is not None and target.path == EMBEDDINGS_PATH:
            return await embeddings(request, embeddings_target)
        if governed_path(target.path):
            return await governed(request, target.path)
        return await proxy.forward(request, upstream, proxy.joined(base, target), in_flight,
                                   body_timeout)

    return handle
