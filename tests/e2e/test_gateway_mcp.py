"""The retrieval Agent's MCP route through the real agentgateway v1.3.1 (ADR 0017 §1, §13).

In front of a two-tool Streamable HTTP server built with the `mcp` package: the binding admits
one tool, exactly one X-Fgentic-Identity, no other X-Fgentic-* name and MCP 2025-11-25 only.
Requests are raw JSON-RPC so each header (and each repeat of one) is the test's choice.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest
from aiohttp import ClientSession

from fgentic_governance import contract
from tests.support.gateway import (
    AGENT_MCP_KEY,
    BRIDGE_KEY,
    Stack,
)
from tests.support.mcp_stub import BOUND_TOOL, OTHER_TOOL
from tests.support.projector import AGENT, room_context

pytestmark = pytest.mark.e2e

VERSION = "2025-11-25"
_ids = itertools.count(1)


def identity() -> str:
    projection = contract.stamp_matrix(room_context(), agent=AGENT, iat=int(time.time()))
    return contract.encode_identity(projection)


def agent_headers(*, key: str | None = AGENT_MCP_KEY, carrier: list[str] | None = None,
                  version: str | None = VERSION) -> list[tuple[str, str]]:
    headers = [("accept", "application/json, text/event-stream")]
    if key is not None:
        headers.append(("authorization", f"Bearer {key}"))
    headers += [("x-fgentic-identity", v) for v in (carrier if carrier is not None
                                                     else [identity()])]
    if version is not None:
        headers.append(("mcp-protocol-version", version))
    return headers


async def rpc(stack: Stack, session: ClientSession, method: str, params: dict[str, Any],
              headers: list[tuple[str, str]], *, mcp_session: str | None = None,
              ) -> tuple[int, dict[str, Any] | None, str | None]:
    """(HTTP status, JSON-RPC response or None, Mcp-Session-Id) of one request."""
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
    if mcp_session is not None:
        headers = [*headers, ("mcp-session-id", mcp_session)]
    async with session.post(stack.mcp_url, json=body, headers=headers) as response:
        text = await response.text()
        sid = response.headers.get("mcp-session-id")
        status = response.status
    if status != 200:
        return status, None, sid
    # Streamable HTTP answers JSON or an event stream whose data line holds the response.
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return status, json.loads(data[-1] if data else text), sid


async def initialize(stack: Stack, session: ClientSession) -> str:
    # The initialize request carries no MCP-Protocol-Version (the rendered rule requires that).
    params = {"protocolVersion": VERSION, "capabilities": {},
              "clientInfo": {"name": "e2e", "version": "1"}}
    status, reply, sid = await rpc(stack, session, "initialize", params,
                                   agent_headers(version=None))
    assert status == 200 and reply is not None, status
    assert reply["result"]["protocolVersion"] == VERSION
    assert sid
    notify = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with session.post(stack.mcp_url, json=notify,
                            headers=[*agent_headers(), ("mcp-session-id", sid)]) as response:
        assert response.status in (200, 202)
    return sid


async def call(stack: Stack, session: ClientSession, sid: str, tool: str,
               headers: list[tuple[str, str]] | None = None,
               ) -> tuple[int, dict[str, Any] | None]:
    arguments = {"query": "retention"} if tool == BOUND_TOOL else {}
    status, reply, _ = await rpc(stack, session, "tools/call",
                                 {"name": tool, "arguments": arguments},
                                 headers if headers is not None else agent_headers(),
                                 mcp_session=sid)
    return status, reply


def seen(reply: dict[str, Any]) -> dict[str, Any]:
    """What the MCP server reported receiving (see mcp_stub._seen)."""
    result: dict[str, Any] = json.loads(reply["result"]["content"][0]["text"])
    return result


async def test_only_the_bound_tool_is_listed(stack: Stack, session: ClientSession) -> None:
    sid = await initialize(stack, session)
    status, reply, _ = await rpc(stack, session, "tools/list", {}, agent_headers(),
                                 mcp_session=sid)
    assert status == 200 and reply is not None
    assert [tool["name"] for tool in reply["result"]["tools"]] == [BOUND_TOOL]


async def test_bound_tool_receives_exactly_the_carrier(
    stack: Stack, session: ClientSession
) -> None:
    sid = await initialize(stack, session)
    value = identity()
    status, reply = await call(stack, session, sid, BOUND_TOOL, agent_headers(carrier=[value]))
    assert status == 200 and reply is not None and "result" in reply, reply
    observed = seen(reply)
    assert observed["identity"] == [value]
    assert observed["reserved"] == ["x-fgentic-identity"]
    assert observed["credentials"] == []  # neither the Agent's API key nor a cookie


async def test_cookie_is_not_forwarded_to_the_mcp_server(
    stack: Stack, session: ClientSession
) -> None:
    sid = await initialize(stack, session)
    status, reply = await call(stack, session, sid, BOUND_TOOL,
                               [*agent_headers(), ("cookie", "session=secret")])
    assert status == 200 and reply is not None
    assert seen(reply)["credentials"] == []


async def test_ceiling_sized_carrier_passes_the_mcp_hop_intact(
    stack: Stack, session: ClientSession
) -> None:
    """An 8,192-byte value crosses the gateway unchanged; judging it is knowledge-retrieval's
    job (the contract refuses 8,193 bytes), not an incidental transport limit."""
    sid = await initialize(stack, session)
    value = "A" * 8192
    status, reply = await call(stack, session, sid, BOUND_TOOL, agent_headers(carrier=[value]))
    assert status == 200 and reply is not None
    assert seen(reply)["identity"] == [value]


async def test_second_tool_cannot_be_called(stack: Stack, session: ClientSession) -> None:
    sid = await initialize(stack, session)
    status, reply = await call(stack, session, sid, OTHER_TOOL)
    assert reply is None or "result" not in reply, reply  # the stub would have answered
    assert status != 200 or (reply is not None and "error" in reply)


@pytest.mark.parametrize("headers", [
    agent_headers(carrier=[]),
    agent_headers(carrier=["a", "b"]),
    agent_headers(carrier=[identity(), identity()]),
    [*agent_headers(), ("x-fgentic-room-context", "x")],
    [*agent_headers(), ("x-fgentic-debug", "1")],
], ids=["no-carrier", "two-carriers", "same-carrier-twice", "room-context", "other-reserved"])
async def test_carrier_rules_refuse_before_the_server(
    stack: Stack, session: ClientSession, headers: list[tuple[str, str]]
) -> None:
    sid = await initialize(stack, session)
    status, reply = await call(stack, session, sid, BOUND_TOOL, headers)
    assert (status, reply) == (403, None)


@pytest.mark.parametrize(("key", "expected"), [(None, 401), ("wrong", 401), (BRIDGE_KEY, 401)])
async def test_agent_api_key_is_required(
    stack: Stack, session: ClientSession, key: str | None, expected: int
) -> None:
    sid = await initialize(stack, session)
    status, reply = await call(stack, session, sid, BOUND_TOOL, agent_headers(key=key))
    assert (status, reply) == (expected, None)


@pytest.mark.parametrize("version", [None, "2025-06-18", "2026-07-28"])
async def test_every_request_after_initialize_carries_the_negotiated_revision(
    stack: Stack, session: ClientSession, version: str | None
) -> None:
    sid = await initialize(stack, session)
    status, reply = await call(stack, session, sid, BOUND_TOOL, agent_headers(version=version))
    assert (status, reply) == (403, None)


@pytest.mark.parametrize("offered", ["2025-06-18", "2026-07-28"])
async def test_initialize_must_offer_exactly_2025_11_25(
    stack: Stack, session: ClientSession, offered: str
) -> None:
    params = {"protocolVersion": offered, "capabilities": {},
              "clientInfo": {"name": "e2e", "version": "1"}}
    status, reply, _ = await rpc(stack, session, "initialize", params,
                                 agent_headers(version=None))
    assert (status, reply) == (403, None)
