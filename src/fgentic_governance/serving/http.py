"""The HTTP/1.1 server every process of ours runs: aiohttp's low-level server, made content-free
and bounded in time and size. The control API, the projector and the admission webhook use it.

- **Content-free.** aiohttp answers a request it cannot parse (bad request line, header or
  Content-Length) itself and quotes the offending bytes in that answer and its log record.
  Here such an answer carries only the status and a fixed code, and :class:`ContentFreeFilter`
  reduces aiohttp's and asyncio's log records to the logger name and exception type. There is
  no access log; callers log a bounded route label, method label and status themselves.
- **Bounded in time.** A connection must deliver a complete request head within
  ``Bounds.header_timeout`` of being accepted, and a kept-alive one within
  ``Bounds.keepalive_timeout`` of its previous response (idle time included); otherwise it is
  closed without an answer. aiohttp has a keep-alive timer (an hour by default) but no
  header-read deadline. A body is read by :func:`read_body` within ``BODY_TIMEOUT``; an
  unread body is drained for at most ``Bounds.linger`` before the connection is closed.
- **Bounded in size.** :func:`read_body` refuses more than its ``max_bytes`` (Content-Length
  first, then as it reads); header lines are bounded by ``Bounds.max_field_bytes``. A
  :class:`BodyBudget` bounds the bytes of bodies held at once, in all and per source address,
  reserved as they arrive.
- **Strict JSON** lives in ``strict_json`` (pure): the same :class:`Refused` as the body
  readers here.

Refusals are :class:`Refused` with a :class:`Refusal` code: never the input, never a chained
parser exception. This module must stay a small shell library: no Kopf, no Kubernetes client,
no store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from fgentic_governance.serving.strict_json import (
    Refusal,
    refuse,
)

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

HEADER_TIMEOUT: Final = 10.0
"""Seconds from accept to a complete request head (a client sends its head in one write)."""
KEEPALIVE_TIMEOUT: Final = 15.0
"""Seconds from a response to the next complete request head on a kept-alive connection."""
BODY_TIMEOUT: Final = 10.0
"""Seconds to read a whole body once its head is parsed (bodies here are at most a few MiB)."""
LINGER: Final = 1.0
"""Seconds an unread body is drained after the answer, so the client can read that answer."""
MAX_FIELD_BYTES: Final = 8190
"""aiohttp's default bound of a request line and of one header line."""

_ERROR_TEXT: Final = "HTTP_REQUEST_REJECTED\n"
# "mcp": the retrieval server's SDK logs a crashed request with its exception, whose
# text may quote the request.
_LIBRARY_LOGGERS: Final = ("aiohttp.server", "aiohttp.web", "aiohttp.access",
                           "aiohttp.internal", "asyncio", "mcp")
_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass(frozen=True)
class Bounds:
    """Per-server time and size bounds (see the module docstring)."""

    header_timeout: float = HEADER_TIMEOUT
    keepalive_timeout: float = KEEPALIVE_TIMEOUT
    linger: float = LINGER
    max_field_bytes: int = MAX_FIELD_BYTES


DEFAULT_BOUNDS: Final = Bounds()


# -- logs --------------------------------------------------------------------------------------


class ContentFreeFilter(logging.Filter):
    """Reduce a library's log record to its logger name and exception type; with
    ``prefixes``, only the records of those loggers and their children."""

    def __init__(self, prefixes: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        if self.prefixes and not any(record.name == p or record.name.startswith(p + ".")
                                     for p in self.prefixes):
            return True
        if getattr(record, "fgentic_scrubbed", False):  # another handler's filter did it
            return True
        record.fgentic_scrubbed = True
        exc = record.exc_info[1] if record.exc_info else None
        record.msg = "%s: details withheld (%s)"
        record.args = (record.name, type(exc).__name__ if exc else "-")
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


def scrub_library_logs() -> Callable[[], None]:
    """Filter the libraries' loggers (once); returns the undo (for tests).

    A logger's filter sees only the records that logger creates, not its children's (the
    `mcp` SDK logs as ``mcp.shared.jsonrpc_dispatcher`` and the like), so every handler of
    the root logger also gets a filter for those names and everything below them."""
    installed: list[tuple[logging.Filterer, ContentFreeFilter]] = []
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ContentFreeFilter) for f in logger.filters):
            installed.append((logger, ContentFreeFilter()))
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, ContentFreeFilter) for f in handler.filters):
            installed.append((handler, ContentFreeFilter(_LIBRARY_LOGGERS)))
    for target, content_free in installed:
        target.addFilter(content_free)

    def undo() -> None:
        for target, content_free in installed:
            target.removeFilter(content_free)

    return undo


def method_label(method: str) -> str:
    """The request method for a log line or label: a standard one, else ``OTHER``."""
    return method if method in _METHODS else "OTHER"


# -- the server --------------------------------------------------------------------------------


class _Protocol(web.RequestHandler):
    """aiohttp's connection handler with content-free error answers and a head deadline."""

    def __init__(self, manager: web.Server, *, bounds: Bounds, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._bounds = bounds
        self._deadline: asyncio.TimerHandle | None = None
        self._heads_at_arming = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm(self._bounds.header_timeout)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._deadline is not None and self._request_count != self._heads_at_arming:
            self._disarm()  # A complete head was parsed: the body has its own deadline.

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        answered = await super().finish_response(request, resp, start_time)
        self._arm(self._bounds.keepalive_timeout)
        return answered

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._heads_at_arming = self._request_count
        self._deadline = self._loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        waiting = not self._request_in_progress and not self._messages
        if waiting and self._request_count == self._heads_at_arming:
            self.force_close()

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        # ``message`` is the parser's text, which quotes the offending bytes: never used. The
        # record keeps the exception for ContentFreeFilter to reduce to its type.
        level = logging.ERROR if status >= 500 else logging.INFO
        self.logger.log(level, "request rejected with status %d", status, exc_info=exc)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started")
        answer = web.Response(status=status, text=_ERROR_TEXT)
        answer.force_close()
        return answer


class ContentFreeServer(web.Server):
    """aiohttp's low-level server with :class:`_Protocol` connections."""

    def __init__(self, handler: Handler, bounds: Bounds = DEFAULT_BOUNDS) -> None:
        # No access log (callers log bounded labels), no transparent decompression (a body is
        # bounded as sent), aiohttp's own keep-alive timer as a backstop to ours.
        self._protocol_kwargs: dict[str, Any] = {
            "access_log": None, "auto_decompress": False,
            "keepalive_timeout": bounds.keepalive_timeout, "lingering_time": bounds.linger,
            "max_field_size": bounds.max_field_bytes, "max_line_size": bounds.max_field_bytes,
        }
        super().__init__(handler, **self._protocol_kwargs)
        self.bounds = bounds

    def __call__(self) -> web.RequestHandler:
        return _Protocol(self, loop=asyncio.get_running_loop(), bounds=self.bounds,
                         **self._protocol_kwargs)


def runner(handler: Handler, bounds: Bounds = DEFAULT_BOUNDS) -> web.ServerRunner:
    """A runner for ``handler``; add a site (``web.TCPSite`` or :class:`TLSSite`) to serve."""
    return web.ServerRunner(ContentFreeServer(handler, bounds), handle_signals=False,
                            shutdown_timeout=bounds.keepalive_timeout)


async def serve(handler: Handler, host: str, port: int,
                bounds: Bounds = DEFAULT_BOUNDS) -> web.ServerRunner:
    """``handler`` listening on plain HTTP; ``cleanup()`` the result to stop."""
    served = runner(handler, bounds)
    await served.setup()
    await web.TCPSite(served, host, port).start()
    return served


class TLSSite(web.BaseSite):
    """A TLS listener whose handshake is bounded too (TCPSite leaves asyncio's 60 s)."""

    def __init__(self, served: web.ServerRunner, host: str, port: int,
                 context: ssl.SSLContext, handshake_timeout: float = HEADER_TIMEOUT) -> None:
        super().__init__(served, ssl_context=context)
        self._host, self._port, self._handshake = host, port, handshake_timeout

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            reuse_address=True, ssl_handshake_timeout=self._handshake)


def health_handler(ready: Callable[[], bool] | None = None) -> Handler:
    """The plain-HTTP side port: ``GET /healthz``, ``GET /metrics`` (the default Prometheus
    registry) and, given ``ready``, ``GET /readyz`` (503 ``syncing`` while it is False).
    Another method on those paths is 405; any other path 404.

    Replaces ``prometheus_client.start_http_server``, whose server has no time bounds.
    """
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    paths = {"/healthz", "/metrics"} | ({"/readyz"} if ready is not None else set())

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.path not in paths:
            return web.Response(status=404, text="NOT_FOUND\n")
        if request.method != "GET":
            return web.Response(status=405, text="METHOD_NOT_ALLOWED\n")
        if request.path == "/metrics":
            return web.Response(body=generate_latest(),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})
        if request.path == "/readyz" and ready is not None and not ready():
            return web.Response(status=503, text="syncing")
        return web.Response(text="ok")

    return handle


def stop_on_signals() -> asyncio.Event:
    """An event SIGTERM or SIGINT sets (a process's graceful stop); call on the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


# -- bodies ------------------------------------------------------------------------------------


class BodyBudget:
    """The bytes of request bodies a process holds at once, over all connections and per
    source address.

    Bytes are reserved as they arrive, never as declared: a Content-Length reserved up front
    let seven connections that declared 1 MiB and sent one byte each refuse every other
    request for the body timeout. One source address holds at most ``per_source`` bytes, so a
    single client cannot take the whole budget from the others. A body that would exceed
    either bound is refused (BUSY, 503), not queued: a client's retry is cheaper than an
    out-of-memory kill. The event loop is one thread, so no lock is needed.
    """

    def __init__(self, limit: int, per_source: int | None = None) -> None:
        self.limit = limit
        self.per_source = limit if per_source is None else per_source
        self.held = 0
        self.by_source: dict[str, int] = {}
        """Bytes held per source address; a source holding nothing has no entry."""

    @contextlib.contextmanager
    def hold(self, request: web.BaseRequest) -> Iterator[Holding]:
        """A share of the budget for one body, empty at first, released after the block."""
        holding = Holding(self, request.remote or "")
        try:
            yield holding
        finally:
            holding.release()


class Holding:
    """One body's share of a :class:`BodyBudget`: it grows as the body's bytes arrive."""

    def __init__(self, budget: BodyBudget, source: str) -> None:
        self._budget, self._source = budget, source
        self.bytes = 0

    def take(self, size: int) -> bool:
        """Reserve ``size`` more bytes; False, reserving nothing, when a bound would be passed."""
        budget = self._budget
        source_held = budget.by_source.get(self._source, 0)
        if budget.held + size > budget.limit or source_held + size > budget.per_source:
            return False
        budget.held += size
        budget.by_source[self._source] = source_held + size
        self.bytes += size
        return True

    def release(self) -> None:
        budget = self._budget
        budget.held -= self.bytes
        left = budget.by_source.get(self._source, 0) - self.bytes
        if left > 0:
            budget.by_source[self._source] = left
        else:
            budget.by_source.pop(self._source, None)
        self.bytes = 0


async def read_body(request: web.BaseRequest, max_bytes: int,
                    timeout: float = BODY_TIMEOUT, holding: Holding | None = None) -> bytes:
    """The whole body within ``timeout`` seconds and ``max_bytes``, else :class:`Refused`;
    with ``holding``, each chunk is reserved in its budget as it arrives (else BUSY)."""
    if (request.content_length or 0) > max_bytes:
        refuse(Refusal.BODY_TOO_LARGE)
    body = bytearray()
    failure: Refusal | None = None
    try:
        async with asyncio.timeout(timeout):
            while chunk := await request.content.read(65536):
                if holding is not None and not holding.take(len(chunk)):
                    failure = Refusal.BUSY
                    break
                body += chunk
                if len(body) > max_bytes:
                    failure = Refusal.BODY_TOO_LARGE
                    break
    except TimeoutError:
        failure = Refusal.BODY_TIMEOUT
    except (ConnectionError, RequestPayloadError):
        failure = Refusal.BODY_INCOMPLETE
    if failure is not None:
        refuse(failure)  # Outside the handler: no library exception is chained.
    return bytes(body)
