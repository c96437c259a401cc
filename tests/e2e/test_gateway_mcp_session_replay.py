"""MCP session replay across the routes of one gateway (issue 36 §1, GHSA-mvgg-jvj2-4frq).

agentgateway before v1.4.0 serves a stateful MCP session id replayed on another route by the
backend of the route that issued it, under the other route's policy. So the rendered binding runs
on the real agentgateway v1.3.1 beside an ordinary platform MCP route, as real platforms have:
a tools server any Agent may call, no key, the gateway's default (stateful) session mode, once
on the binding's own MCP listener and once on a bind of its own. Session ids, real and invented,
are replayed on both routes in both directions, in front of the real retrieval server (with a
`HeaderTap` that records whatever reaches it). The retrieval route is rendered stateless: it
issues no id, so there is nothing to replay, and an id from elsewhere neither opens it nor picks
its backend.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import ClientSession

from fgentic_devenv import free_port, wait_until
from fgentic_devenv.postgres import LocalPostgres
from fgentic_devenv.up import port_open
from tests.support.gateway import (
    MCP_VERSION,
    Stack,
    agent_headers,
    gateway_stack,
    mcp_identity,
    rpc,
)
from tests.support.projector import AGENT, ALICE, room_context
from tests.support.retrieval_server import TOOL, Chunk, HeaderTap, served_corpus

pytestmark = pytest.mark.e2e

TEXT = "retention"
BOB = {"kind": "matrix", "principal": "@bob:org-a.example"}
CORPUS = [
    Chunk(1, TEXT, "docs/retention.md", {
        "classification": "public",
        "allowed_principals": [{"kind": "matrix", "principal": ALICE}]}),
    Chunk(2, f"{TEXT} internal", "docs/internal.md", {
        "classification": "approved_non_public", "allowed_principals": [BOB]}),
]
PLATFORM_PATH = "/mcp/tools"
PLATFORM_TARGET = "platform-tools"


@dataclass
class Gateway:
    stack: Stack
    tap: HeaderTap
    platform_urls: list[str]
    """The platform route on the binding's MCP listener, then on a bind of its own."""


def platform_route(name: str, port: int) -> dict[str, Any]:
    """An ordinary platform MCP route: no policy at all, the gateway's default session mode."""
    return {"name": name, "matches": [{"path": {"exact": PLATFORM_PATH}}],
            "backends": [{"mcp": {"targets": [{"name": PLATFORM_TARGET, "mcp": {
                "host": "127.0.0.1", "port": port, "path": "/mcp"}}]}}]}


def add_platform_routes(config: dict[str, Any], tools_port: int, own_bind: int) -> None:
    """The platform route beside the binding's MCP route, and again on a bind of its own."""
    [listener] = [li for bind in config["binds"] for li in bind["listeners"]
                  if any(r["name"].endswith(".mcp") for r in li["routes"])]
    listener["routes"].append(platform_route("platform-tools", tools_port))
    config["binds"].append({"port": own_bind, "listeners": [{
        "name": "platform", "protocol": "HTTP",
        "routes": [platform_route("platform-tools-own-bind", tools_port)]}]})


@pytest.fixture(scope="module")
async def gateway(postgres: LocalPostgres,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    work = tmp_path_factory.mktemp("gateway-mcp-replay")
    tools_port, own_bind = free_port(), free_port()
    async with served_corpus(postgres, work, CORPUS,
                             agent=f"{AGENT.namespace}/{AGENT.name}") as served, \
            gateway_stack(work, retrieval=served.tap.address,
                          edit=lambda c: add_platform_routes(c, tools_port, own_bind)) as stack:
        stack.start_mcp(PLATFORM_TARGET, tools_port)
        wait_until(lambda: port_open(own_bind), stack.processes["agentgateway"],
                   what="the platform bind", log=stack.log("agentgateway"), timeout=30)
        yield Gateway(stack, served.tap, [
            f"http://127.0.0.1:{stack.ports['mcp']}{PLATFORM_PATH}",
            f"http://127.0.0.1:{own_bind}{PLATFORM_PATH}"])


INITIALIZE = {"protocolVersion": MCP_VERSION, "capabilities": {},
              "clientInfo": {"name": "e2e", "version": "1"}}
SEARCH = {"name": TOOL, "arguments": {"query": TEXT}}


def bobs_carrier() -> str:
    """A carrier naming another principal, with a non-public class. Carriers are not signed:
    only the retrieval route (the Agent's key) keeps one from the server."""
    return mcp_identity(room_context(caller=BOB, classes=("approved_non_public", "public")))


def platform_caller() -> list[tuple[str, str]]:
    """What any caller of the platform route can send: no Agent key, a forged carrier, a room
    context and its own cookie."""
    return [*agent_headers(key=None, carrier=[bobs_carrier()]),
            ("x-fgentic-room-context", "forged"), ("cookie", "session=platform")]


def invented_ids(stack: Stack) -> list[str]:
    """Ids no route issued: one shaped like v1.3.1's (unpadded base64url JSON naming the
    binding's MCP target and a random session) and one opaque."""
    shaped = {"t": "mcp", "s": [{"t": stack.spec.mcp_server.name}], "r": str(uuid.uuid4())}
    encoded = base64.urlsafe_b64encode(json.dumps(shaped, separators=(",", ":")).encode())
    return [encoded.decode().rstrip("="), uuid.uuid4().hex]


def chunk_ids(reply: dict[str, Any] | None) -> list[str]:
    assert reply is not None and "result" in reply, reply
    structured = reply["result"].get("structuredContent") or {}
    assert "chunks" in structured, reply  # else another backend answered
    return [c["chunk_id"] for c in structured["chunks"]]


async def test_the_retrieval_route_issues_no_session_and_the_agents_call_is_answered(
    gateway: Gateway, session: ClientSession,
) -> None:
    stack = gateway.stack
    status, reply, sid = await rpc(stack, session, "initialize", INITIALIZE,
                                   agent_headers(version=None))
    assert status == 200 and reply is not None
    assert sid is None  # nothing to replay, nothing in the access log
    carrier = mcp_identity()
    before = len(gateway.tap.requests)
    status, reply, sid = await rpc(stack, session, "tools/call", SEARCH,
                                   agent_headers(carrier=[carrier]))
    assert status == 200 and sid is None
    assert chunk_ids(reply) == ["1"]
    # v1.3.1 opens an upstream session per request (initialize, initialized, the call), each
    # with the caller's headers, so the server judges the carrier on every one of them.
    arrived = gateway.tap.mcp_requests(before)
    assert [method for method, _ in arrived] == [
        "initialize", "notifications/initialized", "tools/call"]
    assert all([v for k, v in r.headers if k == "x-fgentic-identity"] == [carrier]
               for _, r in arrived)


async def test_nothing_the_retrieval_route_leaves_opens_its_server_from_a_platform_route(
    gateway: Gateway, session: ClientSession,
) -> None:
    """The Agent's own initialize, then whatever id it left (with v1.3.1's default stateful
    mode: a real session, written in clear on the access log) or any invented one, replayed on
    the platform route by a caller without the Agent's key: refused, and nothing reaches the
    retrieval server, so nothing of Bob's comes back."""
    stack = gateway.stack
    status, _, issued = await rpc(stack, session, "initialize", INITIALIZE,
                                  agent_headers(version=None))
    assert status == 200
    for url in gateway.platform_urls:
        for sid in [issued, *invented_ids(stack)]:
            before = len(gateway.tap.requests)
            status, reply, _ = await rpc(stack, session, "tools/call", SEARCH,
                                         platform_caller(), mcp_session=sid, url=url)
            assert gateway.tap.requests[before:] == [], (url, sid)
            # 400 without an id or with a malformed one, 404 for a well-formed unknown one.
            assert status in {400, 404} and reply is None, (url, sid, status)


async def test_a_platform_session_neither_opens_the_retrieval_route_nor_picks_its_backend(
    gateway: Gateway, session: ClientSession,
) -> None:
    """A real id from the platform route (and an invented one) replayed on the retrieval
    route: without the Agent's key the route's own check refuses it before the server; the
    Agent's own call carrying it is answered by the retrieval server, for Alice only."""
    stack = gateway.stack
    for url in gateway.platform_urls:
        status, _, platform_sid = await rpc(stack, session, "initialize", INITIALIZE,
                                            agent_headers(key=None, version=None), url=url)
        assert status == 200 and platform_sid  # the platform route keeps sessions
        for sid in [platform_sid, *invented_ids(stack)]:
            before = len(gateway.tap.requests)
            status, reply, _ = await rpc(stack, session, "tools/call", SEARCH,
                                         platform_caller(), mcp_session=sid)
            assert (status, reply) == (401, None), (url, sid)
            assert gateway.tap.requests[before:] == [], (url, sid)
            status, reply, _ = await rpc(stack, session, "tools/call", SEARCH,
                                         agent_headers(), mcp_session=sid)
            assert status == 200, (url, sid)
            assert chunk_ids(reply) == ["1"], (url, sid)
            calls = [c for c in gateway.tap.mcp_requests(before) if c[0] == "tools/call"]
            assert len(calls) == 1, (url, sid)
