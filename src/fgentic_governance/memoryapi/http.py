"""The HTTP face of the memory API: three routes of ours, two refused, the rest passed on.

Every request target is read once (``wire.request_target``: origin-form only, no fragment);
routing, the governed-path check and the forwarded URL all use that one reading.

Served by the shared content-free server (``fgentic_governance.serving.http``): bounded header,
body and keep-alive times, aiohttp's log records reduced to an exception type. One log line
per memory request - action, bounded code, status, a random request id - never a header, a
body, the subject or the Agent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from types import MappingProxyType
from typing import Final

from aiohttp import web
from prometheus_client import Counter
from yarl import URL

from fgentic_governance.api.kagent import AgentRef
from fgentic_governance.memoryapi import contexts, proxy
from fgentic_governance.memoryapi.activity import Activity, users_named
from fgentic_governance.memoryapi.codes import ApiError, ApiReason, Code, status_of
from fgentic_governance.memoryapi.model_requests import (
    EMBEDDINGS_BODY_BYTES,
    MODEL_BODY_BYTES,
    check_embedding_inputs,
    summary_input_bytes,
)
from fgentic_governance.memoryapi.service import MemoryApi, Reply, Request
from fgentic_governance.memoryapi.wire import (
    MAX_BODY_BYTES,
    Target,
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
                            "or refused (reason code).",
                            ["outcome"])
MODEL_PATH: Final = "/v1/chat/completions"
MODEL: Final = Counter("fgentic_memory_api_model",
                       "Chat completions on the governed model route by outcome: an Agent's "
                       "turn passed on, a summarisation admitted, or refused (reason code).",
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


async def _body(request: web.BaseRequest, timeout: float, limit: int = MAX_BODY_BYTES) -> bytes:
    if request.headers.get("Content-Encoding", "identity").lower() != "identity":
        raise ApiError(ApiReason.REQUEST_MALFORMED)  # what cannot be read is not passed on
    try:
        return await serving.read_body(request, limit, timeout)
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
    """Liveness is always OK; readiness is not while every pass-through connection to the
    controller is held (a pass-through request would wait for one; bodies are read before a
    connection is taken, so only the controller's answers, or clients not reading them, hold
    one) or while the store is unreachable (STORE_UNAVAILABLE) or recovering from a crash
    (STORE_RESTARTING)."""
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


def _provider_refusal(code: Code) -> web.Response:
    """A refusal on a provider route. The runtime's OpenAI client retries a 429 or 5xx twice
    unless told not to: a refused summary or embedding must not be asked again."""
    answer = _answer(Reply(status_of(code), {"error": code.value}))
    answer.headers["x-should-retry"] = "false"
    return answer


def _outcome(exc: Exception) -> Code:
    """The code of a refusal; a bug is a bare INTERNAL_ERROR, its exception type in the log."""
    if isinstance(exc, ApiError):
        return exc.code
    log.error("memory-api unexpected=%s", type(exc).__name__)
    return Reason.INTERNAL_ERROR


def _path_refusal(request: web.BaseRequest, path: str) -> ApiError:
    """A governed path that is none of our routes: listing and erasure are the control API's."""
    erasure = path.rstrip("/") == PREFIX and request.method in ("GET", "DELETE")
    return ApiError(ApiReason.ERASURE_NOT_HERE if erasure else ApiReason.PATH_REFUSED)


class _Handler:
    """The request handler of :func:`make_handler`: one method per kind of target."""

    def __init__(self, api: MemoryApi, identify: Identify, upstreams: proxy.Upstreams,
                 upstream_url: str, *, body_timeout: float,
                 store_ready: Callable[[], Awaitable[Reason]] | None, embeddings_url: str,
                 model_url: str, identify_address: Identify | None,
                 activity: Activity) -> None:
        self._api, self._identify, self._upstreams = api, identify, upstreams
        self._bodies = proxy.body_budget()
        self._activity = activity
        self._identify_address = identify_address
        self._body_timeout, self._store_ready = body_timeout, store_ready
        self._routes = _routes(api)
        self._base = proxy.upstream_base(upstream_url)
        self._embeddings = URL(embeddings_url, encoded=True) if embeddings_url else None
        self._model = URL(model_url, encoded=True) if model_url else None

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            target = request_target(request.method, request.raw_path)
        except ApiError as refused:
            return _refused_target(refused.code)
        if request.method == "GET" and target.path in ("/healthz", "/readyz"):
            return await _probe(target.path == "/readyz", self._upstreams.passthrough.in_flight,
                                self._store_ready)
        if self._embeddings is not None and target.path == EMBEDDINGS_PATH:
            return await self._embedding(request, self._embeddings)
        if self._model is not None and target.path == MODEL_PATH:
            return await self._completion(request, self._model)
        if governed_path(target.path):
            return await self._governed(request, target.path)
        return await self._forward(request, target)

    async def _forward(self, request: web.BaseRequest, target: Target) -> web.StreamResponse:
        """A pass-through request: its body read whole first (an upstream connection never
        waits on a client), what it says about its caller's turn noted, then relayed on the
        controller's own connections."""
        with self._bodies.hold(request) as holding:
            try:
                body = await proxy.read_body(request, holding, self._body_timeout)
                await self._note_turn(request, target.path, body)
            except Exception as exc:
                proxy.PASSED.labels(status="refused").inc()
                return proxy.refusal(_outcome(exc))
            return await proxy.forward(request, self._upstreams.passthrough,
                                       proxy.joined(self._base, target), body)

    async def _note_turn(self, request: web.BaseRequest, path: str,
                         body: bytes | None) -> None:
        """Whose turn a routed Pod serves (its session and task calls name the user), for
        the embeddings and summaries that follow (:mod:`activity`), and which A2A context it
        is in, for the memory calls that follow (:mod:`contexts`, sql/0021). Only an
        authenticated caller is heard: the Pod's own token (the runtime sends it on every
        call) naming the Agent of the live routed Pod at the source address. Names from
        anyone else were stored and made the Agent's embeddings SCOPE_AMBIGUOUS. A user that
        is not noted refuses nothing; a context that is not noted refuses the call (a memory
        call of that context would otherwise be bound to another one)."""
        users = users_named(request.headers, request.query)
        if self._identify_address is None or not users:
            return
        seen = contexts.sighting(request.method, path, body)
        agent = await self._routed_caller(request, strict=seen is not None)
        if agent is None:
            return
        await self._note(agent, users)
        if seen is not None:
            for user in sorted(users):
                await self._api.note_context(agent, user, seen)

    async def _routed_caller(self, request: web.BaseRequest, *, strict: bool) -> AgentRef | None:
        """The Agent whose routed Pod sent ``request`` with its own token; None for anyone
        else. With ``strict``, a lookup that failed (the Kubernetes API did not answer) is
        raised, not taken for anyone else."""
        if self._identify_address is None:
            return None
        try:
            agent = await self._identify(_bearer(request.headers.get("Authorization")))
            if await self._identify_address(request.remote or "") != agent:
                return None
        except ApiError as refused:
            if strict and refused.code is ApiReason.IDENTITY_UNAVAILABLE:
                raise
            return None
        except Exception:
            if strict:
                raise
            return None
        return agent

    async def _note(self, agent: AgentRef, users: Iterable[str]) -> None:
        """Note ``users`` here and, when due, for every replica (sql/0019). A failed shared
        note refuses nothing: this replica still knows, and the store counts it as one."""
        due = self._activity.note(agent, users)
        if due:
            with contextlib.suppress(Exception):
                await self._api.note_activity(agent, due)

    async def _embedding(self, request: web.BaseRequest, target: URL) -> web.StreamResponse:
        """An embeddings request: at most ten texts of at most 512 bytes, charged to the live
        delegation of the user whose turn the Pod serves (:mod:`activity`,
        :meth:`MemoryApi.admit_embedding`), then forwarded."""
        code: Code = Reason.OK
        raw = b""
        try:
            agent = await self._address_agent(request)
            raw = await _body(request, self._body_timeout, EMBEDDINGS_BODY_BYTES)
            check_embedding_inputs(raw)
            await self._api.admit_embedding(agent, self._activity.recent(agent))
        except Exception as exc:
            code = _outcome(exc)
        log.info("memory-api action=embeddings reason=%s request=%s", code.value,
                 secrets.token_hex(8))
        if code is not Reason.OK:
            EMBEDDINGS.labels(outcome=code.value).inc()
            return _provider_refusal(code)
        EMBEDDINGS.labels(outcome="charged").inc()
        return await proxy.forward(request, self._upstreams.embeddings, target, raw,
                                   failures_replaced=True)

    async def _completion(self, request: web.BaseRequest, target: URL) -> web.StreamResponse:
        """A chat completion of a memory-enabled Agent's Pod. kagent's summarisation is
        admitted before the model works (:meth:`MemoryApi.admit_summary`) and a failed answer
        to it is replaced; the Agent's own turns are passed on as they are (a refusal of
        memory work never blocks a chat reply)."""
        code: Code = Reason.OK
        kind, raw = "turn", b""
        try:
            agent = await self._address_agent(request)
            raw = await _body(request, self._body_timeout, MODEL_BODY_BYTES)
            size = summary_input_bytes(raw)
            if size is not None:
                kind = "summary"
                await self._api.admit_summary(agent, size, self._activity.recent(agent))
        except Exception as exc:
            code = _outcome(exc)
        log.info("memory-api action=model kind=%s reason=%s request=%s", kind, code.value,
                 secrets.token_hex(8))
        if code is not Reason.OK:
            MODEL.labels(outcome=code.value).inc()
            return _provider_refusal(code)
        MODEL.labels(outcome=kind).inc()
        return await proxy.forward(request, self._upstreams.model, target, raw,
                                   failures_replaced=kind == "summary")

    async def _address_agent(self, request: web.BaseRequest) -> AgentRef:
        """The memory-enabled Agent of the routed Pod at the request's source address: these
        requests carry the provider's key, not the Pod's token."""
        if request.method != "POST" or self._identify_address is None:
            raise ApiError(ApiReason.METHOD_NOT_ALLOWED)
        return await self._identify_address(request.remote or "")

    async def _governed(self, request: web.BaseRequest, path: str) -> web.StreamResponse:
        action, run = self._routes.get(path, ("refused", None))
        code: Code = Reason.OK
        try:
            if run is None:
                raise _path_refusal(request, path)
            reply = await self._run(request, run)
        except Exception as exc:
            code = _outcome(exc)
            reply = Reply(status_of(code), {"error": code.value})
        REQUESTS.labels(action=action, reason=code.value).inc()
        log.info("memory-api action=%s reason=%s status=%d request=%s", action, code.value,
                 reply.status, secrets.token_hex(8))
        return _answer(reply)

    async def _run(self, request: web.BaseRequest,
                   run: Callable[[Request, bytes], Awaitable[Reply]]) -> Reply:
        if request.method != "POST":
            raise ApiError(ApiReason.METHOD_NOT_ALLOWED)
        agent = await self._identify(_bearer(request.headers.get("Authorization")))
        await self._note(agent, users_named(request.headers, request.query))
        caller = Request(agent, request.headers.get("X-Agent-Name"),
                         request.headers.get("X-User-Id"))
        return await run(caller, await _body(request, self._body_timeout))


def make_handler(api: MemoryApi, identify: Identify, upstreams: proxy.Upstreams,
                 upstream_url: str, *, body_timeout: float = serving.BODY_TIMEOUT,
                 store_ready: Callable[[], Awaitable[Reason]] | None = None,
                 embeddings_url: str = "", model_url: str = "",
                 identify_address: Identify | None = None,
                 activity: Activity | None = None) -> serving.Handler:
    """``embeddings_url`` (with ``identify_address``): serve ``POST /v1/embeddings`` for the
    runtime's embeddings provider route, admitted per Agent before it is forwarded there;
    ``model_url`` (with ``identify_address``): serve ``POST /v1/chat/completions`` for the
    Agents' model route, kagent's summarisation admitted before it is forwarded there.
    ``upstreams``: each route's own connections and per-source shares (the pass-through's to
    ``upstream_url``). ``activity``: whose turns the routed Pods serve (:mod:`activity`), to
    which their embeddings and summaries are charged."""
    return _Handler(api, identify, upstreams, upstream_url, body_timeout=body_timeout,
                    store_ready=store_ready, embeddings_url=embeddings_url,
                    model_url=model_url, identify_address=identify_address,
                    activity=activity or Activity())
