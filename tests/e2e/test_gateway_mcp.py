"""The retrieval Agent's MCP route through the real agentgateway v1.3.1 (ADR 0017 §1, §13) in
front of the real retrieval server (`fgentic-governance retrieval-server` over a real
PostgreSQL + pgvector corpus).

The binding admits one tool, exactly one X-Fgentic-Identity, no other X-Fgentic-* name and MCP
2025-11-25 only. Requests are raw JSON-RPC, so each header (and each repeat of one) is the
test's choice. A recording hop in front of the server (`HeaderTap`) shows what the route
delivered, and that a refused request never reached the server. The tool filter against a
server that offers more tools is in test_gateway_mcp_tool_filter.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import ClientSession

from fgentic_devenv.postgres import LocalPostgres
from tests.support.gateway import (
    BRIDGE_KEY,
    Stack,
    agent_headers,
    gateway_stack,
    mcp_call,
    mcp_identity,
    mcp_initialize,
    rpc,
)
from tests.support.projector import AGENT, ALICE
from tests.support.retrieval_server import TOOL, Chunk, HeaderTap, served_corpus

pytestmark = pytest.mark.e2e

TEXT = "retention"
CORPUS = [Chunk(1, TEXT, "docs/retention.md", {
    "classification": "public",
    "allowed_principals": [{"kind": "matrix", "principal": ALICE}]})]


@dataclass
class Real:
    stack: Stack
    tap: HeaderTap


@pytest.fixture(scope="module")
async def real(postgres: LocalPostgres,
               tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Real]:
    work = tmp_path_factory.mktemp("gateway-mcp")
    async with served_corpus(postgres, work, CORPUS,
                             agent=f"{AGENT.namespace}/{AGENT.name}") as served, \
            gateway_stack(work, retrieval=served.tap.address) as stack:
        yield Real(stack, served.tap)


async def test_the_real_server_lists_the_bound_tool(real: Real, session: ClientSession) -> None:
    sid = await mcp_initialize(real.stack, session)
    status, reply, _ = await rpc(real.stack, session, "tools/list", {}, agent_headers(),
                                 mcp_session=sid)
    assert status == 200 and reply is not None
    assert [tool["name"] for tool in reply["result"]["tools"]] == [TOOL]


async def test_bound_tool_receives_exactly_the_carrier(real: Real,
                                                       session: ClientSession) -> None:
    sid = await mcp_initialize(real.stack, session)
    value = mcp_identity()
    before = len(real.tap.requests)
    status, reply = await mcp_call(real.stack, session, sid, TOOL,
                                   agent_headers(carrier=[value]), arguments={"query": TEXT})
    assert status == 200 and reply is not None and "result" in reply, reply
    chunks = reply["result"]["structuredContent"]["chunks"]
    assert [c["chunk_id"] for c in chunks] == ["1"]  # the server's prefilter answered
    [(_, arrived)] = [c for c in real.tap.mcp_requests(before) if c[0] == "tools/call"]
    names = [name for name, _ in arrived.headers]
    assert arrived.header("x-fgentic-identity") == value
    assert names.count("x-fgentic-identity") == 1
    assert not {"authorization", "cookie", "x-user-id"} & set(names)  # neither API key nor cookie


async def test_cookie_is_not_forwarded_to_the_mcp_server(real: Real,
                                                         session: ClientSession) -> None:
    sid = await mcp_initialize(real.stack, session)
    before = len(real.tap.requests)
    status, reply = await mcp_call(real.stack, session, sid, TOOL,
                                   [*agent_headers(), ("cookie", "session=secret")])
    assert status == 200 and reply is not None
    assert all("cookie" not in {n for n, _ in r.headers} for r in real.tap.requests[before:])


async def test_ceiling_sized_carrier_passes_the_mcp_hop_intact(real: Real,
                                                               session: ClientSession) -> None:
    """An 8,192-byte value crosses the gateway unchanged; judging it is the server's job (the
    contract refuses it there, by code), not an incidental transport limit."""
    sid = await mcp_initialize(real.stack, session)
    value = "A" * 8192
    before = len(real.tap.requests)
    status, _ = await mcp_call(real.stack, session, sid, TOOL, agent_headers(carrier=[value]))
    assert status == 403  # the server's contract refusal, passed back
    [(_, arrived)] = real.tap.mcp_requests(before)
    assert arrived.header("x-fgentic-identity") == value


async def test_a_tool_the_route_does_not_bind_never_reaches_the_server(
    real: Real, session: ClientSession,
) -> None:
    sid = await mcp_initialize(real.stack, session)
    before = len(real.tap.requests)
    status, reply = await mcp_call(real.stack, session, sid, "delete_corpus", arguments={})
    assert status != 200 or (reply is not None and "error" in reply), reply
    assert not [c for c in real.tap.mcp_requests(before) if c[0] == "tools/call"]


@pytest.mark.parametrize("headers", [
    agent_headers(carrier=[]),
    agent_headers(carrier=["a", "b"]),
    agent_headers(carrier=[mcp_identity(), mcp_identity()]),
    [*agent_headers(), ("x-fgentic-room-context", "x")],
    [*agent_headers(), ("x-fgentic-debug", "1")],
], ids=["no-carrier", "two-carriers", "same-carrier-twice", "room-context", "other-reserved"])
async def test_carrier_rules_refuse_before_the_server(
    real: Real, session: ClientSession, headers: list[tuple[str, str]]
) -> None:
    sid = await mcp_initialize(real.stack, session)
    before = len(real.tap.requests)
    status, reply = await mcp_call(real.stack, session, sid, TOOL, headers)
    assert (status, reply) == (403, None)
    assert real.tap.requests[before:] == []


@pytest.mark.parametrize(("key", "expected"), [(None, 401), ("wrong", 401), (BRIDGE_KEY, 401)])
async def test_agent_api_key_is_required(
    real: Real, session: ClientSession, key: str | None, expected: int
) -> None:
    sid = await mcp_initialize(real.stack, session)
    before = len(real.tap.requests)
    status, reply = await mcp_call(real.stack, session, sid, TOOL, agent_headers(key=key))
    assert (status, reply) == (expected, None)
    assert real.tap.requests[before:] == []


@pytest.mark.parametrize("version", [None, "2025-06-18", "2026-07-28"])
async def test_every_request_after_initialize_carries_the_negotiated_revision(
    real: Real, session: ClientSession, version: str | None
) -> None:
    sid = await mcp_initialize(real.stack, session)
    before = len(real.tap.requests)
    status, reply = await mcp_call(real.stack, session, sid, TOOL, agent_headers(version=version))
    assert (status, reply) == (403, None)
    assert real.tap.requests[before:] == []


@pytest.mark.parametrize("offered", ["2025-06-18", "2026-07-28"])
async def test_initialize_must_offer_exactly_2025_11_25(
    real: Real, session: ClientSession, offered: str
) -> None:
    params = {"protocolVersion": offered, "capabilities": {},
              "clientInfo": {"name": "e2e", "version": "1"}}
    before = len(real.tap.requests)
    status, reply, _ = await rpc(real.stack, session, "initialize", params,
                                 agent_headers(version=None))
    assert (status, reply) == (403, None)
    assert real.tap.requests[before:] == []
