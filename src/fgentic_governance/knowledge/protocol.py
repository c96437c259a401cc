"""The MCP protocol, spoken by the `mcp` SDK: one tool, stateless, JSON answers.

The SDK's low-level server lists the one tool and dispatches its calls; its stateless
Streamable HTTP manager runs each request on a fresh transport, so nothing (identity least of
all) outlives a request. It is called as an ASGI application from our own HTTP server
(``http``) with the request the guard admitted: the body already read and bounded, and the
verified identity in the ASGI scope's ``state`` (never in a session).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from fgentic_governance.contract import VerifiedIdentity
from fgentic_governance.knowledge import metrics, tool
from fgentic_governance.knowledge.codes import KnowledgeError, KnowledgeReason
from fgentic_governance.knowledge.service import KnowledgeSearch

IDENTITY_KEY: Final = "fgentic.identity"
SERVER_NAME: Final = "fgentic-knowledge-retrieval"


def _identity(ctx: Any) -> VerifiedIdentity:
    """The guard's decode for this very request (ASGI scope state); fail closed without it."""
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    identity = state.get(IDENTITY_KEY) if isinstance(state, dict) else None
    if type(identity) is not VerifiedIdentity:
        raise KnowledgeError(KnowledgeReason.REQUEST_MALFORMED)
    return identity


def _refused(error: KnowledgeError) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=error.code.value)],
                                is_error=True)


def build_server(tool_name: str, search: KnowledgeSearch) -> Server[Any]:
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
                raise KnowledgeError(KnowledgeReason.TOOL_UNKNOWN)
            found = await search.call(_identity(ctx), params.arguments)
        except KnowledgeError as error:
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


class Protocol:
    """The SDK's stateless manager, started once; :meth:`answer` runs one admitted request."""

    def __init__(self, server: Server[Any]) -> None:
        # The gateway reaches us with its own Host; DNS-rebinding checks protect browsers,
        # which the NetworkPolicy keeps away (only the gateway proxy may connect).
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self._manager = StreamableHTTPSessionManager(
            app=server, json_response=True, stateless=True, security_settings=security)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Protocol]:
        async with self._manager.run():
            yield self

    async def answer(self, path: str, headers: Sequence[tuple[bytes, bytes]], body: bytes,
                     identity: VerifiedIdentity) -> Answer:
        """The SDK's answer to one POST whose ``body`` is already read."""
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(k.lower(), v) for k, v in headers], "client": None,
                 "server": None, "state": {IDENTITY_KEY: identity}}
        answer, done = Answer(), asyncio.Event()
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer.status = int(message["status"])
                answer.headers = [(k.decode("latin-1"), v.decode("latin-1"))
                                  for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                answer.body += message.get("body", b"")
                if not message.get("more_body", False):
                    done.set()

        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            done.set()
        return answer
