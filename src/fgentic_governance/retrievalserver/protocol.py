"""The MCP protocol, spoken by the `mcp` SDK's handler kernel: one tool, stateless, JSON
answers.

The SDK's low-level server lists the one tool and dispatches its calls (``serve_one``: its
validation of each method's params, its middleware and its result serialisation). Each
admitted request gets a fresh, born-ready connection, so nothing (identity least of all)
outlives a request. It is called from our own HTTP server (``http``) with the request the
guard admitted: the body already read and bounded, and the verified identity in the request
context's ``state`` (never in a session). The SDK's Streamable HTTP transport is not used:
``Protocol`` answers as it does, minus its per-request machinery (see there).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import mcp_types as types
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.runner import serve_one
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from fgentic_governance.contract import VerifiedIdentity
from fgentic_governance.retrievalserver import metrics, tool
from fgentic_governance.retrievalserver.codes import RetrievalServerError, RetrievalServerReason
from fgentic_governance.retrievalserver.service import RetrievalService

IDENTITY_KEY: Final = "fgentic.identity"
SERVER_NAME: Final = "fgentic-knowledge-retrieval"
CONTENT_TYPE_JSON: Final = "application/json"


def _identity(ctx: Any) -> VerifiedIdentity:
    """The guard's decode for this very request (its scope's state); fail closed without it."""
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    identity = state.get(IDENTITY_KEY) if isinstance(state, dict) else None
    if type(identity) is not VerifiedIdentity:
        raise RetrievalServerError(RetrievalServerReason.REQUEST_MALFORMED)
    return identity


def _refused(error: RetrievalServerError) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=error.code.value)],
                                is_error=True)


def build_server(tool_name: str, search: RetrievalService) -> Server[Any]:
    """The SDK server of one binding: ``tool_name`` is the only thing it offers."""
    listed = types.Tool(name=tool_name, description=tool.DESCRIPTION,
                        input_schema=dict(tool.INPUT_SCHEMA),
                        output_schema=dict(tool.OUTPUT_SCHEMA))

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        _identity(ctx)
        return types.ListToolsResult(tools=[listed])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        started = time.perf_counter()
        try:
            if params.name != tool_name:
                raise RetrievalServerError(RetrievalServerReason.TOOL_UNKNOWN)
            found = await search.call(_identity(ctx), params.arguments)
        except RetrievalServerError as error:
            metrics.TOOL_CALLS.labels(metrics.outcome(error.code)).inc()
            return _refused(error)
        metrics.TOOL_CALLS.labels(metrics.OK).inc()
        metrics.TOOL_SECONDS.observe(time.perf_counter() - started)
        return types.CallToolResult(content=[types.TextContent(text=_text(found))],
                                    structured_content=found)

    return Server(SERVER_NAME, version="1", on_list_tools=list_tools, on_call_tool=call_tool)


def _text(found: dict[str, Any]) -> str:
    """The unstructured rendering clients without structured output read (MCP asks for one).
    Strict JSON: a NaN raises here rather than go out as ``NaN`` (``tool.result`` sends none)."""
    return json.dumps(found, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass
class Answer:
    status: int = 500
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)


REFUSED: Final = 400
"""What an admitted request the SDK would refuse is answered with here; ``http._clean`` turns
any such answer into REQUEST_MALFORMED, as it does the SDK's own errors (which may quote the
request), so the SDK's exact error never matters and is never built."""
_JSON: Final = [("content-type", CONTENT_TYPE_JSON)]
_TRANSPORT: Final = TransportContext(kind="streamable-http", can_send_request=False)


@dataclass(frozen=True, slots=True)
class _Exchange:
    """What the tool's handlers read as ``ctx.request``: the identity in the scope's state,
    where the SDK's transport would put the ASGI scope."""

    scope: dict[str, Any]


@dataclass(slots=True)
class _DispatchContext:
    """The SDK's ``DispatchContext`` of one exchange: no back-channel (stateless: the SDK's
    stateless transport refuses server-to-client requests too) and nowhere to notify."""

    request_id: RequestId
    message_metadata: ServerMessageMetadata
    transport: TransportContext = _TRANSPORT
    can_send_request: bool = False
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None,
                               opts: CallOptions | None = None) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None,
                     opts: CallOptions | None = None) -> None:
        return None

    async def progress(self, progress: float, total: float | None = None,
                       message: str | None = None) -> None:
        return None


class Protocol:
    """The SDK's handler kernel (``serve_one``: the same validation of each method's params,
    the same handlers, middleware and result serialisation) without its per-request transport.

    The SDK's stateless Streamable HTTP manager builds, per request, a transport, a task, a
    dispatcher and memory streams only to carry one message in and one out (about 1.1 ms a
    call here). This answers the one admitted message directly, as that transport does in
    JSON-response mode: the same Content-Type and Accept checks, the same parse and JSON-RPC
    validation, 202 with no body for a notification, and the result in the same envelope.
    tests/unit/test_retrievalserver_protocol.py sends every request shape to both and compares the
    answers byte for byte.
    """

    def __init__(self, server: Server[Any]) -> None:
        self._server = server
        self._state: Any = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Protocol]:
        async with self._server.lifespan(self._server) as state:
            self._state = state
            try:
                yield self
            finally:
                self._state = None

    async def answer(self, path: str, headers: Sequence[tuple[bytes, bytes]], body: bytes,
                     identity: VerifiedIdentity) -> Answer:
        """The answer to one POST whose ``body`` is already read and admitted by the guard."""
        version = _first(headers, b"mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return Answer(REFUSED)  # the SDK's other era; the guard admits only 2025-11-25
        if not _json_content(_first(headers, b"content-type")) or not _accepts_json(
                _first(headers, b"accept") or ""):
            return Answer(REFUSED)
        try:
            message = jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body),
                                                              by_name=False)
        except ValueError:  # pydantic's ValidationError is one
            return Answer(REFUSED)
        if not isinstance(message, JSONRPCRequest):
            # A notification (our server handles none: stateless, nothing to record).
            return Answer(202, list(_JSON))
        return await self._request(message, version, identity)

    async def _request(self, message: JSONRPCRequest, version: str | None,
                       identity: VerifiedIdentity) -> Answer:
        exchange = _Exchange({"state": {IDENTITY_KEY: identity}})
        context = _DispatchContext(message.id, ServerMessageMetadata(request_context=exchange))
        # Born ready, as the SDK's stateless path makes each request's connection.
        connection = Connection.from_envelope(version or DEFAULT_NEGOTIATED_VERSION, None, None)
        try:
            result = await serve_one(self._server, context, message.method, message.params,
                                     connection=connection, lifespan_state=self._state)
        except Exception:  # the SDK answers a JSON-RPC error, which never goes out either
            return Answer(REFUSED)
        reply = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
        return Answer(200, list(_JSON),
                      bytearray(reply.model_dump_json(by_alias=True, exclude_unset=True), "utf-8"))


def _first(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of ``name`` (lower-case), as the SDK's request headers read it."""
    return next((v.decode("latin-1") for k, v in headers if k == name), None)


def _json_content(value: str | None) -> bool:
    """The SDK's two Content-Type checks: its transport security's (a case-blind prefix) and
    its transport's (``application/json`` exactly, among the comma-separated media types)."""
    if value is None or not value.lower().startswith(CONTENT_TYPE_JSON):
        return False
    return any(part.strip() == CONTENT_TYPE_JSON for part in value.split(";")[0].split(","))


def _accepts_json(value: str) -> bool:
    """The SDK's Accept check in JSON-response mode (wildcards included)."""
    types_ = [media.strip().split(";")[0].strip().lower() for media in value.split(",")]
    return any(t in (CONTENT_TYPE_JSON, "application/*", "*/*") for t in types_)
