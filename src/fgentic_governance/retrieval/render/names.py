"""Names shared by the renderer, the operator and the projector: headers, labels, objects.

The projector (HTTP ext-authz) reads the `CHECK_*` headers the gateway adds to each check
request; they are part of the gateway ↔ projector contract and are documented in
docs/retrieval-rendering.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from fgentic_governance.api.common import GROUP
from fgentic_governance.contract.codec import IDENTITY_HEADER

FIELD_MANAGER = "fgentic-governance"
BINDING_LABEL = f"{GROUP}/binding"
MANAGED_BY = ("app.kubernetes.io/managed-by", "fgentic-governance")
UNENFORCEABLE_ANNOTATION = f"{GROUP}/unenforceable"

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
PROJECT_LOCAL_PATH = "/v1/project/local"
PROJECT_PUBLIC_PATH = "/v1/project/public"
# The rendered ConfigMap (proxy namespace) holding the projector's configuration, and its key.
PROJECTOR_CONFIG_SUFFIX = "projector"
PROJECTOR_CONFIG_KEY = "projector.json"

# Environment variables the standalone form reads its secrets and files from (agentgateway
# shell-expands the config), so the rendered text never holds a credential.
ENV_BRIDGE_API_KEY = "FGENTIC_BRIDGE_API_KEY"
ENV_AGENT_MCP_API_KEY = "FGENTIC_AGENT_MCP_API_KEY"
ENV_PUBLIC_JWKS_FILE = "FGENTIC_PUBLIC_JWKS_FILE"
ENV_PUBLIC_TLS_CERT = "FGENTIC_PUBLIC_TLS_CERT_FILE"
ENV_PUBLIC_TLS_KEY = "FGENTIC_PUBLIC_TLS_KEY_FILE"

_MAX_NAME = 253
_MAX_LABEL_VALUE = 63


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class BindingId:
    """The RetrievalBinding a rendered object belongs to."""

    namespace: str
    name: str

    @property
    def label(self) -> str:
        """`<namespace>.<name>`, shortened with a hash when over the 63-character label limit."""
        value = f"{self.namespace}.{self.name}"
        if len(value) <= _MAX_LABEL_VALUE:
            return value
        return f"{value[:52].rstrip('.-')}-{_digest(value, 10)}"

    def object_name(self, suffix: str) -> str:
        """`<namespace>.<name>.<suffix>`: unambiguous, since a namespace has no dot and no
        suffix has one; the binding name is hashed if the whole exceeds 253 characters."""
        name = f"{self.namespace}.{self.name}.{suffix}"
        if len(name) <= _MAX_NAME:
            return name
        return f"{self.namespace}.{_digest(self.name, 16)}.{suffix}"


def service_host(name: str, namespace: str, cluster_domain: str) -> str:
    return f"{name}.{namespace}.svc.{cluster_domain}"


def agent_route_path(namespace: str, name: str) -> str:
    """The exact A2A path of one Agent on the gateway (both A2A listeners)."""
    return f"/a2a/{namespace}/{name}"


def kagent_a2a_path(namespace: str, name: str) -> str:
    """Where kagent v0.9.11 serves an Agent's A2A JSON-RPC endpoint."""
    return f"/api/a2a/{namespace}/{name}/"


# The kinds a binding renders: (apiVersion, kind) → plural, in apply order. The operator lists
# and prunes exactly these.
RENDERED_KINDS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "configmaps",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("agentgateway.dev/v1alpha1", "AgentgatewayBackend"): "agentgatewaybackends",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproutes",
    ("agentgateway.dev/v1alpha1", "AgentgatewayPolicy"): "agentgatewaypolicies",
}
