"""The Kubernetes form of the gateway rules: AgentgatewayBackends, HTTPRoutes and
AgentgatewayPolicies (agentgateway v1.3.1 CRDs, Gateway API v1.6.0), all in the proxy namespace.

A policy targets one HTTPRoute, so each route's authentication, extAuth, authorization and
header removal live in one object; the MCP tool allowlist is a backend policy on the MCP
AgentgatewayBackend.
"""

from __future__ import annotations

from typing import Any

from fgentic_governance.retrieval.render.names import BindingId, service_host
from fgentic_governance.retrieval.render.rules import (
    A2aBackend,
    ApiKeyAuth,
    ExtAuthz,
    GatewayRules,
    JwtAuth,
    McpBackend,
    Route,
)

AGW = "agentgateway.dev/v1alpha1"
GATEWAY_API_GROUP = "gateway.networking.k8s.io"
EMPTY_JWKS = '{"keys":[]}'
"""Inline JWKS when none was supplied: no token verifies, so the public route fails closed."""
MAX_ISSUER = 256
"""agentgateway's CRD bounds `jwtAuthentication.providers[].issuer` at 256 characters."""


class KubernetesFormError(ValueError):
    """The binding cannot be written as agentgateway v1.3.1 Kubernetes objects."""


def _object(kind: str, api_version: str, name: str, namespace: str,
            spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _backend(binding: BindingId, route: Route, namespace: str,
             cluster_domain: str) -> dict[str, Any]:
    backend = route.backend
    ep = backend.endpoint
    host = service_host(ep.service, ep.namespace, cluster_domain)
    if isinstance(backend, A2aBackend):
        spec: dict[str, Any] = {"a2a": {"host": host, "port": ep.port}}
    else:
        # Stateless, as in the standalone form (GHSA-mvgg-jvj2-4frq: a stateful session id
        # replayed on another route reaches this backend under that route's policy).
        spec = {"mcp": {"failureMode": "FailClosed", "sessionRouting": "Stateless", "targets": [{
            "name": backend.target,
            "static": {"host": host, "port": ep.port, "path": backend.path,
                       "protocol": "StreamableHTTP"}}]}}
    return _object("AgentgatewayBackend", AGW, _backend_name(binding, route), namespace, spec)


def _backend_name(binding: BindingId, route: Route) -> str:
    # The local and public A2A routes share one kagent backend.
    return binding.object_name("mcp" if isinstance(route.backend, McpBackend) else "a2a")


def _http_route(binding: BindingId, route: Route, rules: GatewayRules) -> dict[str, Any]:
    match: dict[str, Any] = {"path": {"type": "Exact", "value": route.path}}
    if route.method:
        match["method"] = route.method
    rule: dict[str, Any] = {
        "matches": [match],
        "backendRefs": [{"group": "agentgateway.dev", "kind": "AgentgatewayBackend",
                         "name": _backend_name(binding, route)}],
    }
    if isinstance(route.backend, A2aBackend):
        rule["filters"] = [{"type": "URLRewrite", "urlRewrite": {"path": {
            "type": "ReplaceFullPath", "replaceFullPath": route.backend.rewrite_path}}}]
    if route.timeout_seconds:
        # Started when the gateway receives the request (ADR 0017 §12: ingress-started).
        rule["timeouts"] = {"request": f"{route.timeout_seconds}s"}
    return _object("HTTPRoute", f"{GATEWAY_API_GROUP}/v1", binding.object_name(route.key),
                   rules.proxy_namespace, {
                       "parentRefs": [{"group": GATEWAY_API_GROUP, "kind": "Gateway",
                                       "name": rules.gateway, "sectionName": route.listener}],
                       "rules": [rule]})


def _ext_auth(ext: ExtAuthz) -> dict[str, Any]:
    policy = {
        "backendRef": {"group": "", "kind": "Service", "name": ext.endpoint.service,
                       "port": ext.endpoint.port},
        "failureMode": "FailClosed",
        "http": {
            "path": ext.path,
            "allowedRequestHeaders": list(ext.include_request_headers),
            "addRequestHeaders": dict(ext.add_request_headers),
            "allowedResponseHeaders": list(ext.include_response_headers),
            "responseMetadata": dict(ext.metadata),
        },
    }
    return policy


def _authentication(route: Route) -> dict[str, Any]:
    auth = route.auth
    if isinstance(auth, ApiKeyAuth):
        # Strict explicitly: the standalone default is optional, which admits keyless calls.
        return {"apiKeyAuthentication": {"mode": "Strict", "secretRef": {"name": auth.secret}}}
    assert isinstance(auth, JwtAuth)
    if len(auth.issuer) > MAX_ISSUER:
        raise KubernetesFormError("publicRoute.issuer exceeds the CRD's 256 characters")
    return {"jwtAuthentication": {"mode": "Strict", "providers": [{
        "issuer": auth.issuer, "audiences": [auth.audience],
        "jwks": {"inline": auth.jwks or EMPTY_JWKS}}]}}


def _traffic_policy(binding: BindingId, route: Route, rules: GatewayRules) -> dict[str, Any]:
    traffic: dict[str, Any] = _authentication(route)
    if route.ext_authz is not None:
        traffic["extAuth"] = _ext_auth(route.ext_authz)
    # Require: every expression must hold (Allow would OR them).
    traffic["authorization"] = {"action": "Require",
                                "policy": {"matchExpressions": list(route.require)}}
    if route.remove_request_headers:
        traffic["headerModifiers"] = {"request": {"remove": list(route.remove_request_headers)}}
    return _object("AgentgatewayPolicy", AGW, binding.object_name(route.key),
                   rules.proxy_namespace, {
                       "targetRefs": [{"group": GATEWAY_API_GROUP, "kind": "HTTPRoute",
                                       "name": binding.object_name(route.key)}],
                       "traffic": traffic})


def _mcp_policy(binding: BindingId, route: Route, rules: GatewayRules) -> dict[str, Any]:
    assert isinstance(route.backend, McpBackend)
    return _object("AgentgatewayPolicy", AGW, binding.object_name(f"{route.key}-tools"),
                   rules.proxy_namespace, {
                       "targetRefs": [{"group": "agentgateway.dev",
                                       "kind": "AgentgatewayBackend",
                                       "name": _backend_name(binding, route)}],
                       "backend": {"mcp": {"authorization": {
                           "action": "Require",
                           "policy": {"matchExpressions": list(route.backend.tool_rules)}}}}})


def gateway_objects(binding: BindingId, rules: GatewayRules,
                    cluster_domain: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    seen_backends: set[str] = set()
    for route in rules.routes:
        backend = _backend(binding, route, rules.proxy_namespace, cluster_domain)
        if backend["metadata"]["name"] not in seen_backends:
            seen_backends.add(backend["metadata"]["name"])
            objects.append(backend)
        objects.append(_http_route(binding, route, rules))
        objects.append(_traffic_policy(binding, route, rules))
        if isinstance(route.backend, McpBackend):
            objects.append(_mcp_policy(binding, route, rules))
    return objects
