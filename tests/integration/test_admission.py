"""The admission webhook through the real kube-apiserver, with the real operator and store.

`kubectl apply` of good and bad kagent Agents (and our own kinds) gives exact verdicts; the
webhook fails closed when stopped; the ValidatingAdmissionPolicy alone blocks Authorization.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_devenv.binaries import binary
from fgentic_devenv.controlplane import KubectlError
from fgentic_devenv.paths import repo_root
from fgentic_governance.admission.render import (
    ROUTED_NAMESPACE_LABEL,
    admission_policy,
    mutating_configuration,
    scope_policy,
    webhook_configuration,
)
from fgentic_governance.api.common import GROUP
from tests.support import processes
from tests.support.appservice import puppet, telegram
from tests.support.objects import api_message, example, scoped_policies
from tests.support.polling import until

pytestmark = pytest.mark.integration
NS = "admission"
PLAIN_NS = "admission-plain"  # not labelled for routing
CHART = repo_root() / "charts" / "fgentic-governance"
GOVERNED_URL = "http://fgentic-memory-api.fgentic-system.svc:8083"
CONTROLLER_URL = "http://kagent-controller.kagent.svc:8083"
BOUND = {"apiGroup": "kagent.dev", "kind": "RemoteMCPServer", "namespace": NS,
         "name": "knowledge-retrieval"}
OTHER = {"apiGroup": "kagent.dev", "kind": "RemoteMCPServer", "namespace": NS,
         "name": "tickets"}


def _apply(cp: Any, doc: dict[str, Any], tmp: Path) -> str:
    """`kubectl apply` one manifest: 'allow', or the denial message."""
    path = tmp / f"{uuid.uuid4().hex}.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        cp.kubectl("apply", "-f", str(path))
    except KubectlError as exc:
        return exc.stderr
    return "allow"


def _refused_once_loaded(cp: Any, doc: dict[str, Any], tmp: Path) -> str:
    """`_apply` until a ValidatingAdmissionPolicy just applied refuses ``doc`` (the API server
    loads policies in a moment; an Agent admitted meanwhile is deleted); the last verdict."""
    meta = doc["metadata"]

    def verdict() -> str:
        found = _apply(cp, doc, tmp)
        if found == "allow":
            cp.kubectl("delete", doc["kind"].lower(), "-n", meta["namespace"], meta["name"])
        return found

    return until(verdict, f"a loaded policy to refuse {meta['name']}", 20, interval=0.5,
                 holds=lambda found: found != "allow")


def _binding() -> dict[str, Any]:
    obj = example("RetrievalBinding")
    obj["metadata"] = {"name": "retriever-binding", "namespace": NS}
    obj["spec"]["agent"] = {"namespace": NS, "name": "retriever"}
    obj["spec"]["mcpServer"].update(namespace=NS, name="knowledge-retrieval",
                                    tool="search_knowledge")
    return obj


def _scope(name: str, agent: str, **spec: Any) -> dict[str, Any]:
    obj = example("MemoryScope")
    obj["metadata"] = {"name": name, "namespace": NS}
    obj["spec"]["agent"] = {"namespace": NS, "name": agent}
    obj["spec"].update(spec)
    return obj


@pytest.fixture(scope="module")
def stack(control_plane: Any, postgres: Any, tmp_path_factory: pytest.TempPathFactory,
          k8s_client: client.ApiClient) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("admission")
    control_plane.ensure_namespace(NS)
    control_plane.ensure_namespace(PLAIN_NS)
    dsn = asyncio.run(postgres.create_database(f"admission_{uuid.uuid4().hex[:8]}", ("vector",)))
    (work / "dsn").write_text(dsn)
    operator = processes.spawn_operator(control_plane.kubeconfig, work / "dsn", [NS],
                                        work / "operator.log")
    memory_api, memory_port = processes.spawn_memory_api(
        control_plane.kubeconfig, work / "dsn", "http://127.0.0.1:9", work / "memory.log")
    webhook, port, ca = processes.spawn_webhook(
        control_plane.kubeconfig, work, audit_interval=1, memory_api_url=GOVERNED_URL,
        memory_api_ready_url=f"http://127.0.0.1:{memory_port}")
    suffix = uuid.uuid4().hex[:6]
    config = webhook_configuration(f"admission-{suffix}", f"https://127.0.0.1:{port}", ca,
                                   memory_routing=True)
    mutating = mutating_configuration(f"admission-{suffix}", f"https://127.0.0.1:{port}", ca)
    for hook in config["webhooks"] + mutating["webhooks"]:  # only this test's namespaces
        selector = hook["namespaceSelector"]
        selector["matchExpressions"] = [
            *(e for e in selector.get("matchExpressions", [])
              if e["key"] != "kubernetes.io/metadata.name"),
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NS, PLAIN_NS]}]
    control_plane.kubectl("label", "namespace", NS, f"{ROUTED_NAMESPACE_LABEL}=enabled",
                          "--overwrite")
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(config))
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(mutating))
    for doc in (_binding(), _scope("gated", "memory-agent", policy={"maxRetentionDays": 3}),
                _scope("ungated", "ungated-agent", profile="default", posture="fully_disabled")):
        assert _apply(control_plane, doc, work) == "allow"
    _wait_gated(k8s_client, "gated")
    yield {"cp": control_plane, "tmp": work, "webhook": webhook, "config": config,
           "mutating": mutating, "log": work / "webhook.log", "ca": ca, "port": port,
           "memory_ready": f"http://127.0.0.1:{memory_port}"}
    processes.stop(webhook)
    processes.stop(memory_api)
    processes.stop(operator)
    control_plane.kubectl("delete", "validatingwebhookconfiguration",
                          config["metadata"]["name"])
    control_plane.kubectl("delete", "--ignore-not-found", "mutatingwebhookconfiguration",
                          mutating["metadata"]["name"])


def _wait_gated(api_client: client.ApiClient, name: str) -> None:
    api = client.CustomObjectsApi(api_client)
    until(lambda: api.get_namespaced_custom_object(GROUP, "v1alpha1", NS, "memoryscopes",
                                                   name).get("status", {}),
          f"scope {name} consent-gated", 30,
          holds=lambda status: {c["type"]: c["status"] for c in status.get("conditions", [])
                                }.get("ConsentGated") == "True")


def agent(name: str, *tools: dict[str, Any], memory: dict[str, Any] | None = None,
          version: str = "v1alpha2") -> dict[str, Any]:
    doc = example("Agent")
    doc["metadata"] = {"name": name, "namespace": NS}
    doc["spec"]["declarative"]["tools"] = list(tools)
    if memory is not None:
        doc["spec"]["declarative"]["memory"] = memory
    doc["apiVersion"] = f"kagent.dev/{version}"
    return doc


def mcp(server: dict[str, Any], tools: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    ref = copy.deepcopy(server)
    if tools is not None:
        ref["toolNames"] = tools
    ref.update(extra)
    return {"type": "McpServer", "mcpServer": ref}


def with_headers_from(tool: dict[str, Any], *names: str) -> dict[str, Any]:
    tool["headersFrom"] = [{"name": n, "valueFrom": {"type": "Secret", "name": "creds",
                                                     "key": "token"}} for n in names]
    return tool


SK = ["search_knowledge"]
IDENTITY = ["X-Fgentic-Identity"]
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("no-tools", agent("no-tools"), "allow"),
    ("plain-tool", agent("plain-tool", mcp(OTHER, ["list_tickets"])), "allow"),
    ("authorization", agent("a1", mcp(OTHER, ["t"], allowedHeaders=["Authorization"])),
     "FORBIDDEN_HEADER"),
    ("authorization-lower", agent("a2", mcp(OTHER, ["t"], allowedHeaders=["authorization"])),
     "FORBIDDEN_HEADER"),
    ("cookie", agent("a3", mcp(OTHER, ["t"], allowedHeaders=["Cookie"])), "FORBIDDEN_HEADER"),
    ("x-user-id", agent("a4", mcp(OTHER, ["t"], allowedHeaders=["X-User-Id"])),
     "FORBIDDEN_HEADER"),
    ("wildcard", agent("a5", mcp(OTHER, ["t"], allowedHeaders=["*"])), "FORBIDDEN_HEADER"),
    ("arbitrary", agent("a6", mcp(OTHER, ["t"], allowedHeaders=["X-Request-Id"])),
     "FORBIDDEN_HEADER"),
    ("room-context", agent("a7", mcp(BOUND, SK, allowedHeaders=["X-Fgentic-Room-Context"])),
     "FORBIDDEN_HEADER"),
    ("bound-identity", agent("retriever", mcp(BOUND, SK, allowedHeaders=IDENTITY)), "allow"),
    ("bound-identity-lower", agent("retriever", mcp(BOUND, SK,
                                                    allowedHeaders=["x-fgentic-identity"])),
     "allow"),
    ("bound-identity-default-namespace", agent("retriever", mcp(
        {k: v for k, v in BOUND.items() if k != "namespace"}, SK, allowedHeaders=IDENTITY)),
     "allow"),
    ("unbound-agent-identity", agent("other-agent", mcp(BOUND, SK, allowedHeaders=IDENTITY)),
     "IDENTITY_HEADER_UNBOUND"),
    ("identity-to-other-server", agent("retriever", mcp(OTHER, SK, allowedHeaders=IDENTITY)),
     "IDENTITY_HEADER_UNBOUND"),
    ("identity-wrong-kind", agent("retriever", mcp({**BOUND, "kind": "MCPServer"}, SK,
                                                   allowedHeaders=IDENTITY)),
     "IDENTITY_HEADER_UNBOUND"),
    ("identity-extra-tool", agent("retriever", mcp(BOUND, [*SK, "delete_all"],
                                                   allowedHeaders=IDENTITY)),
     "IDENTITY_TOOL_MISMATCH"),
    ("identity-no-tool-names", agent("retriever", mcp(BOUND, None, allowedHeaders=IDENTITY)),
     "IDENTITY_TOOL_MISMATCH"),
    ("require-approval", agent("retriever", mcp(BOUND, SK, allowedHeaders=IDENTITY,
                                                requireApproval=SK)),
     "REQUIRE_APPROVAL_ON_RETRIEVAL"),
    ("headers-from-authorization-retrieval", agent(
        "retriever", with_headers_from(mcp(BOUND, SK), "Authorization")),
     "FORBIDDEN_HEADERS_FROM"),
    ("headers-from-user-id-retrieval", agent(
        "retriever", with_headers_from(mcp(BOUND, SK), "X-User-Id")),
     "FORBIDDEN_HEADERS_FROM"),
    ("headers-from-fgentic-anywhere", agent(
        "h3", with_headers_from(mcp(OTHER, ["t"]), "X-Fgentic-Identity")),
     "FORBIDDEN_HEADERS_FROM"),
    ("headers-from-authorization-elsewhere", agent(
        "h4", with_headers_from(mcp(OTHER, ["t"]), "Authorization")), "allow"),
    ("memory-without-scope", agent("m1", memory={"modelConfig": "embed", "ttlDays": 3}),
     "MEMORY_UNGATED"),
    ("memory-gated", agent("memory-agent", memory={"modelConfig": "embed", "ttlDays": 3}),
     "allow"),
    ("memory-no-ttl", agent("memory-agent", memory={"modelConfig": "embed"}),
     "MEMORY_TTL_MISSING"),
    ("memory-ttl-too-long", agent("memory-agent", memory={"modelConfig": "embed",
                                                          "ttlDays": 5}),
     "MEMORY_TTL_EXCEEDS_RETENTION"),
    ("memory-ungated-scope", agent("ungated-agent", memory={"modelConfig": "embed",
                                                            "ttlDays": 1}),
     "MEMORY_UNGATED"),
    ("realistic-retriever", agent(
        "retriever", mcp(BOUND, SK, allowedHeaders=IDENTITY),
        with_headers_from(mcp(OTHER, ["list_tickets", "get_ticket"]), "Authorization"),
        {"type": "Agent", "agent": {"name": "summarizer"}}), "allow"),
    ("realistic-leaky", agent(
        "retriever", mcp(BOUND, SK, allowedHeaders=["X-Fgentic-Identity", "Authorization"]),
        mcp(OTHER, ["list_tickets"])), "FORBIDDEN_HEADER"),
    ("realistic-memory-and-retrieval", agent(
        "memory-agent", mcp(OTHER, ["list_tickets"]),
        {"type": "Agent", "agent": {"name": "summarizer"}},
        memory={"modelConfig": "embed", "ttlDays": 2}), "allow"),
]


@pytest.mark.parametrize(("case", "doc", "expected"), CASES, ids=[c[0] for c in CASES])
def test_agent_verdicts_through_kubectl(stack: dict[str, Any], case: str, doc: dict[str, Any],
                                        expected: str) -> None:
    doc["metadata"]["name"] = f"{doc['metadata']['name']}"
    verdict = _apply(stack["cp"], doc, stack["tmp"])
    if expected == "allow":
        assert verdict == "allow", verdict
        stack["cp"].kubectl("delete", "agent", "-n", NS, doc["metadata"]["name"])
    else:
        assert "denied the request" in verdict, verdict
        assert expected in verdict, verdict


def test_v1alpha1_agent_memory_is_denied(stack: dict[str, Any]) -> None:
    doc = {"apiVersion": "kagent.dev/v1alpha1", "kind": "Agent",
           "metadata": {"name": "legacy", "namespace": NS},
           "spec": {"description": "legacy", "systemMessage": "help", "modelConfig": "m",
                    "memory": ["kagent-memory"]}}
    verdict = _apply(stack["cp"], doc, stack["tmp"])
    assert "MEMORY_UNGATED" in verdict, verdict


def test_update_that_adds_authorization_is_denied(stack: dict[str, Any]) -> None:
    doc = agent("updated", mcp(OTHER, ["t"]))
    assert _apply(stack["cp"], doc, stack["tmp"]) == "allow"
    doc["spec"]["declarative"]["tools"][0]["mcpServer"]["allowedHeaders"] = ["Authorization"]
    assert "FORBIDDEN_HEADER" in _apply(stack["cp"], doc, stack["tmp"])


def test_a_900_kb_agent_is_created_patched_and_deleted(stack: dict[str, Any],
                                                      k8s_client: client.ApiClient) -> None:
    """An UPDATE review carries the object twice: past aiohttp's 1 MiB default (issue 14, 3)."""
    api = client.CustomObjectsApi(k8s_client)
    doc = agent("large", mcp(OTHER, ["list_tickets"]))
    doc["spec"]["declarative"]["systemMessage"] = "x" * 900_000
    args = ("kagent.dev", "v1alpha2", NS, "agents")
    api.create_namespaced_custom_object(*args, doc)
    try:
        patched = api.patch_namespaced_custom_object(
            *args, "large", {"metadata": {"labels": {"size": "large"}}})
        assert patched["metadata"]["labels"] == {"size": "large"}
        # Decided, not just passed: the same large UPDATE with a forbidden header is denied.
        leaky = {"spec": {"declarative": {"tools": [
            mcp(OTHER, ["list_tickets"], allowedHeaders=["Cookie"])]}}}
        with pytest.raises(ApiException) as info:
            api.patch_namespaced_custom_object(*args, "large", leaky)
        assert "FORBIDDEN_HEADER" in api_message(info.value), api_message(info.value)
    finally:
        api.delete_namespaced_custom_object(*args, "large")  # DELETE is never sent to us.


def test_governance_cross_object_rules(stack: dict[str, Any]) -> None:
    cp, tmp = stack["cp"], stack["tmp"]
    consent = example("ConsentRecord")
    consent["metadata"] = {"name": "orphan", "namespace": NS}
    consent["spec"]["scopeRef"] = {"name": "no-such-scope"}
    assert "CONSENT_SCOPE_MISSING" in _apply(cp, consent, tmp)
    consent["metadata"]["name"] = "impostor"
    consent["spec"]["scopeRef"] = {"name": "gated"}
    consent["spec"]["subject"] = {"mxid": "@mallory:fgentic.local", "originKind": "native-local"}
    assert "CONSENT_SUBJECT_MISMATCH" in _apply(cp, consent, tmp)
    second = _binding()
    second["metadata"]["name"] = "second-binding"
    assert "BINDING_DUPLICATE_AGENT" in _apply(cp, second, tmp)
    offboarding = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "PrincipalOffboarding",
                   "metadata": {"name": f"offboard-{uuid.uuid4().hex[:8]}"},
                   "spec": {"principal": {"mxid": "@carol:fgentic.local",
                                          "originKind": "native-local"}}}
    assert _apply(cp, offboarding, tmp) == "allow"
    carol = _scope("carol", "memory-agent",
                   subject={"mxid": "@carol:fgentic.local", "originKind": "native-local"})
    assert _apply(cp, carol, tmp) == "allow"
    consent["metadata"]["name"] = "during-offboarding"
    consent["spec"]["scopeRef"] = {"name": "carol"}
    consent["spec"]["subject"] = carol["spec"]["subject"]
    assert "OFFBOARDING_IN_PROGRESS" in _apply(cp, consent, tmp)
    cp.kubectl("delete", "principaloffboarding", offboarding["metadata"]["name"])
    remote = _scope("remote", "memory-agent",
                    subject={"mxid": "@alice:remote.example", "originKind": "native-local"})
    assert "FEDERATION_DENIED" in _apply(cp, remote, tmp)


def test_audit_reports_existing_violations_content_free(stack: dict[str, Any],
                                                        k8s_client: client.ApiClient) -> None:
    # Created while no webhook matched it (another namespace label), then audited.
    cp, tmp = stack["cp"], stack["tmp"]
    config = copy.deepcopy(stack["config"])
    name = config["metadata"]["name"]
    cp.kubectl("delete", "validatingwebhookconfiguration", name)
    try:
        assert _apply(cp, agent("pre-existing", mcp(OTHER, ["t"],
                                                    allowedHeaders=["Authorization"])),
                      tmp) == "allow"
    finally:
        cp.kubectl("apply", "-f", "-", input=json.dumps(config))
    core = client.CoreV1Api(k8s_client)

    def violations() -> list[Any]:
        events = core.list_namespaced_event(NS, field_selector="reason=PolicyViolation").items
        return [e for e in events if e.involved_object.name == "pre-existing"]

    mine = until(violations, "the audit's event on the pre-existing violation", 20,
                 interval=0.5)
    assert "FORBIDDEN_HEADER" in mine[0].message


# -- the Pod routing of issue 17 §3 ---------------------------------------------------------------


def _pod(name: str, env: list[dict[str, str]], *, labels: dict[str, str] | None = None,
         account: str = "memory-agent") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
            "spec": {"serviceAccountName": account, "automountServiceAccountToken": False,
                     "containers": [{"name": "kagent", "image": "kagent:0.9.11", "env": env}]}}


def _create_pod(stack: dict[str, Any], pod: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Server-side dry-run create: ('allow', the object as admitted) or (denial, {})."""
    path = stack["tmp"] / f"{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(pod))
    try:
        out = stack["cp"].kubectl("create", "--dry-run=server", "-o", "json", "-f", str(path))
    except KubectlError as exc:
        return exc.stderr, {}
    return "allow", json.loads(out)


def _env(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["spec"]["containers"][0].get("env", []))


KAGENT_LABELS = {"app": "kagent", "kagent": "memory-agent"}
ROUTED = {"fgentic.dev/memory-routed": "true"}
# What kagent's controller renders: the Agent's deployment.env, then its own KAGENT_URL.
RENDERED_ENV = [{"name": "KAGENT_URL", "value": "http://attacker.example:80"},
                {"name": "TEAM", "value": "a"}, {"name": "KAGENT_URL", "value": CONTROLLER_URL}]
TRACE_PINS = ("ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "TRACELOOP_TRACE_CONTENT",
              "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
SUBSTRATE_PINS = ("KAGENT_CONFIG_JSON", "KAGENT_AGENT_CARD_JSON", "KAGENT_SRT_SETTINGS_JSON",
                  "KAGENT_TOKEN")
PROXY_NAMES = ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
GOVERNED_ENV = [{"name": "KAGENT_URL", "value": GOVERNED_URL},
                {"name": "LOG_LEVEL", "value": "ERROR"},
                *({"name": n, "value": "false"} for n in TRACE_PINS),
                *({"name": n} for n in (*SUBSTRATE_PINS, *PROXY_NAMES))]
"""What a routed container sees, as the API server stores it (an empty value is omitted):
the memory API, errors only, content-free traces, no config or token from the env (kagent-adk
0.10.4), no proxy for an http URL."""


@pytest.fixture
def memory_agent(stack: dict[str, Any]) -> Iterator[None]:
    stack["cp"].kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "memory-agent", "namespace": NS}}))
    doc = agent("memory-agent", memory={"modelConfig": "embed", "ttlDays": 3})
    assert _apply(stack["cp"], doc, stack["tmp"]) == "allow"
    yield
    stack["cp"].kubectl("delete", "agent", "-n", NS, "memory-agent")


def test_a_memory_agents_pods_are_routed_to_the_memory_api(stack: dict[str, Any],
                                                           memory_agent: None) -> None:
    governed = [{"name": "TEAM", "value": "a"}, *GOVERNED_ENV]
    verdict, labelled = _create_pod(stack, _pod("by-labels", RENDERED_ENV, labels=KAGENT_LABELS))
    assert verdict == "allow", verdict
    assert _env(labelled) == governed
    assert labelled["metadata"]["labels"] == {**KAGENT_LABELS, **ROUTED}
    # No kagent labels, but the Agent's service account (the namespace is labelled for it).
    verdict, by_account = _create_pod(stack, _pod("by-account", RENDERED_ENV))
    assert verdict == "allow", verdict
    assert _env(by_account) == governed and by_account["metadata"]["labels"] == ROUTED
    # Labelled app=kagent without kagent's Agent label, under the Agent's account: still
    # routed (a namespace labelled for routing sends every Pod).
    verdict, half = _create_pod(stack, _pod("app-only", RENDERED_ENV, labels={"app": "kagent"}))
    assert verdict == "allow" and _env(half) == governed, verdict
    # Any other Pod is left exactly as it was.
    verdict, other = _create_pod(stack, _pod("other", RENDERED_ENV, account="default"))
    assert verdict == "allow" and _env(other) == RENDERED_ENV, verdict
    assert not other["metadata"].get("labels")


def test_a_pod_that_escaped_the_routing_is_refused(stack: dict[str, Any],
                                                   memory_agent: None) -> None:
    name = stack["mutating"]["metadata"]["name"]
    stack["cp"].kubectl("delete", "mutatingwebhookconfiguration", name)
    try:
        good = GOVERNED_ENV
        for env in (RENDERED_ENV, [good[0], {"name": "LOG_LEVEL", "value": "INFO"}, *good[2:]],
                    [*good, {"name": "TRACELOOP_TRACE_CONTENT", "value": "true"}],
                    [*good, {"name": "KAGENT_TOKEN", "value": "another-workloads-token"}]):
            verdict, _ = _create_pod(stack, _pod("escaped", env,
                                                 labels={**KAGENT_LABELS, **ROUTED}))
            assert "MEMORY_RUNTIME_UNGOVERNED at spec.containers[0].env" in verdict, verdict
        verdict, _ = _create_pod(stack, _pod("escaped", good, labels=KAGENT_LABELS))
        assert "MEMORY_RUNTIME_UNGOVERNED at metadata.labels" in verdict, verdict  # unlabelled
        verdict, _ = _create_pod(stack, _pod("escaped", good,
                                             labels={**KAGENT_LABELS, **ROUTED}))
        assert verdict == "allow", verdict
    finally:
        stack["cp"].kubectl("apply", "-f", "-", input=json.dumps(stack["mutating"]))


def test_without_the_routing_a_gated_demo_scope_admits_no_collector(
        stack: dict[str, Any], tmp_path: Path) -> None:
    """The case issue 17 names: a demo scope with its gates, no consent, and (here) no Pod
    routing: the Agent would collect for every user. Refused; with the routing, admitted."""
    import urllib.request

    bare, port, ca = processes.spawn_webhook(stack["cp"].kubeconfig, tmp_path)
    try:
        doc = agent("memory-agent", memory={"modelConfig": "embed", "ttlDays": 3})
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u-1", "operation": "CREATE", "object": doc}}
        request = urllib.request.Request(f"https://127.0.0.1:{port}/agents",
                                         data=json.dumps(review).encode(),
                                         headers={"Content-Type": "application/json"})
        context = ssl.create_default_context(cadata=ca.decode())
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            response = json.load(answer)["response"]
    finally:
        processes.stop(bare)
    assert response["allowed"] is False
    assert response["status"]["message"].partition(": ")[0] == \
        "MEMORY_RUNTIME_UNGOVERNED at spec.declarative.memory"
    assert _apply(stack["cp"], doc, stack["tmp"]) == "allow"  # the routed webhook admits it
    stack["cp"].kubectl("delete", "agent", "-n", NS, "memory-agent")


def test_a_routed_pods_proxies_are_blanked(stack: dict[str, Any], memory_agent: None) -> None:
    """N8: kagent-adk builds its controller client with trust_env: HTTP_PROXY (from env,
    envFrom or the image) would carry every memory call to the proxy. Set empty and last in
    the Pod, it overrides all three."""
    env = [{"name": "HTTP_PROXY", "value": "http://proxy.example:3128"}, *RENDERED_ENV,
           {"name": "all_proxy", "value": "socks5://proxy.example:1080"}]
    leaky = _pod("proxied", env, labels=KAGENT_LABELS)
    leaky["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "proxies"}}]
    verdict, admitted = _create_pod(stack, leaky)
    assert verdict == "allow", verdict
    assert _env(admitted) == [{"name": "TEAM", "value": "a"}, *GOVERNED_ENV]


def test_the_routed_label_cannot_be_dropped_through_pods_status(
        stack: dict[str, Any], memory_agent: None, k8s_client: client.ApiClient) -> None:
    """N6: pods/status writes were never reviewed, and they may change labels: without the
    label the routed-egress NetworkPolicy no longer selects the Pod. Ephemeral containers
    (pods/ephemeralcontainers, ``kubectl debug``) must see the memory API too (N8)."""
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(NS, _pod("status-routed", RENDERED_ENV, labels=KAGENT_LABELS))
    try:
        assert core.read_namespaced_pod("status-routed", NS).metadata.labels == {
            **KAGENT_LABELS, **ROUTED}
        unlabel = {"metadata": {"labels": {"fgentic.dev/memory-routed": None}}}
        with pytest.raises(ApiException) as info:
            core.patch_namespaced_pod_status("status-routed", NS, unlabel)
        assert "MEMORY_RUNTIME_UNGOVERNED at metadata.labels" in api_message(info.value)
        # A status write that keeps the label (the kubelet's) is admitted.
        condition = {"type": "example.com/checked", "status": "True"}
        core.patch_namespaced_pod_status("status-routed", NS,
                                         {"status": {"conditions": [condition]}})
        assert core.read_namespaced_pod("status-routed", NS).metadata.labels == {
            **KAGENT_LABELS, **ROUTED}
        debug = {"name": "debug", "image": "busybox",
                 "env": [{"name": "KAGENT_URL", "value": CONTROLLER_URL}]}
        with pytest.raises(ApiException) as info:
            core.patch_namespaced_pod_ephemeralcontainers(
                "status-routed", NS, {"spec": {"ephemeralContainers": [debug]}}, dry_run="All")
        assert "MEMORY_RUNTIME_UNGOVERNED at spec.ephemeralContainers[0].env" in \
            api_message(info.value)
    finally:
        core.delete_namespaced_pod("status-routed", NS, grace_period_seconds=0)


def test_only_the_webhook_sets_the_routed_label(stack: dict[str, Any],
                                                k8s_client: client.ApiClient) -> None:
    """N7: the label admits its bearer to the memory API and names the caller's Pod to its
    embeddings route; a Pod of no memory-enabled Agent may neither carry nor add it."""
    verdict, _ = _create_pod(stack, _pod("claims", [], labels={"app": "web", **ROUTED},
                                         account="default"))
    assert "ROUTED_LABEL_RESERVED at metadata.labels" in verdict, verdict
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(NS, _pod("plain-web", [], labels={"app": "web"},
                                        account="default"))
    try:
        with pytest.raises(ApiException) as info:
            core.patch_namespaced_pod("plain-web", NS, {"metadata": {"labels": ROUTED}})
        assert "ROUTED_LABEL_RESERVED at metadata.labels" in api_message(info.value)
        with pytest.raises(ApiException) as info:
            core.patch_namespaced_pod_status("plain-web", NS, {"metadata": {"labels": ROUTED}})
        assert "ROUTED_LABEL_RESERVED at metadata.labels" in api_message(info.value)
    finally:
        core.delete_namespaced_pod("plain-web", NS, grace_period_seconds=0)


SLOW_UPLOADS = 8
"""Connections that each declare a 1 MiB review and send one byte: eight MiB declared, more
than the webhook's whole review budget (6 MiB)."""


def _slow_upload(port: int, ca: bytes) -> ssl.SSLSocket:
    context = ssl.create_default_context(cadata=ca.decode())
    connection = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                                     server_hostname="127.0.0.1")
    connection.sendall(b"POST /agents HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n{")
    return connection


def test_slow_uploads_do_not_refuse_the_api_servers_reviews(stack: dict[str, Any]) -> None:
    """N9: the declared length was reserved before a byte arrived: seven such connections
    (no client authentication needed) answered every review 503 BUSY, and with
    ``failurePolicy: Fail`` the API server refused every Agent. Bounded: eight connections on
    loopback, the verdict within the webhook's 10 s body deadline."""
    opened = time.monotonic()
    uploads = [_slow_upload(stack["port"], stack["ca"]) for _ in range(SLOW_UPLOADS)]
    try:
        time.sleep(0.5)  # Their heads are parsed: on the old code each held 1 MiB by now.
        verdict = _apply(stack["cp"], agent("beside-slow-uploads"), stack["tmp"])
        assert time.monotonic() - opened < 10.0, "the uploads' body deadline passed first"
    finally:
        for upload in uploads:
            upload.close()
    assert verdict == "allow", verdict
    stack["cp"].kubectl("delete", "agent", "-n", NS, "beside-slow-uploads")


def test_stopped_webhook_fails_closed(stack: dict[str, Any]) -> None:
    """What the Pod hooks' failurePolicy Fail means for kagent (docs/memory.md §11): while the
    webhook is down no kagent Agent Pod (memory-enabled or not) is created in a namespace the
    hooks cover, nor any Pod at all in a namespace labelled for routing; other Pods, also ones
    labelled only ``app: kagent``, are created as usual."""
    processes.stop(stack["webhook"])
    verdict = _apply(stack["cp"], agent("after-stop"), stack["tmp"])
    assert "failed calling webhook" in verdict, verdict
    other_agent = {"app": "kagent", "kagent": "plain-agent"}
    outcomes = {}
    for ns, labels, account in ((PLAIN_NS, other_agent, "default"),
                                (PLAIN_NS, {"app": "kagent"}, "default"),
                                (PLAIN_NS, {"app": "web"}, "default"),
                                (NS, {"app": "web"}, "default")):
        pod = _pod("down", [], labels=labels, account=account)
        pod["metadata"]["namespace"] = ns
        verdict, _ = _create_pod(stack, pod)
        outcomes[(ns, tuple(labels.values()))] = "failed calling webhook" in verdict or verdict
    assert outcomes == {
        (PLAIN_NS, ("kagent", "plain-agent")): True,  # an Agent's Pod: refused
        (PLAIN_NS, ("kagent",)): "allow",  # not an Agent's Pod: not the hooks' business
        (PLAIN_NS, ("web",)): "allow",
        (NS, ("web",)): True,  # a namespace labelled for routing: every Pod
    }


def _only(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


def test_admission_policy_alone_blocks_authorization(control_plane: Any, tmp_path: Path) -> None:
    namespace = f"vap-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(namespace)
    for doc in scoped_policies([admission_policy()], _only(namespace), uuid.uuid4().hex[:6]):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(doc))
    leaky = agent("leaky", mcp(OTHER, ["t"], allowedHeaders=["Authorization"]))
    leaky["metadata"]["namespace"] = namespace
    safe = agent("safe", mcp(OTHER, ["t"], allowedHeaders=["x-fgentic-identity"]))
    safe["metadata"]["namespace"] = namespace
    verdict = _refused_once_loaded(control_plane, leaky, tmp_path)
    assert "ValidatingAdmissionPolicy" in verdict and "FORBIDDEN_HEADER" in verdict, verdict
    # The identity carrier is the webhook's call (it needs bindings), not the policy's.
    assert _apply(control_plane, safe, tmp_path) == "allow"
    headers_from = agent("hf", with_headers_from(mcp(OTHER, ["t"]), "X-Fgentic-Identity"))
    headers_from["metadata"]["namespace"] = namespace
    assert "FORBIDDEN_HEADERS_FROM" in _apply(control_plane, headers_from, tmp_path)


def test_generated_policies_alone_refuse_every_stateless_rule(control_plane: Any,
                                                              tmp_path: Path) -> None:
    """Issue 27: the ValidatingAdmissionPolicies generated from admission/cel.py hold with no
    webhook at all: a memory-enabled Agent without ttlDays, a non-token headersFrom name and
    a MemoryScope of another homeserver, and one of a bridge's puppet declared native-local
    (issue 38 §2), are refused by the API server itself, with the webhook's own code and
    sentence; their near misses pass."""
    namespace = f"vapgen-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(namespace)
    registry = telegram("fgentic.local")
    for doc in scoped_policies([admission_policy(),
                                scope_policy("fgentic.local", appservice=registry)],
                               _only(namespace), uuid.uuid4().hex[:6]):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(doc))
    no_ttl = agent("no-ttl", memory={"modelConfig": "embed"})
    odd_name = agent("odd", with_headers_from(mcp(OTHER, ["t"]), "X-Tr\u0430ce"))
    far = _scope("far", "x")
    far["spec"]["subject"]["mxid"] = "@alice:elsewhere.example"
    near = _scope("near", "x")
    bridged = _scope("bridged", "x")
    bridged["spec"]["subject"]["mxid"] = puppet("fgentic.local")
    for doc in (no_ttl, odd_name, far, near, bridged):
        doc["metadata"]["namespace"] = namespace
    verdict = _refused_once_loaded(control_plane, no_ttl, tmp_path)
    assert "ValidatingAdmissionPolicy" in verdict and "MEMORY_TTL_MISSING: set" in verdict
    assert "FORBIDDEN_HEADERS_FROM: " in _apply(control_plane, odd_name, tmp_path)
    verdict = _refused_once_loaded(control_plane, far, tmp_path)
    assert "ValidatingAdmissionPolicy" in verdict and "FEDERATION_DENIED: " in verdict, verdict
    verdict = _apply(control_plane, bridged, tmp_path)
    assert "ValidatingAdmissionPolicy" in verdict and "APPSERVICE_IDENTITY_DENIED: " in verdict, \
        verdict
    assert _apply(control_plane, near, tmp_path) == "allow"
    with_ttl = agent("ttl", memory={"modelConfig": "embed", "ttlDays": 3})
    with_ttl["metadata"]["namespace"] = namespace
    assert _apply(control_plane, with_ttl, tmp_path) == "allow"


def _kubectl_apply(cp: Any, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`kubectl apply`, keeping stderr (where kubectl prints admission warnings) on success."""
    return subprocess.run([str(binary("kubectl")), "--kubeconfig", str(cp.kubeconfig), "apply",
                           "-f", "-"], input=json.dumps(doc), capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_rule_set_to_warn_admits_with_a_warning_and_the_rest_still_deny(
        stack: dict[str, Any], tmp_path: Path) -> None:
    """Issue 27 roll-out: with --warn-rule, the TTL rules (whose bound the store holds anyway)
    admit with a Kubernetes warning naming the code, the path and what to change; a rule that
    may not warn still denies beside them; a rule outside WARNABLE stops start-up."""
    cp = stack["cp"]
    warn, port, ca = processes.spawn_webhook(
        cp.kubeconfig, tmp_path, memory_api_url=GOVERNED_URL,
        memory_api_ready_url=stack["memory_ready"],
        extra=["--warn-rule", "MEMORY_TTL_MISSING", "--warn-rule", "MEMORY_TTL_EXCEEDS_RETENTION"])
    refused = processes.spawn_cli(["webhook", "--kubeconfig", str(cp.kubeconfig), "--tls-dir",
                                   str(tmp_path / "tls"), "--warn-rule", "FORBIDDEN_HEADER"],
                                  tmp_path / "refused.log")
    assert refused.wait(60) == 2
    assert "--warn-rule FORBIDDEN_HEADER: only MEMORY_TTL_EXCEEDS_RETENTION, " \
        "MEMORY_TTL_MISSING may warn" in (tmp_path / "refused.log").read_text()
    config = copy.deepcopy(stack["config"])
    for hook in config["webhooks"]:
        hook["clientConfig"]["url"] = hook["clientConfig"]["url"].replace(
            f":{stack['port']}/", f":{port}/")
        hook["clientConfig"]["caBundle"] = base64.b64encode(ca).decode()
    cp.kubectl("apply", "-f", "-", input=json.dumps(config))
    try:
        no_ttl = agent("memory-agent", memory={"modelConfig": "embed"})
        # The API server picks the new configuration up in a moment.
        done = until(lambda: _kubectl_apply(cp, no_ttl), "the new configuration in use", 10,
                     interval=0.5, holds=lambda done: done.returncode == 0)
        assert "Warning: MEMORY_TTL_MISSING at spec.declarative.memory" in done.stderr
        cp.kubectl("delete", "agent", "-n", NS, "memory-agent")
        too_long = agent("memory-agent", memory={"modelConfig": "embed", "ttlDays": 5})
        done = _kubectl_apply(cp, too_long)
        assert done.returncode == 0, done.stderr
        assert "Warning: MEMORY_TTL_EXCEEDS_RETENTION at " in done.stderr
        cp.kubectl("delete", "agent", "-n", NS, "memory-agent")
        leaky = agent("memory-agent", mcp(OTHER, ["t"], allowedHeaders=["Authorization"]),
                      memory={"modelConfig": "embed"})
        done = _kubectl_apply(cp, leaky)
        assert done.returncode != 0 and "FORBIDDEN_HEADER at " in done.stderr, done.stderr
        assert "MEMORY_TTL_MISSING" not in done.stderr.partition("denied the request")[2]
    finally:
        cp.kubectl("apply", "-f", "-", input=json.dumps(stack["config"]))
        processes.stop(warn)


def test_the_charts_warn_policy_warns_where_the_deny_policy_no_longer_refuses(
        control_plane: Any, tmp_path: Path) -> None:
    """Issue 27: the chart with webhook.warnRules=[MEMORY_TTL_MISSING] moves that rule from its
    Deny ValidatingAdmissionPolicy to a Warn/Audit one; the API server itself then admits an
    Agent without ttlDays with a warning, and still refuses the other stateless rules."""
    rendered = subprocess.run(
        [str(binary("helm")), "template", "fg", str(CHART), "--set-json",
         "webhook.networkPolicy.apiServerSources=[]", "--set",
         "webhook.warnRules={MEMORY_TTL_MISSING}"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"].startswith(
        "ValidatingAdmissionPolicy") and d["metadata"]["name"] in ("fg-agents", "fg-agents-warn")]
    policies = [(p, b) for p in docs if p["kind"] == "ValidatingAdmissionPolicy"
                for b in docs if b["kind"] == "ValidatingAdmissionPolicyBinding"
                and b["spec"]["policyName"] == p["metadata"]["name"]]
    assert len(policies) == 2
    namespace = f"vapwarn-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(namespace)
    for doc in scoped_policies(policies, _only(namespace), uuid.uuid4().hex[:6]):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(doc))
    odd = agent("odd", with_headers_from(mcp(OTHER, ["t"]), "X-Tr\u0430ce"))
    odd["metadata"]["namespace"] = namespace
    verdict = _refused_once_loaded(control_plane, odd, tmp_path)
    assert "FORBIDDEN_HEADERS_FROM: " in verdict
    no_ttl = agent("no-ttl", memory={"modelConfig": "embed"})
    no_ttl["metadata"]["namespace"] = namespace

    def warned() -> subprocess.CompletedProcess[str]:
        done = _kubectl_apply(control_plane, no_ttl)
        if done.returncode == 0 and "Warning" not in done.stderr:
            control_plane.kubectl("delete", "agent", "-n", namespace, "no-ttl")
        return done

    done = until(warned, "the warn policy loaded (it loads on its own)", 20, interval=0.5,
                 holds=lambda done: done.returncode != 0 or "Warning" in done.stderr)
    assert done.returncode == 0, done.stderr
    assert "Warning: Validation failed for ValidatingAdmissionPolicy" in done.stderr, done.stderr
    assert "MEMORY_TTL_MISSING: set memory.ttlDays" in done.stderr
