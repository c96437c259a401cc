"""Names the renderer and the operator share: labels, rendered objects, environment variables.

The wire vocabulary (headers, methods, paths) the gateway and the projector agree on lives one
floor down, in `fgentic_governance.retrieval.vocabulary`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from fgentic_governance.api import common
from fgentic_governance.api.common import GROUP

FIELD_MANAGER = "fgentic-governance"
BINDING_LABEL = f"{GROUP}/binding"
MANAGED_BY = common.MANAGED_BY
UNENFORCEABLE_ANNOTATION = f"{GROUP}/unenforceable"

# The rendered ConfigMap (proxy namespace) holding the projector's configuration, and its key.
PROJECTOR_CONFIG_SUFFIX = "projector"
PROJECTOR_CONFIG_KEY = "projector.json"
# The rendered ConfigMap (retrieval service namespace) holding the retrieval server's
# configuration (the chart's Deployment mounts it), and its key.
SERVER_CONFIG_SUFFIX = "retrieval-server"
SERVER_CONFIG_KEY = "retrieval-server.json"

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


# The kinds a binding renders: (apiVersion, kind) → plural, in apply order. The operator lists
# and prunes exactly these.
RENDERED_KINDS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "configmaps",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("agentgateway.dev/v1alpha1", "AgentgatewayBackend"): "agentgatewaybackends",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproutes",
    ("agentgateway.dev/v1alpha1", "AgentgatewayPolicy"): "agentgatewaypolicies",
}
