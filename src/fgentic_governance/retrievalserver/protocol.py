"""The MCP protocol of one tool, stateless, JSON answers: our own dispatch for the requests a
client sends, the `mcp` SDK's handler kernel for every other shape.

It is called from our own HTTP server (``http``) with the request the guard admitted: the body
already read and bounded, and the verified identity, which goes to this one request's tool
call and is never kept. ``Protocol`` answers as the SDK's stateless Streamable HTTP transport
does in JSON-response mode, without its per-request machinery (see there);
tests/unit/test_retrievalserver_protocol.py compares the two byte for byte.
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
    JSONRPCMessage,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types import methods as sdk_methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import BaseModel

from fgentic_governance.contract import VerifiedIdentity
from fgentic_governance.retrievalserver import metrics, tool
from fgentic_governance.retrievalserver.codes import RetrievalServerError, RetrievalServerReason
from fgentic_governance.retrievalserver.guard import INITIALIZE, PROTOCOL_VERSION
from fgentic_governance.retrievalserver.service import RetrievalService

IDENTITY_KEY: Final = "fgentic.identity"
SERVER_NAME: Final = "fgentic-knowledge-retrieval"
CONTENT_TYPE_JSON: Final = "application/json"
TOOLS_CALL: Final = "tools/call"
TOOLS_LIST: Final = "tools/list"
PING: Final = "ping"


@dataclass(frozen=True, slots=True)
class Outcome:
    """A tool call's outcome: the structured result and its text, or a refusal (``found``
    None, ``text`` the code alone)."""

    text: str
    found: dict[str, Any] | None


async def call_tool(tool_name: str, search: RetrievalService, identity: VerifiedIdentity,
                    name: str, arguments: Mapping[str, Any] | None) -> Outcome:
    """One tool call, whichever path answers it: the same checks, search and metrics."""
    started = time.perf_counter()
    try:
        if name != tool_name:
            raise RetrievalServerError(RetrievalServerReason.TOOL_UNKNOWN)
        found = await search.call(identity, arguments)
    except RetrievalServerError as error:
        metrics.TOOL_CALLS.labels(metrics.outcome(error.code)).inc()
        return Outcome(error.code.value, None)
    metrics.TOOL_CALLS.labels(metrics.OK).inc()
    metrics.TOOL_SECONDS.observe(time.perf_counter() - started)
    return Outcome(_text(found), found)


def _text(found: dict[str, Any]) -> str:
    """The unstructured rendering clients without structured output read (MCP asks for one).
    Strict JSON: a NaN raises here rather than go out as ``NaN`` (``tool.result`` sends none)."""
    return json.dumps(found, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def listed_tool(tool_name: str) -> types.Tool:
    return types.Tool(name=tool_name, description=tool.DESCRIPTION,
                      input_schema=dict(tool.INPUT_SCHEMA), output_schema=dict(tool.OUTPUT_SCHEMA))


# --- The SDK's kernel: every request shape the lean path leaves to it ---------------------

def _identity(ctx: Any) -> VerifiedIdentity:
    """The guard's decode for this very request (its scope's state); fail closed without it."""
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    identity = state.get(IDENTITY_KEY) if isinstance(state, dict) else None
    if type(identity) is not VerifiedIdentity:
        raise RetrievalServerError(RetrievalServerReason.REQUEST_MALFORMED)
    return identity


def build_server(tool_name: str, search: RetrievalService) -> Server[Any]:
    """The SDK server of one binding: ``tool_name`` is the only thing it offers."""
    listed = listed_tool(tool_name)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        _identity(ctx)
        return types.ListToolsResult(tools=[listed])

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        outcome = await call_tool(tool_name, search, _identity(ctx), params.name,
                                  params.arguments)
        content: list[types.ContentBlock] = [types.TextContent(text=outcome.text)]
        if outcome.found is None:
            return types.CallToolResult(content=content, is_error=True)
        return types.CallToolResult(content=content, structured_content=outcome.found)

    return Server(SERVER_NAME, version="1", on_list_tools=list_tools, on_call_tool=on_call_tool)


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


# --- The lean path ------------------------------------------------------------------------

def _json(value: Any) -> bytes:
    """JSON as the SDK's ``model_dump_json`` writes it (a non-finite float as ``null``)."""
    return pydantic_core.to_json(value, inf_nan_mode="null")


def _wire(method: str, version: str, result: BaseModel) -> bytes:
    """A result as the SDK's kernel shapes it at a 2025 revision (``ServerRunner._serialize``
    with no cache hint): dumped without nulls, then sieved by that revision's schema."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return _json(sdk_methods.serialize_server_result(method, version, dumped))


def _initialize_result(server: Server[Any], negotiated: str) -> types.InitializeResult:
    """``ServerRunner._handle_initialize``'s result for ``negotiated``."""
    opts = server.create_initialization_options()
    return types.InitializeResult(
        protocol_version=negotiated, capabilities=opts.capabilities,
        server_info=types.Implementation(
            name=opts.server_name, title=opts.title, description=opts.description,
            version=opts.server_version, website_url=opts.website_url, icons=opts.icons),
        instructions=opts.instructions)


def _negotiate(version: str, params: dict[str, Any] | None) -> str:
    """The revision ``initialize`` settles on, after the SDK's own two checks of its params
    (the revision's schema, then the params model its kernel reads); they raise otherwise."""
    sdk_methods.validate_client_request(INITIALIZE, version, params)
    offered = types.InitializeRequestParams.model_validate(params or {}, by_name=False)
    requested = offered.protocol_version
    return requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION


def _lean_call(params: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None] | None:
    """The name and arguments of a tool call the lean path answers: params
    ``{name[, arguments]}``, a string and an object or null, as a client sends them. The SDK's
    checks accept every such call, so skipping them changes nothing; any other shape
    (``_meta``, ``task``, another member, none) goes to its kernel."""
    if params is None or not params.keys() <= {"name", "arguments"}:
        return None
    name, arguments = params.get("name"), params.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, dict | None):
        return None
    return name, arguments


def _tool_result(outcome: Outcome) -> dict[str, Any]:
    """A ``CallToolResult`` as the SDK's kernel writes it at 2025-11-25: its members in that
    order, ``isError`` always, ``structuredContent`` only with a result."""
    content = [{"text": outcome.text, "type": "text"}]
    if outcome.found is None:
        return {"content": content, "isError": True}
    return {"content": content, "isError": False, "structuredContent": outcome.found}


def _result(request_id: RequestId, result: bytes) -> Answer:
    body = b'{"jsonrpc":"2.0","id":' + _json(request_id) + b',"result":' + result + b"}"
    return Answer(200, list(_JSON), bytearray(body))


class Protocol:
    """The MCP answer to one admitted request, as the SDK's stateless Streamable HTTP transport
    gives it in JSON-response mode: the same Content-Type and Accept checks, the same parse
    and JSON-RPC validation, 202 with no body for a notification, the result in the same
    envelope.

    That transport built, per request, a transport, a task, a dispatcher and memory streams to
    carry one message each way, then the SDK's kernel ran its params validation, an
    OpenTelemetry middleware (no tracer is configured here), a session and context, and two
    serialisations. The requests a client sends (``initialize``, ``ping``, ``tools/list``
    without params, ``tools/call`` with a name and arguments, at 2025-11-25) are answered
    here directly: the constant results built once from the SDK's own types and per-revision
    serialiser, a tool call's result in the SDK's member order. Every other shape, all of them
    rare and most of them refused, goes to the SDK's kernel (``serve_one``) on a fresh,
    born-ready connection, so nothing outlives a request there either.
    """

    def __init__(self, tool_name: str, search: RetrievalService) -> None:
        self._tool = tool_name
        self._search = search
        self._server = build_server(tool_name, search)
        self._state: Any = None
        self._constant = {
            PING: _wire(PING, PROTOCOL_VERSION, types.EmptyResult()),
            TOOLS_LIST: _wire(TOOLS_LIST, PROTOCOL_VERSION,
                              types.ListToolsResult(tools=[listed_tool(tool_name)])),
        }
        # Keyed by the request's revision (its header, else the SDK's default) and the one
        # negotiated: both among the few handshake revisions, so the table is bounded.
        self._initialized = {
            (version, negotiated): _wire(INITIALIZE, version,
                                         _initialize_result(self._server, negotiated))
            for version in HANDSHAKE_PROTOCOL_VERSIONS
            for negotiated in HANDSHAKE_PROTOCOL_VERSIONS}

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
        message = _message(version, headers, body)
        if message is None or type(identity) is not VerifiedIdentity:  # fail closed without it
            return Answer(REFUSED)
        if not isinstance(message, JSONRPCRequest):
            # A notification (our server handles none: stateless, nothing to record).
            return Answer(202, list(_JSON))
        try:
            result = await self._lean(message, version, identity)
        except Exception:  # the SDK answers a JSON-RPC error, which never goes out either
            return Answer(REFUSED)
        if result is None:
            return await self._kernel(message, version, identity)
        return _result(message.id, result)

    async def _lean(self, message: JSONRPCRequest, version: str | None,
                    identity: VerifiedIdentity) -> bytes | None:
        """The result of a request the lean path answers, else None (the SDK's kernel)."""
        method, params = message.method, message.params
        if method == INITIALIZE:
            revision = version or DEFAULT_NEGOTIATED_VERSION
            return self._initialized[revision, _negotiate(revision, params)]
        if version != PROTOCOL_VERSION:
            return None  # results are shaped per revision: the guard admits no other
        call = _lean_call(params) if method == TOOLS_CALL else None
        if call is not None:
            outcome = await call_tool(self._tool, self._search, identity, *call)
            return _json(_tool_result(outcome))
        return self._constant.get(method) if not params else None

    async def _kernel(self, message: JSONRPCRequest, version: str | None,
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


def _message(version: str | None, headers: Sequence[tuple[bytes, bytes]],
             body: bytes) -> JSONRPCMessage | None:
    """The message, if the SDK's transport takes it: its revision, Content-Type and Accept
    checks, then its parse and JSON-RPC validation."""
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None  # the SDK's other era; the guard admits only 2025-11-25
    if not _json_content(_first(headers, b"content-type")) or not _accepts_json(
            _first(headers, b"accept") or ""):
        return None
    try:
        return jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body),
                                                       by_name=False)
    except ValueError:  # pydantic's ValidationError is one
        return None


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
