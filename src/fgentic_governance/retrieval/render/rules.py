"""The gateway rules of one RetrievalBinding, independent of the form they are written in.

Both the standalone config and the Kubernetes objects are printed from these `Route`s, so the
two forms cannot drift apart in what they enforce. Order of evaluation in agentgateway v1.3.1:
authentication (apiKey / jwtAuth, which strip the credential) → extAuthz → authorization →
requestHeaderModifier.
"""

from __future__ import annotations

from dataclasses import dataclass

from fgentic_governance.api.retrieval import A2aWire, RetrievalBindingSpec
from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.render import cel
from fgentic_governance.retrieval.render.names import ENV_AGENT_MCP_API_KEY, ENV_BRIDGE_API_KEY

LOCAL_TIMEOUT_SECONDS = 540
"""The bridge's outer retrieval deadline (ADR 0017 §12): 60 s inside the 600 s projection."""

# ADR rules no rendered object can enforce, by code, with the reason (status `unenforceable`,
# the standalone header comment and an annotation on every rendered object).
UNENFORCEABLE: dict[str, str] = {
    "AGENT_DIRECT_MODEL_PATH": (
        "the binding does not name the model endpoints, so Agent egress to models is not "
        "restricted here (ADR 0017 section 14)"),
    "NETWORKPOLICY_ENFORCEMENT": (
        "NetworkPolicies take effect only under an enforcing CNI, which no rendered object can "
        "prove (ADR 0017 section 14)"),
    "PUBLIC_NONTERMINAL_RESULT": (
        "the gateway cannot reject a nonterminal A2A result in a response body (ADR 0017 "
        "section 12)"),
}

# Where the rendered path departs from ADR 0017, by code, with the reason (status
# `deviations` and the standalone header comment).
DEVIATIONS: dict[str, str] = {
    "A2A_HOP_AGENT_SERVICE": (
        "the A2A routes go to the Agent's own Service, not kagent-controller's "
        "/api/a2a/<namespace>/<name>/ (ADR 0017 section 1): kagent v0.9.11's controller keeps "
        "only X-User-Id, Authorization and trace headers on that hop (kagent issue #1819), so "
        "X-Fgentic-Identity would never reach the runtime; a NetworkPolicy admits only the "
        "proxy to the Agent's pods"),
    "A2A_WIRE_0_3": (
        "the Agent's runtime speaks A2A 0.3 (kagent-adk 0.9.11, a2a-sdk 0.3): the routes admit "
        "message/send with A2A-Version absent or 0.3, where ADR 0017 names A2A 1.0 "
        "(SendMessage, A2A-Version 1.0)"),
    "NO_TASK_POLL": (
        "the local route admits no tasks/get or tasks/cancel (GetTask, CancelTask), which ADR "
        "0017 section 12 lets the bridge use: kagent's task store hands a task to whoever "
        "names its id, a partner's included, so the bridge's send is synchronous under the "
        "route's 540 s timeout instead (issue 38)"),
}


@dataclass(frozen=True)
class Endpoint:
    """An upstream Service; `key` lets the standalone form override its address."""

    key: str
    service: str
    namespace: str
    port: int


@dataclass(frozen=True)
class ApiKeyAuth:
    secret: str
    """Kubernetes Secret with the key (and `workload` metadata), in the proxy namespace."""
    env: str
    """Environment variable holding the key for the standalone form."""
    workload: str
    """The `workload` metadata value the authorization requires."""


@dataclass(frozen=True)
class JwtAuth:
    issuer: str
    audience: str
    jwks: str | None
    """The JWKS document for the Kubernetes form (read from `jwksConfigMap`)."""


@dataclass(frozen=True)
class ExtAuthz:
    endpoint: Endpoint
    path: str
    """CEL for the check request path (a literal: the projector's route)."""
    include_request_headers: tuple[str, ...]
    add_request_headers: tuple[tuple[str, str], ...]
    include_response_headers: tuple[str, ...]
    metadata: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class A2aBackend:
    endpoint: Endpoint
    rewrite_path: str


@dataclass(frozen=True)
class McpBackend:
    endpoint: Endpoint
    target: str
    path: str
    tool_rules: tuple[str, ...]
    """`require` rules of mcpAuthorization (tools/list is filtered by them too)."""


@dataclass(frozen=True)
class Route:
    key: str
    """local | public | mcp: object-name suffixes and standalone route names derive from it."""
    listener: str
    port: int
    tls: bool
    path: str
    method: str | None
    auth: ApiKeyAuth | JwtAuth
    ext_authz: ExtAuthz | None
    require: tuple[str, ...]
    remove_request_headers: tuple[str, ...]
    timeout_seconds: int | None
    backend: A2aBackend | McpBackend


@dataclass(frozen=True)
class GatewayRules:
    proxy_namespace: str
    gateway: str
    routes: tuple[Route, ...]
    unenforceable: tuple[str, ...]
    deviations: tuple[str, ...]


# Credentials have no business upstream once authentication is done: apiKey and jwtAuth strip
# the one they read, this removes every other copy and cookie (after authorization).
_NO_CREDENTIALS = ("authorization", "proxy-authorization", "cookie")

_PROJECTED = (("identity_projected", f"{cel.lit(n.IDENTITY)} in response.headers"),
              ("user_id_projected", f"{cel.lit(n.USER_ID)} in response.headers"))
# Set only from the projector's own response: a forged incoming X-Fgentic-Identity that the
# projector failed to overwrite cannot satisfy these (defence in depth).
_WAS_PROJECTED = "extauthz.identity_projected == true && extauthz.user_id_projected == true"


def wire(spec: RetrievalBindingSpec) -> n.Wire:
    return n.WIRES[spec.kagent.a2a_version]


def _common_check_headers(spec: RetrievalBindingSpec) -> list[tuple[str, str]]:
    agent = f"{spec.agent.namespace}/{spec.agent.name}"
    return [(n.CHECK_AGENT, cel.lit(agent)),
            (n.CHECK_HTTP_METHOD, "request.method"),
            (n.CHECK_PATH, "request.path"),
            (n.CHECK_A2A_METHOD, f"{cel.BODY}.method")]


def _projector(spec: RetrievalBindingSpec) -> Endpoint:
    return Endpoint("projector", spec.projector.service, spec.proxy.namespace,
                    spec.projector.port)


def _a2a_backend(spec: RetrievalBindingSpec) -> A2aBackend:
    """The Agent's own Service, named after the Agent (see ``DEVIATIONS``)."""
    agent = spec.agent
    return A2aBackend(Endpoint("kagent", agent.name, agent.namespace, spec.kagent.port),
                      n.AGENT_A2A_PATH)


def _request_shape(spec: RetrievalBindingSpec, path: str) -> list[str]:
    return ["request.method == \"POST\"", f"request.path == {cel.lit(path)}",
            cel.one_of(n.A2A_VERSION_HEADER, wire(spec).versions,
                       optional=wire(spec).version_optional)]


def local_route(spec: RetrievalBindingSpec) -> Route:
    """The bridge's route: API key, then the projector; the wire's send only.

    No GetTask or CancelTask (issue 38 §4), although ADR 0017 §12 lets the bridge poll and
    cancel: kagent's task store loads and deletes a task by its id alone, whoever asks (the
    reason §12 gives for removing both from the public route), so a poll here would hand the
    bridge any task whose id it holds, a partner's included, grounded in chunks no Matrix
    projection may read. Nothing on this path can tell whose task an id names (the gateway
    never reads the answer, the projector never sees it), so neither is admitted: two clients
    cannot reach one context or task. The bridge's send is synchronous under the route's
    540 s timeout; at its deadline the bridge abandons the request and delivers nothing."""
    path = n.agent_route_path(spec.agent.namespace, spec.agent.name)
    bridge = spec.bridge_identity
    workload = f"serviceaccount:{bridge.namespace}/{bridge.service_account}"
    a2a = wire(spec)
    check = [*_common_check_headers(spec),
             (n.CHECK_WORKLOAD, "apiKey.workload"),
             # extAuthz forwards only the first value of a repeated header, so the counts are
             # computed here, from the original request; the projector requires exactly "1".
             (n.CHECK_USER_ID_COUNT, cel.count(n.USER_ID)),
             (n.CHECK_ROOM_CONTEXT_COUNT, cel.count(n.ROOM_CONTEXT))]
    require = [
        f"apiKey.workload == {cel.lit(workload)}",
        *_request_shape(spec, path),
        cel.body_method_is(a2a.send),  # no poll or cancel (see above)
        cel.no_task_references(),
        _WAS_PROJECTED,
        cel.exactly_one(n.IDENTITY),
        cel.exactly_one(n.USER_ID),
        cel.exactly_one(n.ROOM_CONTEXT),
        cel.only_reserved(n.RESERVED_PREFIX, (n.IDENTITY, n.ROOM_CONTEXT)),
    ]
    ext = ExtAuthz(
        endpoint=_projector(spec), path=cel.lit(n.PROJECT_LOCAL_PATH),
        include_request_headers=(n.USER_ID, n.ROOM_CONTEXT, n.A2A_VERSION_HEADER),
        add_request_headers=tuple(check), include_response_headers=(n.IDENTITY, n.USER_ID),
        metadata=_PROJECTED)
    return Route(
        key="local", listener=spec.gateway.listeners.local, port=spec.proxy.port, tls=False,
        path=path, method="POST",
        auth=ApiKeyAuth(bridge.api_key_secret, ENV_BRIDGE_API_KEY, workload),
        ext_authz=ext, require=tuple(require),
        remove_request_headers=(n.ROOM_CONTEXT, *_NO_CREDENTIALS),
        timeout_seconds=LOCAL_TIMEOUT_SECONDS, backend=_a2a_backend(spec))


def public_route(spec: RetrievalBindingSpec, jwks: str | None) -> Route | None:
    """The partner route: strict JWT, then the projector; synchronous SendMessage only."""
    public = spec.public_route
    if public is None:
        return None
    path = n.agent_route_path(spec.agent.namespace, spec.agent.name)
    timeout = public.public_retrieval_timeout_seconds
    a2a = wire(spec)
    check = [*_common_check_headers(spec),
             (n.CHECK_ISSUER, "jwt.iss"),
             (n.CHECK_AUDIENCE, cel.lit(public.audience)),  # the one configured (matched) aud
             (n.CHECK_AZP, "jwt.azp"),
             (n.CHECK_TOKEN_EXP, "string(jwt.exp)"),
             (n.CHECK_TIMEOUT, cel.lit(str(timeout)))]
    require = [
        f"jwt.iss == {cel.lit(public.issuer)}",
        f"jwt.azp in {cel.lit_list(sorted(p.azp for p in public.partners))}",
        *_request_shape(spec, path),
        cel.body_method_is(a2a.send),  # no poll or cancel on the public route
        cel.no_task_references(),
        cel.synchronous(*a2a.immediate),
        _WAS_PROJECTED,
        cel.exactly_one(n.IDENTITY),
        cel.exactly_one(n.USER_ID),
        cel.only_reserved(n.RESERVED_PREFIX, (n.IDENTITY,)),
    ]
    ext = ExtAuthz(
        endpoint=_projector(spec), path=cel.lit(n.PROJECT_PUBLIC_PATH),
        # Caller headers carry no authority here; the list must still be non-empty, or the
        # HTTP check would forward Authorization.
        include_request_headers=(n.A2A_VERSION_HEADER,),
        add_request_headers=tuple(check), include_response_headers=(n.IDENTITY, n.USER_ID),
        metadata=_PROJECTED)
    return Route(
        key="public", listener=spec.gateway.listeners.public, port=spec.gateway.public_port,
        tls=True, path=path, method="POST",
        auth=JwtAuth(public.issuer, public.audience, jwks), ext_authz=ext,
        require=tuple(require), remove_request_headers=(n.ROOM_CONTEXT, *_NO_CREDENTIALS),
        timeout_seconds=timeout, backend=_a2a_backend(spec))


def mcp_route(spec: RetrievalBindingSpec) -> Route:
    """The Agent's MCP route: API key, exactly one carrier, one tool. No second ext-authz hop
    (ADR 0017 §13: it could not authenticate a value forged by the admitted Agent pod)."""
    server, service = spec.mcp_server, spec.retrieval_service
    workload = f"agent:{spec.agent.namespace}/{spec.agent.name}"
    version_header, version = n.MCP_PROTOCOL_VERSION
    initialize = cel.all_of(
        "request.method == \"POST\"", cel.body_method_is("initialize"),
        f"{cel.BODY}.params.protocolVersion == {cel.lit(version)}",
        f"!({cel.lit(version_header)} in request.headers)")
    require = [
        f"apiKey.workload == {cel.lit(workload)}",
        cel.exactly_one(n.IDENTITY),
        cel.only_reserved(n.RESERVED_PREFIX, (n.IDENTITY,)),
        # Every request after initialize carries exactly the negotiated 2025-11-25 revision.
        f"{cel.exactly(version_header, version)} || ({initialize})",
    ]
    endpoint = Endpoint("retrieval", service.service, service.namespace,
                        service.service_port or service.port)
    backend = McpBackend(endpoint, target=server.name, path=service.mcp_path,
                         tool_rules=(f"mcp.tool.name == {cel.lit(server.tool)}",))
    return Route(
        key="mcp", listener=spec.gateway.listeners.mcp, port=spec.gateway.mcp_port, tls=False,
        path=server.path, method=None,
        auth=ApiKeyAuth(server.api_key_secret, ENV_AGENT_MCP_API_KEY, workload),
        ext_authz=None, require=tuple(require), remove_request_headers=_NO_CREDENTIALS,
        timeout_seconds=None, backend=backend)


def gateway_rules(spec: RetrievalBindingSpec, jwks: str | None = None) -> GatewayRules:
    public = public_route(spec, jwks)
    routes = (local_route(spec), *([public] if public else []), mcp_route(spec))
    codes = [c for c in UNENFORCEABLE if c != "PUBLIC_NONTERMINAL_RESULT" or public]
    deviations = ["A2A_HOP_AGENT_SERVICE",
                  *(["A2A_WIRE_0_3"] if spec.kagent.a2a_version is A2aWire.V0_3 else []),
                  "NO_TASK_POLL"]
    return GatewayRules(spec.proxy.namespace, spec.gateway.name, routes, tuple(codes),
                        tuple(deviations))
