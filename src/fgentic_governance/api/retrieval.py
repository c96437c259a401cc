"""RetrievalBinding (ADR 0017): one retrieval Agent bound to one RemoteMCPServer tool."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StrictInt

from fgentic_governance.api.appservice import AppserviceNamespace
from fgentic_governance.api.common import (
    AgentRef,
    Conditions,
    DnsLabel,
    Model,
    ReasonCode,
    cel,
    immutable,
    validations,
)

LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_KEY = r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
LabelKey = Annotated[str, Field(max_length=253, pattern=LABEL_KEY)]
Selector = Annotated[
    dict[LabelKey, Annotated[LabelValue, Field(description="The label's value.")]],
    Field(min_length=1, max_length=16,
          json_schema_extra=validations(cel("size(self) >= 1", "a selector must not be empty"))),
]
Port = Annotated[StrictInt, Field(ge=1, le=65535)]
ToolName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")]
Classification = Literal["public", "approved_non_public"]


class ClassificationCeiling(StrEnum):
    """Highest corpus classification the binding may ever project."""

    PUBLIC = "public"
    APPROVED_NON_PUBLIC = "approved_non_public"


HttpPath = Annotated[str, Field(max_length=256, pattern=r"^/[A-Za-z0-9/_.-]*$")]


class McpServerRef(Model):
    """The exact RemoteMCPServer and the one tool it may serve."""

    api_group: Literal["kagent.dev"] = "kagent.dev"
    """API group of the server; only kagent.dev."""
    kind: Literal["RemoteMCPServer"] = "RemoteMCPServer"
    """Kind of the server; only RemoteMCPServer."""
    namespace: DnsLabel
    """Namespace of the RemoteMCPServer."""
    name: DnsLabel
    """Name of the RemoteMCPServer; the Agent must list its tool."""
    tool: ToolName
    """The single tool the retrieval Agent may list and call."""
    path: HttpPath = "/mcp"
    """Exact MCP path on the gateway."""
    api_key_secret: DnsLabel = "fgentic-retrieval-agent-api-keys"
    """Secret (in the proxy namespace) with the Agent's MCP API key; its metadata must carry
    `workload: agent:<namespace>/<name>` of this binding's Agent."""


class Workload(Model):
    """Pods selected by labels in one namespace, reached on one port."""

    namespace: DnsLabel
    """Namespace of the pods."""
    selector: Selector
    """Labels the pods carry (1 to 16, all must match)."""
    port: Port
    """TCP port the pods are reached on."""


class RetrievalService(Workload):
    """The knowledge-retrieval pods and the Service the MCP backend reaches them by."""

    service: DnsLabel = "knowledge-retrieval"
    """Service name in the same namespace."""
    service_port: Port | None = None
    """Service port; defaults to the pods' port."""
    mcp_path: HttpPath = "/mcp"
    """The service's own Streamable HTTP MCP path."""


class WorkloadIdentity(Model):
    """A Kubernetes workload identity: its ServiceAccount."""

    namespace: DnsLabel
    """Namespace of the ServiceAccount."""
    service_account: DnsLabel
    """Name of the ServiceAccount the workload runs as."""
    api_key_secret: DnsLabel = "fgentic-bridge-api-keys"
    """Secret (in the proxy namespace) with the bridge's A2A API key; its metadata must carry
    `workload: serviceaccount:<namespace>/<serviceAccount>`."""


class A2aWire(StrEnum):
    """The A2A version an Agent's runtime speaks."""

    V0_3 = "0.3"
    """kagent-adk 0.9.11 (a2a-sdk 0.3): message/send, tasks/get, tasks/cancel."""
    V1_0 = "1.0"
    """A runtime on a2a-sdk 1.x: SendMessage, GetTask, CancelTask with A2A-Version 1.0."""


class KagentEndpoint(Model):
    """Where the gateway sends the retrieval Agent's A2A requests: the Service kagent creates for
    the Agent (named after it, in its namespace), which is the URL kagent's controller itself
    forwards to. Not the controller's /api/a2a/<namespace>/<name>/: in kagent v0.9.11 that hop
    keeps only X-User-Id, Authorization and trace headers (kagent issue #1819), so
    X-Fgentic-Identity would never reach the runtime (status.deviations says so)."""

    port: Port = 8080
    """The Agent Service's port (kagent v0.9.11: 8080)."""
    a2a_version: Annotated[A2aWire, Field(alias="a2aVersion")] = A2aWire.V0_3
    """The A2A version the Agent's runtime speaks; the routes admit that wire's methods and
    A2A-Version rule only. Set 1.0 once the runtime runs on a2a-sdk 1.x."""


class Projector(Model):
    """The identity projector (HTTP ext-authz): a Service in the proxy namespace."""

    service: DnsLabel = "fgentic-identity-projector"
    """Service name of the projector, in the proxy namespace."""
    port: Port = 9090
    """Port of the projector Service."""


class GatewayListeners(Model):
    """Listener names (Gateway sectionNames) of the three routes."""

    local: DnsLabel = "local-a2a"
    """The bridge's A2A listener; its port is `proxy.port`."""
    public: DnsLabel = "public-a2a"
    """The partners' public A2A listener; its port is `gateway.publicPort`."""
    mcp: DnsLabel = "mcp"
    """The retrieval Agent's MCP listener; its port is `gateway.mcpPort`."""


class GatewaySpec(Model):
    """The agentgateway Gateway (in the proxy namespace) the rendered routes attach to."""

    name: DnsLabel = "agentgateway"
    """Name of the Gateway, in the proxy namespace."""
    listeners: GatewayListeners = GatewayListeners()
    mcp_port: Port = 8090
    """Port of the MCP listener (the standalone form binds it)."""
    public_port: Port = 8443
    """Port of the public A2A listener (the standalone form binds it with TLS)."""


class PartnerEntry(Model):
    """One operator registry entry keyed by (issuer, audience, azp)."""

    azp: Annotated[str, Field(min_length=1, max_length=255)]
    """The partner's OAuth client ID (the JWT's azp claim); unique in the registry."""
    policy_id: DnsLabel
    """The partner's policy ID (see groups); unique in the registry."""
    groups: Annotated[
        list[Annotated[DnsLabel, Field(description="A group ID.")]],
        Field(min_length=1, max_length=16, json_schema_extra={"x-kubernetes-list-type": "set"}),
    ]
    """Group IDs; projected as `partner/<policyId>/<group>`."""
    allowed_classifications: Annotated[
        list[Annotated[Classification, Field(description="A corpus classification.")]],
        Field(min_length=1, max_length=2, json_schema_extra={"x-kubernetes-list-type": "set"}),
    ] = ["public"]
    """Corpus classifications the partner's projections allow: public (the default), or also
    approved_non_public, which implies public and needs classificationCeiling
    approved_non_public."""


class PublicRoute(Model):
    """The public cross-organization A2A route, authenticated by JWT."""

    issuer: Annotated[str, Field(min_length=1, max_length=512, pattern=r"^https://")]
    """The JWT issuer (an https URL) the route accepts."""
    audience: Annotated[str, Field(min_length=1, max_length=255)]
    """The one JWT audience the route accepts."""
    jwks_config_map: DnsLabel
    """ConfigMap (in the proxy namespace) holding the issuer's public JWKS under key
    `jwks.json`. Public key material: a ConfigMap, so the operator needs no Secret access."""
    public_retrieval_timeout_seconds: Annotated[StrictInt, Field(ge=1, le=60)] = 30
    """The gateway's request timeout on the public route, in seconds (1 to 60)."""
    partners: Annotated[
        list[PartnerEntry],
        Field(min_length=1, max_length=64, json_schema_extra={
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["azp"]}),
    ]
    """The partner registry, one entry per azp (1 to 64)."""


class Peers(Model):
    """What the retrieval service may reach besides DNS."""

    database: Workload
    """The retrieval service's database pods; they admit ingress only from it."""
    embeddings: Workload
    """The query-embeddings listener's pods, which the retrieval service may reach."""
    observability: Annotated[list[Workload], Field(max_length=8)] = []
    """Observability sinks the retrieval service may send to (at most 8)."""


class RetrievalBindingSpec(Model):
    """One retrieval Agent bound to one RemoteMCPServer tool, behind the gateway (ADR 0017).

    The operator renders NetworkPolicies, agentgateway routes and the projector's
    configuration from it.
    """

    agent: Annotated[AgentRef, Field(json_schema_extra=immutable("agent"))]
    """The retrieval Agent; immutable. One binding per Agent (later ones report Conflict)."""
    mcp_server: McpServerRef
    retrieval_service: RetrievalService
    peers: Peers
    """What the retrieval service may reach besides DNS."""
    proxy: Workload
    """The agentgateway proxy pods; port is the local A2A listener (the bridge's)."""
    gateway: GatewaySpec = GatewaySpec()
    projector: Projector = Projector()
    kagent: KagentEndpoint = KagentEndpoint()
    """Where the gateway sends the Agent's A2A requests: the Service kagent creates for the
    Agent, not kagent's controller (see status.deviations)."""
    bridge_identity: WorkloadIdentity
    """The Matrix bridge's workload identity, the only caller of the local A2A route."""
    appservice_namespaces: Annotated[
        list[AppserviceNamespace],
        Field(max_length=64, json_schema_extra={
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["network"]}),
    ] = []
    """Deprecated: the projector classifies senders from the operator's appservice-namespace
    registry (chart appserviceNamespaces); an entry here must be one of it, or the rendering
    fails."""
    public_route: PublicRoute | None = None
    """The partners' public A2A route, authenticated by JWT; absent: no public route."""
    classification_ceiling: ClassificationCeiling = ClassificationCeiling.PUBLIC


class RetrievalBindingStatus(Model):
    """Content-free status: the rendering's digest and counts, reported codes, conditions."""

    rendered_digest: Annotated[str, Field(max_length=64, pattern=r"^[0-9a-f]{64}$")] | None = None
    """SHA-256 of the JCS encoding of the rendered object set."""
    rendered_objects: Annotated[int, Field(ge=0)] = 0
    """Objects applied from the rendering; 0 unless it was applied."""
    unenforceable: Annotated[
        list[Annotated[ReasonCode, Field(description="An unenforceable rule's code.")]],
        Field(max_length=16)] = []
    """ADR rules the gateway cannot express, by code."""
    deviations: Annotated[
        list[Annotated[ReasonCode, Field(description="A deviation's code.")]],
        Field(max_length=16)] = []
    """Where the rendered path departs from ADR 0017, by code (docs/retrieval-rendering.md)."""
    conditions: Conditions = []
    """Conditions Valid, Rendered, Applied, Conflict and Ready (Ready also needs the Agent to
    exist and list the tool)."""
    observed_generation: Annotated[int, Field(ge=0)] = 0
    """The metadata.generation the operator last reconciled."""
