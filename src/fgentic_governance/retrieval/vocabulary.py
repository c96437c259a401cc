"""The retrieval wire vocabulary (ADR 0017): the header names, methods and paths on which the
gateway, the identity projector and the retrieval Agent agree.

The renderer writes these into the agentgateway configuration and the projector reads them
from each check request, so neither owns them: both import this module, and neither imports
the other. The `CHECK_*` headers are the gateway ↔ projector contract, documented in
docs/retrieval-rendering.md. Names only the renderer and the operator use (labels, object names,
environment variables of the standalone form) stay in
`fgentic_governance.retrieval.render.names`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from fgentic_governance.api.retrieval import A2aWire
from fgentic_governance.contract.codec import IDENTITY_HEADER

# Request headers of the identity contract (lowercase: agentgateway's CEL sees them so).
IDENTITY = IDENTITY_HEADER.lower()
USER_ID = "x-user-id"
ROOM_CONTEXT = "x-fgentic-room-context"
RESERVED_PREFIX = "x-fgentic-"
A2A_VERSION_HEADER = "a2a-version"
MCP_PROTOCOL_VERSION = ("mcp-protocol-version", "2025-11-25")


@dataclass(frozen=True)
class Wire:
    """One A2A version as the routes and the projector check it: the operation that starts a
    task (the only one either route admits), the poll and cancel that neither admits (ADR 0017
    §12; issue 38 §4), the A2A-Version values admitted, and the body field that asks for an
    immediate return."""

    version: A2aWire
    send: str
    get: str
    cancel: str
    versions: tuple[str, ...]
    """Admitted values of A2A-Version (exactly one value, one of these)."""
    version_optional: bool
    """Whether A2A-Version may be absent (present, it must still be one of ``versions``)."""
    immediate: tuple[tuple[str, ...], bool]
    """(every spelling of the params.configuration field the runtime reads, the value that
    returns before the task ends)."""


WIRES: Final = MappingProxyType({
    # a2a-sdk 0.3 reads no A2A-Version; a client that sends one says 0.3. blocking=false
    # returns at once (absent: blocking).
    A2aWire.V0_3: Wire(A2aWire.V0_3, "message/send", "tasks/get", "tasks/cancel",
                       versions=("0.3",), version_optional=True,
                       immediate=(("blocking",), False)),
    A2aWire.V1_0: Wire(A2aWire.V1_0, "SendMessage", "GetTask", "CancelTask",
                       versions=("1.0",), version_optional=False,
                       immediate=(("returnImmediately", "return_immediately"), True)),
})

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


AGENT_A2A_PATH = "/"
"""Where kagent's runtime serves A2A JSON-RPC on the Agent's Service (a2a-sdk's default)."""
