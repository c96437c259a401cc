"""The standalone form of the gateway rules: one agentgateway v1.3.1 config file (validated in
tests against the release's schema/config.json and by the real binary).

agentgateway shell-expands the whole file before parsing it, so credentials and file paths are
written as `${VAR}` references and any other `$` in a value is refused (it would be expanded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fgentic_governance.retrieval.render import names as n
from fgentic_governance.retrieval.render.rules import (
    A2aBackend,
    ApiKeyAuth,
    Endpoint,
    ExtAuthz,
    GatewayRules,
    JwtAuth,
    McpBackend,
    Route,
)


class StandaloneFormError(ValueError):
    """The binding cannot be written as a standalone config."""


def _env(name: str) -> str:
    return "${" + name + "}"


def _address(endpoint: Endpoint, cluster_domain: str, hosts: Mapping[str, str]) -> str:
    if endpoint.key in hosts:
        return hosts[endpoint.key]
    return f"{n.service_host(endpoint.service, endpoint.namespace, cluster_domain)}:{endpoint.port}"


def _authentication(route: Route) -> dict[str, Any]:
    auth = route.auth
    if isinstance(auth, ApiKeyAuth):
        # mode defaults to optional in v1.3.1, which would admit requests without a key.
        return {"apiKey": {"mode": "strict", "keys": [
            {"key": _env(auth.env), "metadata": {"workload": auth.workload}}]}}
    assert isinstance(auth, JwtAuth)
    return {"jwtAuth": {"mode": "strict", "issuer": auth.issuer, "audiences": [auth.audience],
                        "jwks": {"file": _env(n.ENV_PUBLIC_JWKS_FILE)}}}


def _ext_authz(ext: ExtAuthz, cluster_domain: str, hosts: Mapping[str, str]) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "host": _address(ext.endpoint, cluster_domain, hosts),
        "failureMode": "deny",
        # Never empty: an HTTP check without a list forwards Authorization.
        "includeRequestHeaders": list(ext.include_request_headers),
        "protocol": {"http": {
            "path": ext.path,
            "addRequestHeaders": dict(ext.add_request_headers),
            "includeResponseHeaders": list(ext.include_response_headers),
            "metadata": dict(ext.metadata),
        }},
    }
    return policy


def _backend(route: Route, cluster_domain: str, hosts: Mapping[str, str]) -> dict[str, Any]:
    backend = route.backend
    if isinstance(backend, A2aBackend):
        return {"host": _address(backend.endpoint, cluster_domain, hosts)}
    address = _address(backend.endpoint, cluster_domain, hosts)
    host, _, port = address.rpartition(":")
    # Stateless: v1.3.1 serves a stateful session id replayed on another route by the issuing
    # route's backend under that other route's policy (GHSA-mvgg-jvj2-4frq, fixed in v1.4.0).
    # Stateless, no id is issued here and an id from elsewhere is ignored (never sent on to the
    # backend that issued it); the server keeps no session either.
    return {"mcp": {"statefulMode": "stateless", "targets": [{"name": backend.target, "mcp": {
        "host": host, "port": int(port), "path": backend.path}}]}}


def _route(binding: n.BindingId, route: Route, cluster_domain: str,
           hosts: Mapping[str, str]) -> dict[str, Any]:
    match: dict[str, Any] = {"path": {"exact": route.path}}
    if route.method:
        match["method"] = route.method
    policies: dict[str, Any] = _authentication(route)
    if route.ext_authz is not None:
        policies["extAuthz"] = _ext_authz(route.ext_authz, cluster_domain, hosts)
    policies["authorization"] = {"rules": [{"require": r} for r in route.require]}
    if route.remove_request_headers:
        policies["requestHeaderModifier"] = {"remove": list(route.remove_request_headers)}
    if isinstance(route.backend, A2aBackend):
        policies["a2a"] = {}
        policies["urlRewrite"] = {"path": {"full": route.backend.rewrite_path}}
    else:
        assert isinstance(route.backend, McpBackend)
        policies["mcpAuthorization"] = {"rules": [{"require": r}
                                                  for r in route.backend.tool_rules]}
    if route.timeout_seconds:
        policies["timeout"] = {"requestTimeout": f"{route.timeout_seconds}s"}
    return {"name": binding.object_name(route.key), "matches": [match], "policies": policies,
            "backends": [_backend(route, cluster_domain, hosts)]}


def _listener(binding: n.BindingId, route: Route, cluster_domain: str,
              hosts: Mapping[str, str]) -> dict[str, Any]:
    listener: dict[str, Any] = {"name": route.listener,
                                "protocol": "HTTPS" if route.tls else "HTTP"}
    if route.tls:
        listener["tls"] = {"cert": _env(n.ENV_PUBLIC_TLS_CERT), "key": _env(n.ENV_PUBLIC_TLS_KEY)}
    listener["routes"] = [_route(binding, route, cluster_domain, hosts)]
    return listener


def standalone_config(binding: n.BindingId, rules: GatewayRules, cluster_domain: str,
                      hosts: Mapping[str, str]) -> dict[str, Any]:
    """The config as data (one bind per route: the listeners sit on distinct ports)."""
    config = {"binds": [{"port": r.port, "listeners": [_listener(binding, r, cluster_domain,
                                                                 hosts)]}
                        for r in rules.routes]}
    _refuse_dollars(config)
    return config


def _refuse_dollars(node: Any) -> None:
    if isinstance(node, dict):
        for value in node.values():
            _refuse_dollars(value)
    elif isinstance(node, list):
        for value in node:
            _refuse_dollars(value)
    elif isinstance(node, str) and "$" in node.replace("${", ""):
        raise StandaloneFormError("a value contains '$', which agentgateway would expand")


def header_comment(binding: n.BindingId, unenforceable: Mapping[str, str],
                   deviations: Mapping[str, str], config_digest: str) -> str:
    env = (n.ENV_BRIDGE_API_KEY, n.ENV_AGENT_MCP_API_KEY, n.ENV_PUBLIC_JWKS_FILE,
           n.ENV_PUBLIC_TLS_CERT, n.ENV_PUBLIC_TLS_KEY)
    lines = [
        f"agentgateway v1.3.1 standalone config for RetrievalBinding "
        f"{binding.namespace}/{binding.name}, rendered by fgentic-governance.",
        f"Config digest (SHA-256 of the RFC 8785 JCS of this document): {config_digest}",
        "Reads from the environment: " + ", ".join(env) + " (public ones only with a public "
        "route).",
        "Route order in v1.3.1: authentication, extAuthz, authorization, requestHeaderModifier.",
        "ADR 0017 rules this config cannot enforce (status.unenforceable):",
        *(f"  {code}: {why}" for code, why in unenforceable.items()),
        "Where this path departs from ADR 0017 (status.deviations):",
        *(f"  {code}: {why}" for code, why in deviations.items()),
    ]
    return "".join(f"# {line}\n" for line in lines)
