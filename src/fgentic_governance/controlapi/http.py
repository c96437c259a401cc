"""The HTTP face of the control API: the shared content-free server, fixed routes, one guard.

The server (``fgentic_governance.serving.http``) answers a request aiohttp cannot parse with the
status and a fixed code, reduces aiohttp's log records to an exception type
(``serving.ContentFreeFilter``), and bounds header, body and keep-alive times. Bodies are read
within ``MAX_BODY_BYTES`` and parsed strictly (duplicate names refused, ``wire.parse``).

Every command is a POST of a JSON body to a fixed path - nothing user-supplied is ever in a
URL, so no access log, proxy log or trace can capture an entry id or a token from a path.
aiohttp's access log is off; the guard writes one line per request with the action, the
bounded reason code, drift subcodes, the receipt id and a random request id - never the body,
a header, the subject or the scope.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeVar

from aiohttp import web
from prometheus_client import Counter

from fgentic_governance.controlapi.auth import BearerTokenFile
from fgentic_governance.controlapi.codes import ControlError, ControlReason
from fgentic_governance.controlapi.service import ControlService, Reply
from fgentic_governance.controlapi.wire import (
    MAX_BODY_BYTES,
    Command,
    ConfirmableCommand,
    ForgetCommand,
    InspectCommand,
    LeaseCloseCommand,
    LeaseCommand,
    parse,
)
from fgentic_governance.reasons import Reason
from fgentic_governance.serving import http as serving
from fgentic_governance.serving import strict_json

log = logging.getLogger("fgentic_governance.controlapi")
C = TypeVar("C", bound=Command | LeaseCloseCommand)
Handler = serving.Handler

PREFIX: Final = "/v1/memory/"
REQUESTS: Final = Counter(
    "fgentic_memory_control_requests",
    "Memory control API requests by action and outcome reason code.",
    ["action", "reason"],
)
_STATUS: Final = MappingProxyType({
    ControlReason.UNAUTHENTICATED: 401,
    ControlReason.REQUEST_MALFORMED: 400,
    ControlReason.PAGE_OUT_OF_RANGE: 400,
    Reason.INVALID_SPEC: 400,
    ControlReason.NOT_FOUND: 404,
    ControlReason.METHOD_NOT_ALLOWED: 405,
    ControlReason.CONFIRMATION_INVALID: 409,
    ControlReason.CONFIRMATION_EXPIRED: 409,
    ControlReason.REQUEST_TOO_LARGE: 413,
    Reason.RATE_LIMITED: 429,
    Reason.LEASE_LIMIT_REACHED: 429,
    Reason.INTERNAL_ERROR: 500,
    Reason.ERASURE_VERIFY_FAILED: 500,
    ControlReason.DIRECTORY_UNAVAILABLE: 503,
    Reason.STORE_UNAVAILABLE: 503,
    Reason.STORE_RESTARTING: 503,
    Reason.STORE_LOCK_TIMEOUT: 503,
    Reason.STORE_SCHEMA_MISMATCH: 503,
})
"""Everything else (scope, subject, room-state and fence refusals) is 403."""
_HEADERS: Final = MappingProxyType({"Cache-Control": "no-store"})


@dataclass(frozen=True)
class _Route:
    action: str
    run: Callable[[bytes], Awaitable[Reply]]


def _route(action: str, model: type[C], method: Callable[[C], Awaitable[Reply]]) -> _Route:
    async def run(body: bytes) -> Reply:
        return await method(parse(model, body))

    return _Route(action, run)


async def _body(request: web.BaseRequest, timeout: float) -> bytes:
    """The body, or REQUEST_TOO_LARGE / REQUEST_MALFORMED (too slow, or cut short)."""
    try:
        return await serving.read_body(request, MAX_BODY_BYTES, timeout)
    except strict_json.Refused as refused:
        too_large = refused.code is strict_json.Refusal.BODY_TOO_LARGE
    raise ControlError(ControlReason.REQUEST_TOO_LARGE if too_large
                       else ControlReason.REQUEST_MALFORMED)


def _refusal(error: ControlError) -> Reply:
    body: dict[str, Any] = {"reason": error.code.value}
    if error.drift:
        body["drift"] = [d.value for d in error.drift]
    return Reply(_STATUS.get(error.code, 403), body)


def make_handler(service: ControlService, auth: BearerTokenFile, *,
                 body_timeout: float = serving.BODY_TIMEOUT,
                 store_ready: Callable[[], Awaitable[Reason]] | None = None) -> Handler:
    """The request handler. ``/readyz`` is 503 while the bridge's token is unreadable
    (UNAUTHENTICATED) or the store pool cannot serve a query (STORE_UNAVAILABLE, or
    STORE_RESTARTING while PostgreSQL recovers from a crash); ``/healthz``
    answers as long as the process serves."""
    routes = {PREFIX + r.action: r for r in (
        _route("status", Command, service.status),
        _route("inspect", InspectCommand, service.inspect),
        _route("forget", ForgetCommand, service.forget),
        _route("forget-all", ConfirmableCommand, service.forget_all),
        _route("off", ConfirmableCommand, service.off),
        _route("lease/open", LeaseCommand, service.open_lease),
        _route("lease/close", LeaseCloseCommand, service.close_lease),
    )}

    async def readiness() -> ControlReason | Reason:
        if not auth.ready():
            return ControlReason.UNAUTHENTICATED
        return Reason.OK if store_ready is None else await store_ready()

    async def probe(request: web.BaseRequest) -> web.StreamResponse:
        reason = Reason.OK if request.path == "/healthz" else await readiness()
        return web.json_response({"reason": reason.value},
                                 status=200 if reason is Reason.OK else 503, headers=_HEADERS)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "GET" and request.path in ("/healthz", "/readyz"):
            return await probe(request)
        route = routes.get(request.path)
        action = route.action if route else "unknown"  # Never the path itself.
        drift = ""
        try:
            if not auth.admits(request.headers.get("Authorization")):
                raise ControlError(ControlReason.UNAUTHENTICATED)
            if route is None:
                raise ControlError(ControlReason.NOT_FOUND)
            if request.method != "POST":
                raise ControlError(ControlReason.METHOD_NOT_ALLOWED)
            reply = await route.run(await _body(request, body_timeout))
        except ControlError as refused:
            reply, drift = _refusal(refused), ",".join(d.value for d in refused.drift)
        except Exception as exc:  # A bug: answer a bare code, log only the exception type.
            log.error("control unexpected=%s", type(exc).__name__)
            reply = _refusal(ControlError(Reason.INTERNAL_ERROR))
        reason = str(reply.body["reason"])
        REQUESTS.labels(action=action, reason=reason).inc()
        log.info("control action=%s reason=%s drift=%s receipt=%s status=%d request=%s",
                 action, reason, drift or "-", reply.receipt_id or "-", reply.status,
                 secrets.token_hex(8))
        return web.json_response(reply.body, status=reply.status, headers=_HEADERS)

    return handle
