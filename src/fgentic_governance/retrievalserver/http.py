"""The HTTP face of the server: our bounded, content-free aiohttp server (``serving``) in
front of the SDK. Exactly one path, POST only; the body is read under the shared bounds, the
guard decides, and only an admitted request reaches the SDK, with only the headers it needs
(no credential, cookie or other X-Fgentic-* name is ever seen past this point).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

from aiohttp import web

from fgentic_governance.contract import IDENTITY_HEADER, AgentRef
from fgentic_governance.retrievalserver import guard, metrics
from fgentic_governance.retrievalserver.codes import (
    Code,
    RetrievalServerReason,
    http_status,
    rpc_code,
)
from fgentic_governance.retrievalserver.protocol import Answer, Protocol
from fgentic_governance.serving import http as serving
from fgentic_governance.serving import strict_json
from fgentic_governance.serving.strict_json import Refusal, Refused

log = logging.getLogger("fgentic_governance.retrievalserver")

MAX_BODY_BYTES: Final = 64 * 1024
"""A tools/call of a 512-byte query is well under 2 KiB; initialize is smaller still."""
BODIES_HELD: Final = 4 << 20
ANSWER_SECONDS: Final = 20.0
"""The SDK's whole answer: an embedding (5 s) and the prefilter statement (5 s) with room."""
BOUNDS: Final = serving.Bounds(max_field_bytes=16 * 1024)
"""A carrier may be 8,192 bytes (ADR 0017): the contract, not the transport, refuses 8,193."""
FORWARDED: Final = frozenset({b"content-type", b"accept", b"mcp-protocol-version", b"host"})
_BODY_CODES: Final = {Refusal.BODY_TOO_LARGE: RetrievalServerReason.REQUEST_TOO_LARGE,
                      Refusal.BUSY: RetrievalServerReason.BUSY}


def _refusal(code: Code, request_id: guard.RequestId = None, *,
             method: object = None) -> web.Response:
    metrics.REQUESTS.labels(metrics.method_label(method), code.value).inc()
    log.info("refused method=%s code=%s", metrics.method_label(method), code.value)
    body = {"jsonrpc": "2.0", "id": request_id,
            "error": {"code": rpc_code(code), "message": code.value}}
    return web.json_response(body, status=http_status(code))


def _clean(answer: Answer) -> bool:
    """Whether the SDK's answer may go out as it is: a 202, or a 200 JSON-RPC result in
    strict JSON (no NaN or Infinity, which a client's parser may refuse). Its errors (a
    validation error, a parse error) can quote the request, so they never do."""
    if answer.status == 202:
        return True
    if answer.status != 200:
        return False
    try:
        doc = strict_json.loads(bytes(answer.body))
    except Refused:
        return False
    return isinstance(doc, dict) and "result" in doc and "error" not in doc


def make_handler(protocol: Protocol, *, agent: AgentRef, path: str,
                 clock: Callable[[], int] = lambda: int(time.time())) -> serving.Handler:
    budget = serving.BodyBudget(BODIES_HELD, per_source=BODIES_HELD // 4)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.path != path or request.query_string:
            return _refusal(RetrievalServerReason.PATH_UNKNOWN)
        if request.method != "POST":
            return _refusal(RetrievalServerReason.HTTP_METHOD_REFUSED)
        try:
            with budget.hold(request) as holding:
                body = await serving.read_body(request, MAX_BODY_BYTES, holding=holding)
        except Refused as refused:
            return _refusal(_BODY_CODES.get(refused.code, RetrievalServerReason.REQUEST_MALFORMED))
        decision = guard.admit(
            body, carriers=request.headers.getall(IDENTITY_HEADER, []),
            versions=request.headers.getall(guard.VERSION_HEADER, []), agent=agent, now=clock())
        if isinstance(decision, guard.Refusal):
            return _refusal(decision.error.code, decision.request_id, method=decision.method)
        headers = [(k.lower(), v) for k, v in request.raw_headers if k.lower() in FORWARDED]
        return await _answer(protocol, path, headers, body, decision)

    return handle


async def _answer(protocol: Protocol, path: str, headers: list[tuple[bytes, bytes]],
                  body: bytes, decision: guard.Admitted) -> web.Response:
    """The SDK's answer to an admitted request, bounded in time; an SDK error never goes
    out as the SDK wrote it (``_clean``)."""
    try:
        async with asyncio.timeout(ANSWER_SECONDS):
            answer = await protocol.answer(path, headers, body, decision.identity)
    except TimeoutError:
        return _refusal(RetrievalServerReason.STORE_UNAVAILABLE, decision.request_id,
                        method=decision.method)
    if not _clean(answer):
        return _refusal(RetrievalServerReason.REQUEST_MALFORMED, decision.request_id,
                        method=decision.method)
    metrics.REQUESTS.labels(metrics.method_label(decision.method), metrics.OK).inc()
    kept = {k: v for k, v in answer.headers if k.lower() == "content-type"}
    return web.Response(status=answer.status, body=bytes(answer.body), headers=kept)
