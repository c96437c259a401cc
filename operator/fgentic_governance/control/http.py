"""The HTTP face of the control API: aiohttp's low-level server, fixed routes, one guard.

Why the low-level server and not ``web.Application``: aiohttp answers a request it cannot
parse (a bad request line, header or Content-Length) itself, and quotes the offending bytes in
that 400 body and in its error log. :class:`ContentFreeServer` answers those with the status
alone, and :class:`ContentFreeFilter` reduces aiohttp's log records to an exception type.

Every command is a POST of a JSON body to a fixed path - nothing user-supplied is ever in a
URL, so no access log, proxy log or trace can capture an entry id or a token from a path.
aiohttp's access log is off; the guard writes one line per request with the action, the
bounded reason code, drift subcodes, the receipt id and a random request id - never the body,
a header, the subject or the scope.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeVar

from aiohttp import web
from prometheus_client import Counter

from fgentic_governance.control.auth import BearerTokenFile
from fgentic_governance.control.codes import ControlError, ControlReason
from fgentic_governance.control.service import ControlService, Reply
from fgentic_governance.control.wire import (
    MAX_BODY_BYTES,
    Command,
    ConfirmableCommand,
    ForgetCommand,
    InspectCommand,
    parse,
)
from fgentic_governance.reasons import Reason

log = logging.getLogger("fgentic_governance.control")
C = TypeVar("C", bound=Command)
Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

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
    Reason.INTERNAL_ERROR: 500,
    Reason.ERASURE_VERIFY_FAILED: 500,
    ControlReason.DIRECTORY_UNAVAILABLE: 503,
    Reason.STORE_UNAVAILABLE: 503,
    Reason.STORE_SCHEMA_MISMATCH: 503,
})
"""Everything else (scope, subject, room-state and fence refusals) is 403."""
_HEADERS: Final = MappingProxyType({"Cache-Control": "no-store"})
_LIBRARY_LOGGERS: Final = ("aiohttp.server", "aiohttp.web", "aiohttp.access",
                           "aiohttp.internal", "asyncio")


class ContentFreeFilter(logging.Filter):
    """Reduce a library's log record to its logger name and exception type."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        record.msg = "%s: record suppressed (%s)"
        record.args = (record.name, type(exc).__name__ if exc else "-")
        record.exc_info = record.exc_text = record.stack_info = None
        return True


def scrub_library_logs() -> Callable[[], None]:
    """Filter aiohttp's and asyncio's loggers; returns the undo (for tests)."""
    installed = []
    for name in _LIBRARY_LOGGERS:
        logger, content_free = logging.getLogger(name), ContentFreeFilter()
        logger.addFilter(content_free)
        installed.append((logger, content_free))

    def undo() -> None:
        for logger, content_free in installed:
            logger.removeFilter(content_free)

    return undo


class _Protocol(web.RequestHandler):
    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        # ``message`` is the parser's text, which quotes the offending bytes: drop it.
        return super().handle_error(request, status, exc, None)


class ContentFreeServer(web.Server):
    """aiohttp's low-level server whose own error answers carry no request bytes."""

    def __init__(self, handler: Handler, **kwargs: Any) -> None:
        # No access log (the guard logs instead), no transparent decompression (a command is
        # small plain JSON), and aiohttp's protocol logger is the filtered aiohttp.server.
        self._protocol_kwargs = {"access_log": None, "auto_decompress": False, **kwargs}
        super().__init__(handler, **self._protocol_kwargs)

    def __call__(self) -> web.RequestHandler:
        return _Protocol(self, loop=asyncio.get_running_loop(), **self._protocol_kwargs)


async def serve(handler: Handler, host: str, port: int) -> web.ServerRunner:
    runner = web.ServerRunner(ContentFreeServer(handler))
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


@dataclass(frozen=True)
class _Route:
    action: str
    run: Callable[[bytes], Awaitable[Reply]]


def _route(action: str, model: type[C], method: Callable[[C], Awaitable[Reply]]) -> _Route:
    async def run(body: bytes) -> Reply:
        return await method(parse(model, body))

    return _Route(action, run)


async def _body(request: web.BaseRequest) -> bytes:
    if (request.content_length or 0) > MAX_BODY_BYTES:
        raise ControlError(ControlReason.REQUEST_TOO_LARGE)
    body = bytearray()
    while chunk := await request.content.read(16384):
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise ControlError(ControlReason.REQUEST_TOO_LARGE)
    return bytes(body)


def _refusal(error: ControlError) -> Reply:
    body: dict[str, Any] = {"reason": error.code.value}
    if error.drift:
        body["drift"] = [d.value for d in error.drift]
    return Reply(_STATUS.get(error.code, 403), body)


def make_handler(service: ControlService, auth: BearerTokenFile) -> Handler:
    routes = {PREFIX + r.action: r for r in (
        _route("status", Command, service.status),
        _route("inspect", InspectCommand, service.inspect),
        _route("forget", ForgetCommand, service.forget),
        _route("forget-all", ConfirmableCommand, service.forget_all),
        _route("off", ConfirmableCommand, service.off),
    )}

    async def probe(request: web.BaseRequest) -> web.StreamResponse:
        ready = request.path == "/healthz" or auth.ready()
        return web.json_response(
            {"reason": (Reason.OK if ready else ControlReason.UNAUTHENTICATED).value},
            status=200 if ready else 503, headers=_HEADERS)

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
            reply = await route.run(await _body(request))
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
