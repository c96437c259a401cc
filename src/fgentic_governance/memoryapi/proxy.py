"""Pass-through of everything that is not ours to the real kagent controller (aiohttp shell).

Sessions, events and tasks go upstream unchanged: method, the origin-form path joined to the
controller's URL and the query as received, every end-to-end header (hop-by-hop ones and Host
excluded, as HTTP requires), the body streamed in both directions, the upstream status and
headers returned, compressed bodies left as they are. Nothing of them is logged; the metric
has the status class only.

Bounded like our own routes: the client's body is read whole, within the body timeout, the
pass-through body bound and the bytes held at once (in all and per source address), before an
upstream connection is taken, so an upstream connection never waits on a client's body. Each
route (the controller, the embeddings provider, the model) has its own ``CONNECTIONS``
upstream connections (:class:`Upstreams`): no route's traffic waits behind another's. One source
address holds at most ``PER_CLIENT`` of a route's connections, and readiness reports a full
pass-through pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import Counter
from yarl import URL

from fgentic_governance.memoryapi.codes import ApiError, ApiReason, Code, status_of
from fgentic_governance.memoryapi.wire import Target
from fgentic_governance.serving import http as serving
from fgentic_governance.serving import strict_json

HOP_BY_HOP: Final = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade", "host"})
CHUNK: Final = 64 * 1024
CONNECTIONS: Final = 100
"""Upstream connections at once (aiohttp's default bound, now explicit)."""
PER_CLIENT: Final = 16
"""Pass-through requests one source address may have in flight: well under ``CONNECTIONS``,
so no single caller can hold the pool every Agent's sessions, tasks and embeddings need."""
BODY_BYTES: Final = 4 * 1024 * 1024
"""Largest pass-through body read: a session event or task is part of the history an Agent's
model turn carries, which is read up to the same bound (``model_requests.MODEL_BODY_BYTES``)."""
BODIES_HELD: Final = 32 * 1024 * 1024
"""Pass-through body bytes held at once, within the memory API's memory limit (the body is
copied once as it is returned)."""
SOURCE_BODIES_HELD: Final = BODIES_HELD // 4
"""Of ``BODIES_HELD``, what one source address may hold at once: two whole bodies."""
WRITE_SECONDS = 30.0
"""How long one chunk of the answer may wait for the client to read it: a client that stops
reading would otherwise hold its upstream connection (and its share) for ever."""
PASSED: Final = Counter("fgentic_memory_api_passthrough",
                        "Requests passed through to the kagent controller, by status class.",
                        ["status"])


def session(*, connect_seconds: float = 5.0, read_seconds: float = 300.0,
            connections: int = CONNECTIONS) -> aiohttp.ClientSession:
    """The upstream client: bounded connect (pool wait included) and per-read waits, at most
    ``connections`` at once, no decompression, no redirects followed (the runtime sees them
    itself), no cookies kept."""
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_seconds,
                                    sock_read=read_seconds)
    return aiohttp.ClientSession(timeout=timeout, auto_decompress=False,
                                 connector=aiohttp.TCPConnector(limit=connections),
                                 cookie_jar=aiohttp.DummyCookieJar())


def upstream_base(url: str) -> URL:
    """The controller's URL that every forwarded path is joined to: http(s), a host, no
    userinfo, query or fragment (ValueError otherwise, at start-up)."""
    base = URL(url)
    if base.scheme not in ("http", "https") or not base.host or base.user is not None \
            or base.password is not None or base.query_string or base.fragment:
        raise ValueError("the upstream must be an http(s) URL with a host and nothing else")
    return base


def joined(base: URL, target: Target) -> URL:
    """``target``'s path under ``base``'s (joined, never concatenated into a new URL: the
    scheme and authority are always the controller's), its query as received."""
    return URL.build(scheme=base.scheme, authority=base.raw_authority,
                     path=base.raw_path.rstrip("/") + target.path,
                     query_string=target.query, encoded=True)


class InFlight:
    """Pass-through requests in flight, in total and per source address. One event loop thread
    runs every request, so no lock is needed."""

    def __init__(self, pool: int, per_client: int = PER_CLIENT) -> None:
        if not 1 <= per_client < pool:
            raise ValueError("the per-client share must be at least 1 and below the pool")
        self.pool, self.per_client = pool, per_client
        self.total = 0
        self._by_client: dict[str, int] = {}

    @property
    def exhausted(self) -> bool:
        """Every upstream connection is held: the next request would wait for one."""
        return self.total >= self.pool

    @contextlib.contextmanager
    def hold(self, client: str) -> Iterator[None]:
        """One request of ``client`` while in the block; CLIENT_BUSY beyond its share."""
        held = self._by_client.get(client, 0)
        if held >= self.per_client:
            raise ApiError(ApiReason.CLIENT_BUSY)
        self._by_client[client] = held + 1
        self.total += 1
        try:
            yield
        finally:
            self.total -= 1
            left = self._by_client[client] - 1
            if left:
                self._by_client[client] = left
            else:
                del self._by_client[client]


class Upstream:
    """One route's upstream: its own connections (at most ``connections``) and the in-flight
    shares of them per source address."""

    def __init__(self, connections: int = CONNECTIONS, per_client: int = PER_CLIENT) -> None:
        self.in_flight = InFlight(connections, per_client)  # refused before a session exists
        self.session = session(connections=connections)


class Upstreams:
    """The upstream of each route, apart: kagent's controller (pass-through), the embeddings
    provider and the model. A route waits only for its own connections: pass-through traffic,
    however slow, never holds what an Agent's embeddings or model turns need."""

    def __init__(self, connections: int = CONNECTIONS, per_client: int = PER_CLIENT) -> None:
        self.passthrough = Upstream(connections, per_client)
        self.embeddings = Upstream(connections, per_client)
        self.model = Upstream(connections, per_client)

    async def close(self) -> None:
        for route in (self.passthrough, self.embeddings, self.model):
            await route.session.close()


def body_budget() -> serving.BodyBudget:
    """The pass-through bodies' budget (``BODIES_HELD``, ``SOURCE_BODIES_HELD`` per source)."""
    return serving.BodyBudget(BODIES_HELD, SOURCE_BODIES_HELD)


async def read_body(request: web.BaseRequest, holding: serving.Holding,
                    seconds: float) -> bytes | None:
    """A pass-through request's whole body (None without one) within ``seconds``,
    ``BODY_BYTES`` and ``holding``'s budget, read before any upstream connection is taken;
    compressed bodies are read as they are. REQUEST_TOO_LARGE over the bound, CLIENT_BUSY over
    the budget, REQUEST_MALFORMED when not received in time (as on our own routes)."""
    if not request.body_exists:
        return None
    try:
        return await serving.read_body(request, BODY_BYTES, seconds, holding)
    except strict_json.Refused as refused:
        code = refused.code
    raise ApiError(ApiReason.REQUEST_TOO_LARGE if code is strict_json.Refusal.BODY_TOO_LARGE
                   else ApiReason.CLIENT_BUSY if code is strict_json.Refusal.BUSY
                   else ApiReason.REQUEST_MALFORMED)


def refusal(code: Code) -> web.Response:
    return web.json_response({"error": code.value}, status=status_of(code),
                             headers={"Cache-Control": "no-store"})


async def forward(request: web.BaseRequest, upstream: Upstream, url: URL, body: bytes | None,
                  *, failures_replaced: bool = False) -> web.StreamResponse:
    """Relay ``request``, its ``body`` already read (None: it has none), to exactly ``url``,
    within its client's share of ``upstream``; 502 when the upstream cannot be reached. With
    ``failures_replaced``, an upstream answer that is not 2xx is not relayed either: its body
    may quote the request (an embeddings provider's error echoing the text), and the runtime
    logs error bodies at ERROR, so the caller gets 502 UPSTREAM_UNAVAILABLE instead."""
    try:
        with upstream.in_flight.hold(request.remote or ""):
            return await _relay(request, upstream.session, url, body, failures_replaced)
    except ApiError as refused:
        PASSED.labels(status="refused").inc()
        return refusal(refused.code)


async def _relay(request: web.BaseRequest, upstream: aiohttp.ClientSession, url: URL,
                 body: bytes | None, failures_replaced: bool) -> web.StreamResponse:
    try:
        answer = await upstream.request(request.method, url, headers=_end_to_end(request.headers),
                                        data=body, allow_redirects=False)
    except (aiohttp.ClientError, TimeoutError):
        PASSED.labels(status="unreachable").inc()
        return refusal(ApiReason.UPSTREAM_UNAVAILABLE)
    async with answer:
        if failures_replaced and not 200 <= answer.status < 300:
            PASSED.labels(status="replaced").inc()
            return refusal(ApiReason.UPSTREAM_UNAVAILABLE)
        response = web.StreamResponse(status=answer.status, reason=answer.reason,
                                      headers=_end_to_end(answer.headers))
        await response.prepare(request)
        try:
            async for chunk in answer.content.iter_chunked(CHUNK):
                async with asyncio.timeout(WRITE_SECONDS):
                    await response.write(chunk)
            await response.write_eof()
        except TimeoutError:  # the client stopped reading: give the connection back
            PASSED.labels(status="stalled").inc()
            if request.transport is not None:
                request.transport.abort()
            return response
    PASSED.labels(status=f"{answer.status // 100}xx").inc()
    return response


def _end_to_end(headers: CIMultiDict[str] | aiohttp.typedefs.LooseHeaders) -> CIMultiDict[str]:
    kept: CIMultiDict[str] = CIMultiDict()
    for name, value in CIMultiDict(headers).items():
        if name.lower() not in HOP_BY_HOP:
            kept.add(name, value)
    return kept
