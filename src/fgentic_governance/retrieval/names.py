"""The retrieval wire vocabulary (ADR 0017): the header names, methods and paths on which the
gateway, the identity projector and the retrieval Agent agree.

The renderer writes these into the agentgateway configuration and the projector reads them
from each check request, so neither owns them: both import this module, and neither imports
the other. The `CHECK_*` headers are the gateway ↔ projector contract, documented in
docs/retrieval-rendering.md. Names only the renderer and the operator use (labels, object names,
environment variables of the standalone form) stay in `render/names.py`.
"""

from __future__ import annotations

from fgentic_governance.contract.codec import IDENTITY_HEADER

# Request headers of the identity contract (lowercase: agentgateway's CEL sees them so).
IDENTITY = IDENTITY_HEADER.lower()
USER_ID = "x-user-id"
ROOM_CONTEXT = "x-fgentic-room-context"
RESERVED_PREFIX = "x-fgentic-"
A2A_VERSION = ("a2a-version", "1.0")
MCP_PROTOCOL_VERSION = ("mcp-protocol-version", "2025-11-25")

# A2A v1 JSON-RPC operations (ADR 0017 §1): the bridge may also poll and cancel (§12).
SEND_MESSAGE = "SendMessage"
LOCAL_METHODS = (SEND_MESSAGE, "GetTask", "CancelTask")

# Headers the gateway computes for the projector's check request (never forwarded upstream).
CHECK_AGENT = "x-fgentic-authz-agent"
CHECK_WORKLOAD = "x-fgentic-authz-workload"
CHECK_HTTP_METHOD = "x-fgentic-authz-http-method"
CHECK_PATH = "x-fgentic-authz-path"
CHECK_A2A_METHOD = "x-fgentic-authz-a2a-method"
CHECK_USER_ID_COUNT = "x-fgentic-authz-user-id-count"
CHECK_ROOM_CONTEXT_COUNT = "x-fgentic-authz-room-context-count"
CHECK_ISSUER = "x-fgentic-authz-issuer"
CHECK_AUDIENCE = "x-fgentic-authz-audience"
CHECK_AZP = "x-fgentic-authz-azp"
CHECK_TOKEN_EXP = "x-fgentic-authz-token-exp"
CHECK_TIMEOUT = "x-fgentic-authz-timeout-seconds"
# The projector's ext-authz paths, one per route.
PROJECT_LOCAL_PATH = "/v1/project/local"
PROJECT_PUBLIC_PATH = "/v1/project/public"


def agent_route_path(namespace: str, name: str) -> str:
    """The exact A2A path of one Agent on the gateway (both A2A listeners)."""
    return f"/a2a/{namespace}/{name}"


def kagent_a2a_path(namespace: str, name: str) -> str:
    """Where kagent v0.9.11 serves an Agent's A2A JSON-RPC endpoint."""
    return f"/api/a2a/{namespace}/{name}/"
