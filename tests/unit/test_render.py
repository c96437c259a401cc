"""The RetrievalBinding renderer (ADR 0017): properties of both forms, checked as data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
import rfc8785

from fgentic_devenv.binaries import upstream_dir
from fgentic_governance.cli import main
from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.projector_config import (
    ProjectorConfig,
    dump_config,
    parse_config,
)
from fgentic_governance.retrieval.render import ownership
from fgentic_governance.retrieval.render.binding import (
    Rendered,
    RenderError,
    RenderOptions,
    digest,
    render,
    validate_jwks,
)
from fgentic_governance.retrieval.render.names import UNENFORCEABLE_ANNOTATION, BindingId
from fgentic_governance.retrieval.render.rules import UNENFORCEABLE
from tests.support.appservice import flag, puppet, telegram
from tests.support.objects import example
from tests.support.render import JWKS, binding, rendered

FORBIDDEN_TO_PROJECTOR = {"authorization", "proxy-authorization", "cookie", n.IDENTITY}


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in a nested document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def of_kind(r: Rendered, kind: str) -> list[dict[str, Any]]:
    return [o for o in r.objects if o["kind"] == kind]


def standalone_routes(r: Rendered) -> dict[str, dict[str, Any]]:
    routes = [route for bind in r.standalone["binds"] for listener in bind["listeners"]
              for route in listener["routes"]]
    return {route["name"].rsplit(".", 1)[1]: route for route in routes}


def k8s_policy(r: Rendered, key: str) -> dict[str, Any]:
    name = BindingId("fgentic-demo", "docs-agent-retrieval").object_name(key)
    return next(o for o in of_kind(r, "AgentgatewayPolicy") if o["metadata"]["name"] == name)


def ext_authz_blocks(r: Rendered) -> list[tuple[list[str], dict[str, Any], list[str]]]:
    """(request allowlist, CEL-added headers, response headers) of every ext-authz, both
    forms."""
    blocks = []
    for route in standalone_routes(r).values():
        ext = route["policies"].get("extAuthz")
        for entry in [ext] if ext else []:
            http = entry["protocol"]["http"]
            blocks.append((entry["includeRequestHeaders"], http["addRequestHeaders"],
                           http["includeResponseHeaders"]))
    for policy in of_kind(r, "AgentgatewayPolicy"):
        ext = policy["spec"].get("traffic", {}).get("extAuth")
        for entry in [ext] if ext else []:
            http = entry["http"]
            blocks.append((http["allowedRequestHeaders"], http["addRequestHeaders"],
                           http["allowedResponseHeaders"]))
    return blocks


# -- standalone schema ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def config_schema() -> jsonschema.Draft202012Validator:
    path = upstream_dir() / "agentgateway-v1.3.1" / "schema" / "config.json"
    return jsonschema.Draft202012Validator(json.loads(path.read_text()))


@pytest.mark.parametrize("public", [True, False])
def test_standalone_config_validates_against_the_release_schema(
    config_schema: jsonschema.Draft202012Validator, public: bool
) -> None:
    r = rendered() if public else rendered(publicRoute=None)
    errors = [f"{list(e.absolute_path)}: {e.message[:200]}"
              for e in config_schema.iter_errors(r.standalone)]
    assert errors == []


# -- ext-authz -----------------------------------------------------------------------------


def test_every_ext_authz_has_an_explicit_allowlist_without_credentials_or_identity() -> None:
    blocks = ext_authz_blocks(rendered())
    assert len(blocks) == 4  # local + public, both forms
    for allowlist, added, _ in blocks:
        assert allowlist, "an empty list would forward Authorization"
        assert not FORBIDDEN_TO_PROJECTOR & {h.lower() for h in allowlist}
        assert not FORBIDDEN_TO_PROJECTOR & {h.lower() for h in added}
        assert all(h.startswith("x-fgentic-authz-") for h in added)


def test_projector_response_headers_are_exactly_identity_and_user_id() -> None:
    for _, _, response in ext_authz_blocks(rendered()):
        assert response == [n.IDENTITY, n.USER_ID]


def test_local_check_carries_value_counts_from_the_original_request() -> None:
    local = standalone_routes(rendered())["local"]["policies"]["extAuthz"]
    added = local["protocol"]["http"]["addRequestHeaders"]
    assert added[n.CHECK_USER_ID_COUNT] == 'string(size(request.headers.raw()["x-user-id"]))'
    assert added[n.CHECK_ROOM_CONTEXT_COUNT] == (
        'string(size(request.headers.raw()["x-fgentic-room-context"]))')
    assert added[n.CHECK_WORKLOAD] == "apiKey.workload"
    assert "conditional" not in local  # every local request is checked (issue 38 §4)
    assert local["failureMode"] == "deny"


def test_public_check_carries_validated_jwt_metadata_and_the_timeout() -> None:
    r = rendered(publicRoute={**example("RetrievalBinding")["spec"]["publicRoute"],
                              "publicRetrievalTimeoutSeconds": 17})
    http = standalone_routes(r)["public"]["policies"]["extAuthz"]["protocol"]["http"]
    added = http["addRequestHeaders"]
    assert added[n.CHECK_ISSUER] == "jwt.iss" and added[n.CHECK_AZP] == "jwt.azp"
    assert added[n.CHECK_AUDIENCE] == '"fgentic-a2a"'
    assert added[n.CHECK_TIMEOUT] == '"17"'


def test_no_request_body_reaches_the_projector() -> None:
    r = rendered()
    keys = {k for k, _ in walk(r.standalone)} | {k for k, _ in walk(r.objects)}
    assert not {"includeRequestBody", "forwardBody"} & keys


# -- authentication and authorization -----------------------------------------------------


def test_authentication_is_strict_in_both_forms() -> None:
    r = rendered()
    modes = [v["mode"] for k, v in walk(r.standalone) if k in {"apiKey", "jwtAuth"}]
    assert modes == ["strict", "strict", "strict"]
    modes = [v["mode"] for k, v in walk(r.objects)
             if k in {"apiKeyAuthentication", "jwtAuthentication"}]
    assert modes == ["Strict", "Strict", "Strict"]


def test_authorization_is_written_only_as_require_rules() -> None:
    r = rendered()
    for key, value in walk(r.standalone):
        if key in {"authorization", "mcpAuthorization"}:
            assert value["rules"] and all(list(rule) == ["require"] for rule in value["rules"])
    actions = [v["action"] for k, v in walk(r.objects) if k == "authorization"]
    assert actions == ["Require"] * 4  # local, public, mcp traffic + mcp tools
    assert not {"deny", "allow", "Deny", "Allow"} & {k for k, _ in walk(r.standalone)}


def test_both_forms_require_the_same_expressions() -> None:
    r = rendered()
    routes = standalone_routes(r)
    for key in ("local", "public", "mcp"):
        standalone = [rule["require"] for rule in routes[key]["policies"]["authorization"]["rules"]]
        k8s = k8s_policy(r, key)["spec"]["traffic"]["authorization"]["policy"]["matchExpressions"]
        assert standalone == k8s


def test_projected_headers_need_exactly_one_value_and_unknown_reserved_names_fail() -> None:
    routes = standalone_routes(rendered())
    rules = {key: [r["require"] for r in route["policies"]["authorization"]["rules"]]
             for key, route in routes.items()}
    one = 'size(request.headers.raw()["{}"]) == 1'
    for key in ("local", "public"):
        text = " ".join(rules[key])
        assert one.format(n.IDENTITY) in text and one.format(n.USER_ID) in text
        assert "extauthz.identity_projected == true" in text
    assert one.format(n.ROOM_CONTEXT) in " ".join(rules["local"])
    assert ('!request.headers.exists(h, h.startsWith("x-fgentic-") && '
            '!(h in ["x-fgentic-identity", "x-fgentic-room-context"]))') in rules["local"]
    assert ('!request.headers.exists(h, h.startsWith("x-fgentic-") && '
            '!(h in ["x-fgentic-identity"]))') in rules["public"]
    assert rules["mcp"][1:3] == [one.format(n.IDENTITY),
                                 '!request.headers.exists(h, h.startsWith("x-fgentic-") && '
                                 '!(h in ["x-fgentic-identity"]))']


# Each wire: (the method both routes admit, the synchronous rule, the A2A-Version rule).
WIRE_RULES = {
    "0.3": ('json(request.body).method == "message/send"',
            "json(request.body).params.configuration.blocking == true",
            '(!("a2a-version" in request.headers)) || '
            '(request.headers.raw()["a2a-version"] == ["0.3"])'),
    "1.0": ('json(request.body).method == "SendMessage"',
            "json(request.body).params.configuration.return_immediately == false",
            '(request.headers.raw()["a2a-version"] == ["1.0"])'),
}


@pytest.mark.parametrize("version", sorted(WIRE_RULES))
def test_a2a_body_rules_reject_task_references_and_limit_methods(version: str) -> None:
    routes = standalone_routes(rendered(kagent={"a2aVersion": version}))
    local = [r["require"] for r in routes["local"]["policies"]["authorization"]["rules"]]
    public = [r["require"] for r in routes["public"]["policies"]["authorization"]["rules"]]
    for field in ("contextId", "taskId", "referenceTaskIds", "context_id", "task_id",
                  "reference_task_ids"):
        assert any(f"!has(json(request.body).params.message.{field})" in r for r in local)
        assert any(f"!has(json(request.body).params.message.{field})" in r for r in public)
    send, synchronous, a2a_version = WIRE_RULES[version]
    # The send only, on both routes: kagent's task store hands a task to whoever names its
    # id, so no client may poll or cancel one (issue 38 §4).
    assert send in local and send in public
    assert not [r for r in local + public if "tasks/" in r or "Task\"" in r]
    assert any(synchronous in r for r in public)
    assert a2a_version in local and a2a_version in public
    other = WIRE_RULES["1.0" if version == "0.3" else "0.3"]
    assert other[0] not in local and other[0] not in public


@pytest.mark.parametrize("version", sorted(WIRE_RULES))
def test_the_a2a_hop_is_the_agent_service_and_the_deviation_is_reported(version: str) -> None:
    r = rendered(kagent={"a2aVersion": version})
    route = standalone_routes(r)["local"]
    assert route["policies"]["urlRewrite"]["path"]["full"] == "/"
    assert "docs-agent.fgentic-demo" in json.dumps(route["backends"])
    assert "kagent-controller" not in json.dumps(r.standalone)
    assert r.deviations == (("A2A_HOP_AGENT_SERVICE", "A2A_WIRE_0_3", "NO_TASK_POLL")
                            if version == "0.3" else ("A2A_HOP_AGENT_SERVICE", "NO_TASK_POLL"))
    assert "DIRECT_KAGENT_A2A" not in r.unenforceable
    policy = next(o for o in r.objects if o["kind"] == "NetworkPolicy"
                  and o["metadata"]["name"].endswith("retrieval-agent-a2a"))
    assert policy["metadata"]["namespace"] == "fgentic-demo"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app": "kagent",
                                                             "kagent": "docs-agent"}}
    assert policy["spec"]["ingress"] == [{"from": [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                              "agentgateway-system"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentgateway-proxy"}}}],
        "ports": [{"protocol": "TCP", "port": 8080}]}]


def test_the_bridge_and_the_agent_are_identified_by_key_metadata() -> None:
    routes = standalone_routes(rendered())
    local, mcp = routes["local"]["policies"], routes["mcp"]["policies"]
    bridge = "serviceaccount:matrix/matrix-a2a-bridge"
    assert local["apiKey"]["keys"] == [{"key": "${FGENTIC_BRIDGE_API_KEY}",
                                        "metadata": {"workload": bridge}}]
    assert local["authorization"]["rules"][0] == {"require": f'apiKey.workload == "{bridge}"'}
    agent = "agent:fgentic-demo/docs-agent"
    assert mcp["authorization"]["rules"][0] == {"require": f'apiKey.workload == "{agent}"'}


def test_room_context_and_credentials_are_removed_after_authorization() -> None:
    r = rendered()
    credentials = ["authorization", "proxy-authorization", "cookie"]
    for key in ("local", "public", "mcp"):
        removed = ([n.ROOM_CONTEXT] if key != "mcp" else []) + credentials
        policies = standalone_routes(r)[key]["policies"]
        assert policies["requestHeaderModifier"] == {"remove": removed}
        order = list(policies)
        assert order.index("authorization") < order.index("requestHeaderModifier")
        traffic = k8s_policy(r, key)["spec"]["traffic"]
        assert traffic["headerModifiers"] == {"request": {"remove": removed}}


@pytest.mark.parametrize("seconds", [1, 30, 60])
def test_public_timeout_is_derived_from_the_platform_setting(seconds: int) -> None:
    public = {**example("RetrievalBinding")["spec"]["publicRoute"],
              "publicRetrievalTimeoutSeconds": seconds}
    r = rendered(publicRoute=public)
    assert standalone_routes(r)["public"]["policies"]["timeout"] == {
        "requestTimeout": f"{seconds}s"}
    route = next(o for o in of_kind(r, "HTTPRoute") if o["metadata"]["name"].endswith("public"))
    assert route["spec"]["rules"][0]["timeouts"] == {"request": f"{seconds}s"}


def test_mcp_route_has_its_own_backend_exact_path_one_tool_and_no_ext_authz() -> None:
    r = rendered()
    mcp = standalone_routes(r)["mcp"]
    assert mcp["matches"] == [{"path": {"exact": "/mcp/knowledge"}}]
    assert "extAuthz" not in mcp["policies"]
    assert mcp["policies"]["mcpAuthorization"] == {
        "rules": [{"require": 'mcp.tool.name == "search_knowledge"'}]}
    target = mcp["backends"][0]["mcp"]["targets"][0]
    assert target["mcp"] == {"host": "knowledge-retrieval.fgentic-retrieval.svc.cluster.local",
                             "port": 8080, "path": "/mcp"}
    backends = {o["metadata"]["name"].rsplit(".", 1)[1]: o["spec"]
                for o in of_kind(r, "AgentgatewayBackend")}
    assert set(backends) == {"a2a", "mcp"}
    # No gateway session: v1.3.1 lets a session id issued here be replayed on another route
    # (GHSA-mvgg-jvj2-4frq); the default in both forms is stateful.
    assert mcp["backends"][0]["mcp"]["statefulMode"] == "stateless"
    assert backends["mcp"]["mcp"]["sessionRouting"] == "Stateless"
    tools = k8s_policy(r, "mcp-tools")["spec"]
    assert tools["targetRefs"][0]["kind"] == "AgentgatewayBackend"
    assert tools["backend"]["mcp"]["authorization"]["policy"]["matchExpressions"] == [
        'mcp.tool.name == "search_knowledge"']


# -- NetworkPolicies -----------------------------------------------------------------------


def test_network_policies_default_deny_and_admit_only_the_declared_paths() -> None:
    policies = {o["metadata"]["name"].rsplit(".", 1)[1]: o for o in of_kind(rendered(),
                                                                           "NetworkPolicy")}
    deny = policies["retrieval-default-deny"]
    assert deny["metadata"]["namespace"] == "fgentic-retrieval"
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    service = policies["retrieval-service"]["spec"]
    [ingress] = service["ingress"]
    assert ingress["from"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                              "agentgateway-system"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentgateway-proxy"}}}]
    egress = [(rule["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
               [(p["protocol"], p["port"]) for p in rule["ports"]]) for rule in service["egress"]]
    assert egress == [("kube-system", [("UDP", 53), ("TCP", 53)]),
                      ("fgentic-retrieval", [("TCP", 5432)]),
                      ("agentgateway-system", [("TCP", 8443)]),
                      ("observability", [("TCP", 4317)])]
    database = policies["retrieval-database"]["spec"]
    assert database["policyTypes"] == ["Ingress"]
    assert database["ingress"][0]["from"][0]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "knowledge-retrieval"}}


# -- unenforceable, digest, names ----------------------------------------------------------


def test_unenforceable_rules_are_stated_in_both_forms() -> None:
    r = rendered()
    assert r.unenforceable == tuple(UNENFORCEABLE)
    for obj in r.objects:
        assert obj["metadata"]["annotations"][UNENFORCEABLE_ANNOTATION] == ",".join(
            r.unenforceable)
    text = r.standalone_yaml()
    assert all(f"#   {code}: " in text for code in r.unenforceable)
    assert "PUBLIC_NONTERMINAL_RESULT" not in rendered(publicRoute=None).unenforceable


def test_digest_is_sha256_of_the_jcs_object_set() -> None:
    r = rendered()
    import hashlib

    assert r.digest == hashlib.sha256(rfc8785.dumps(r.objects)).hexdigest()
    assert r.digest == rendered().digest  # deterministic
    assert r.digest != rendered(publicRoute=None).digest
    assert digest({"b": 1, "a": [2]}) == hashlib.sha256(b'{"a":[2],"b":1}').hexdigest()


def test_no_credentials_in_either_form() -> None:
    r = rendered()
    text = r.standalone_yaml() + r.kubernetes_yaml()
    assert "${FGENTIC_BRIDGE_API_KEY}" in text and "${FGENTIC_AGENT_MCP_API_KEY}" in text
    assert "secretRef" in r.kubernetes_yaml()
    assert '"d":' not in text


def test_jwks_is_inlined_and_private_keys_are_refused() -> None:
    r = rendered()
    provider = k8s_policy(r, "public")["spec"]["traffic"]["jwtAuthentication"]["providers"][0]
    assert json.loads(provider["jwks"]["inline"]) == json.loads(JWKS)
    assert provider["audiences"] == ["fgentic-a2a"]
    private = json.dumps({"keys": [{**json.loads(JWKS)["keys"][0], "d": "secret"}]})
    for bad in (private, "not json", '{"keys": "x"}', '{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}'):
        with pytest.raises(RenderError):
            validate_jwks(bad)


def test_a_dollar_in_a_value_is_refused_for_the_standalone_form() -> None:
    public = {**example("RetrievalBinding")["spec"]["publicRoute"], "audience": "a$HOME"}
    namespace, name, spec = binding(publicRoute=public)
    with pytest.raises(RenderError):
        render(namespace, name, spec)


def test_long_names_stay_within_kubernetes_limits() -> None:
    long = BindingId("a" * 63, "b" * 253)
    assert len(long.label) <= 63 and len(long.object_name("retrieval-default-deny")) <= 253
    assert long.label != BindingId("a" * 63, "b" * 252 + "c").label
    assert BindingId("ns", "x").object_name("local") == "ns.x.local"


def test_owner_references_only_in_the_binding_namespace_and_stale_objects() -> None:
    r = rendered()
    owner = ownership.Owner("governance.fgentic.dev/v1alpha1", "RetrievalBinding",
                               "agentgateway-system", "docs-agent-retrieval", "uid-1")
    owned = ownership.with_owner(r.objects, owner)
    for obj in owned:
        refs = obj["metadata"].get("ownerReferences")
        assert bool(refs) == (obj["metadata"]["namespace"] == "agentgateway-system")
    assert "ownerReferences" not in r.objects[0]["metadata"]  # the input is not modified
    smaller = rendered(publicRoute=None)
    stale = ownership.stale(r.objects, smaller.objects, r.binding)
    assert [k[3].rsplit(".", 1)[1] for k in stale] == ["public", "public"]
    # An object labelled for the binding but managed by someone else is never stale: not ours.
    copy = {**r.objects[0], "metadata": {**r.objects[0]["metadata"], "name": "copy", "labels": {
        **r.objects[0]["metadata"]["labels"], "app.kubernetes.io/managed-by": "kubectl"}}}
    assert ownership.stale([*r.objects, copy], smaller.objects, r.binding) == stale
    assert not ownership.rendered_by(copy) and all(map(ownership.rendered_by, r.objects))


def _projector_config(r: Rendered) -> ProjectorConfig:
    [config_map] = [o for o in r.objects if o["kind"] == "ConfigMap"
                    and "projector.json" in o["data"]]
    assert config_map["metadata"]["namespace"] == r.objects[-1]["metadata"]["namespace"]
    return parse_config(config_map["data"]["projector.json"])


def test_projector_config_map_carries_the_binding_configuration() -> None:
    config = _projector_config(rendered())
    assert config.local.workload.startswith("serviceaccount:")
    assert config.public is not None and config.public.timeout_seconds == 30


def test_the_projector_classifies_by_the_operators_appservice_registry() -> None:
    """One registry (--appservice-namespaces) for the memory path and the projector: the
    binding's own list may only repeat entries of it, so no second copy classifies apart."""
    registry = telegram("fgentic.local")
    namespace, name, spec = binding()
    with_registry = RenderOptions(appservice=registry)
    config = _projector_config(render(namespace, name, spec, jwks=JWKS, options=with_registry))
    assert config.local.registry().namespaces == registry.namespaces
    assert config.local.registry().holds(puppet("fgentic.local"))
    assert _projector_config(rendered()).local.appservice_namespaces == []  # none configured
    same = binding(appserviceNamespaces=registry.wire())[2]
    assert _projector_config(render(namespace, name, same, jwks=JWKS, options=with_registry)
                             ).local.appservice_namespaces == list(registry.namespaces)
    slack = {"network": "slack", "userRegex": "@slack_.*:fgentic\\.local"}
    for options in (with_registry, None):  # a second source is refused, naming no regex
        with pytest.raises(RenderError, match="appserviceNamespaces: an entry is not in") as e:
            render(namespace, name, binding(appserviceNamespaces=[slack])[2], jwks=JWKS,
                   options=options)
        assert "slack_" not in str(e.value)


def test_invalid_appservice_regex_is_refused_by_the_model() -> None:
    with pytest.raises(pydantic.ValidationError, match="userRegex"):
        rendered(appserviceNamespaces=[{"network": "slack", "userRegex": "(unclosed"}])


# -- CLI -------------------------------------------------------------------------------------


def test_cli_renders_both_forms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(JWKS)
    source = Path(__file__).resolve().parents[2] / "examples" / "30-retrievalbinding.yaml"
    out = tmp_path / "out"
    code = main(["render", "retrievalbinding", str(source), "-o", str(out), "--jwks-file",
                 str(jwks), "--standalone-host", "projector=127.0.0.1:9"])
    assert code == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["fgentic-demo.docs-agent-retrieval.kubernetes.yaml",
                     "fgentic-demo.docs-agent-retrieval.projector.json",
                     "fgentic-demo.docs-agent-retrieval.standalone.yaml"]
    assert "host: 127.0.0.1:9" in (out / files[2]).read_text()
    # The projector file is the rendered ConfigMap's entry, and a loadable configuration.
    config = parse_config((out / files[1]).read_text())
    assert config.local.agent.name == "docs-agent"
    assert dump_config(config) == rendered().projector_config
    assert rendered().digest in capsys.readouterr().err
    assert main(["render", "retrievalbinding", str(source), "--format", "all"]) == 2
    assert main(["render", "retrievalbinding", str(source), "--standalone-host", "x=y"]) == 2


def test_cli_renders_the_projector_with_the_operators_registry_flag(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[2] / "examples" / "30-retrievalbinding.yaml"
    registry = telegram("fgentic.local")
    assert main(["render", "retrievalbinding", str(source), "-o", str(tmp_path), "--format",
                 "all", *flag("fgentic.local")]) == 0
    [projector] = tmp_path.glob("*.projector.json")
    assert parse_config(projector.read_text()).local.registry().namespaces == \
        registry.namespaces


def test_the_retrieval_servers_configuration_is_the_bindings() -> None:
    r = rendered()
    [config_map] = [o for o in r.objects if o["kind"] == "ConfigMap"
                    and o["metadata"]["name"].endswith(".retrieval-server")]
    assert config_map["metadata"] == {
        "name": "fgentic-demo.docs-agent-retrieval.retrieval-server",
        "namespace": "fgentic-retrieval", "labels": config_map["metadata"]["labels"],
        "annotations": config_map["metadata"]["annotations"]}
    assert json.loads(config_map["data"]["retrieval-server.json"]) == {
        "version": 1, "agent": {"namespace": "fgentic-demo", "name": "docs-agent"},
        "tool": "search_knowledge", "mcpPath": "/mcp"}
    assert json.loads(r.projector_config)["local"]["path"] == "/a2a/fgentic-demo/docs-agent"
