"""The HTTP face of the memory API: three routes of ours, two refused, the rest passed on.

Served by the shared content-free server (``fgentic_governance.serving``): bounded header,
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

from fgentic_governance import serving, strict_json
from fgentic_governance.memoryapi import proxy
from fgentic_governance.memoryapi.codes import ApiError, ApiReason, Code, status_of
from fgentic_governance.memoryapi.identity import AgentRef
from fgentic_governance.memoryapi.service import MemoryApi, Reply, Request
from fgentic_governance.memoryapi.wire import (
    MAX_BODY_BYTES,
    parse_batch,
    parse_save,
    parse_search,
)
from fgentic_governance.reasons import Reason

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


def governed_path(raw_path: str) -> bool:
    """Whether a path is, or might be in another spelling, one of the controller's memory
    routes: those never pass through. Encoded characters, empty, dot and backslash segments
    are refused outright rather than normalised the way some server might."""
    path = raw_path.split("?", 1)[0]
    if "%" in path or "\\" in path or "//" in path:
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


def _answer(reply: Reply) -> web.Response:
    return web.Response(status=reply.status, body=json.dumps(reply.body).encode(),
                        content_type="application/json", headers=_HEADERS)


def make_handler(api: MemoryApi, identify: Identify, upstream: aiohttp.ClientSession,
                 upstream_url: str, *, body_timeout: float = serving.BODY_TIMEOUT,
                 store_ready: Callable[[], Awaitable[bool]] | None = None,
                 embeddings_url: str = "",
                 identify_address: Identify | None = None) -> serving.Handler:
    """``embeddings_url`` (with ``identify_address``): serve ``POST /v1/embeddings`` for the
    runtime's embeddings provider route, admitted per Agent before it is forwarded there."""
    routes = _routes(api)
    base = upstream_url.rstrip("/")

    async def embeddings(request: web.BaseRequest) -> web.StreamResponse:
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
        return await proxy.forward(request, upstream, base, target=embeddings_url)

    async def governed(request: web.BaseRequest) -> web.StreamResponse:
        action, run = routes.get(request.path, ("refused", None))
        code: Code = Reason.OK
        try:
            if run is None:
                raise ApiError(ApiReason.ERASURE_NOT_HERE
                               if request.path.rstrip("/") == PREFIX
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

    async def probe(request: web.BaseRequest) -> web.StreamResponse:
        ok = request.path == "/healthz" or store_ready is None or await store_ready()
        reason = Reason.OK if ok else Reason.STORE_UNAVAILABLE
        return web.json_response({"reason": reason.value}, status=200 if ok else 503,
                                 headers=_HEADERS)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "GET" and request.path in ("/healthz", "/readyz"):
            return await probe(request)
        if embeddings_url and request.raw_path.split("?", 1)[0] == EMBEDDINGS_PATH:
            return await embeddings(request)
        if governed_path(request.raw_path):
            return await governed(request)
        return await proxy.forward(request, upstream, base)

    return handle
