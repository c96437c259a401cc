"""The MCP route's tool filter through the real agentgateway v1.3.1 (ADR 0017 §13), in front of
a server that offers more than the bound tool: the two-tool stub of `tests.support.mcp_stub`
(the real retrieval server offers only one, so it cannot show the filter). Everything else
about the MCP route runs against the real server (test_gateway_mcp.py)."""

from __future__ import annotations

import pytest
from aiohttp import ClientSession

from tests.support.gateway import Stack, agent_headers, mcp_call, mcp_initialize, rpc
from tests.support.mcp_stub import BOUND_TOOL, OTHER_TOOL

pytestmark = pytest.mark.e2e


async def test_only_the_bound_tool_is_listed(stack: Stack, session: ClientSession) -> None:
    sid = await mcp_initialize(stack, session)
    status, reply, _ = await rpc(stack, session, "tools/list", {}, agent_headers(),
                                 mcp_session=sid)
    assert status == 200 and reply is not None
    assert [tool["name"] for tool in reply["result"]["tools"]] == [BOUND_TOOL]


async def test_second_tool_cannot_be_called(stack: Stack, session: ClientSession) -> None:
    sid = await mcp_initialize(stack, session)
    status, reply = await mcp_call(stack, session, sid, OTHER_TOOL, arguments={})
    assert reply is None or "result" not in reply, reply  # the stub would have answered
    assert status != 200 or (reply is not None and "error" in reply)
