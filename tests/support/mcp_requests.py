"""MCP requests as the retrieval server's tests send them: the identity carrier and the
JSON-RPC body (tests/unit/test_retrievalserver.py, tests/unit/test_retrievalserver_protocol.py)."""

from __future__ import annotations

import json
from typing import Any

from fgentic_governance import contract
from fgentic_governance.contract import AgentRef
from tests.support.projector import AGENT, NOW, room_context

VERSION = "2025-11-25"


def carrier(*, agent: AgentRef = AGENT, iat: int = NOW) -> str:
    return contract.encode_identity(contract.stamp_matrix(room_context(), agent=agent, iat=iat))


def rpc_body(method: str, params: Any = None, request_id: Any = 1) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()
