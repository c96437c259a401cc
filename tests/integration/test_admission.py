"""The admission webhook through the real kube-apiserver, with the real operator and store.

`kubectl apply` of good and bad kagent Agents (and our own kinds) gives exact verdicts; the
webhook fails closed when stopped; the ValidatingAdmissionPolicy alone blocks Authorization.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_admission.render import admission_policy, webhook_configuration
from fgentic_governance.api.common import GROUP
from fgentic_governance.devenv.controlplane import KubectlError
from tests.support import processes
from tests.support.objects import api_message, example

pytestmark = pytest.mark.integration
NS = "admission"
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
    dsn = asyncio.run(postgres.create_database(f"admission_{uuid.uuid4().hex[:8]}", ("vector",)))
    (work / "dsn").write_text(dsn)
    operator = processes.spawn_operator(control_plane.kubeconfig, work / "dsn", [NS],
                                        work / "operator.log")
    webhook, port, ca = processes.spawn_webhook(control_plane.kubeconfig, work,
                                                audit_interval=1)
    config = webhook_configuration(f"admission-{uuid.uuid4().hex[:6]}",
                                   f"https://127.0.0.1:{port}", ca)
    for hook in config["webhooks"]:
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(config))
    for doc in (_binding(), _scope("gated", "memory-agent", policy={"maxRetentionDays": 3}),
                _scope("ungated", "ungated-agent", profile="default", posture="fully_disabled")):
        assert _apply(control_plane, doc, work) == "allow"
    _wait_gated(k8s_client, "gated")
    yield {"cp": control_plane, "tmp": work, "webhook": webhook, "config": config,
           "log": work / "webhook.log"}
    processes.stop(webhook)
    processes.stop(operator)
    control_plane.kubectl("delete", "validatingwebhookconfiguration",
                          config["metadata"]["name"])


def _wait_gated(api_client: client.ApiClient, name: str) -> None:
    api = client.CustomObjectsApi(api_client)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = api.get_namespaced_custom_object(GROUP, "v1alpha1", NS, "memoryscopes",
                                                  name).get("status", {})
        if {c["type"]: c["status"] for c in status.get("conditions", [])}.get(
                "ConsentGated") == "True":
            return
        time.sleep(0.2)
    raise AssertionError(f"scope {name} never became consent-gated: {status}")


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
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = core.list_namespaced_event(NS, field_selector="reason=PolicyViolation").items
        mine = [e for e in events if e.involved_object.name == "pre-existing"]
        if mine:
            assert "FORBIDDEN_HEADER" in mine[0].message
            return
        time.sleep(0.5)
    raise AssertionError("audit never reported the pre-existing violation")


def test_stopped_webhook_fails_closed(stack: dict[str, Any]) -> None:
    processes.stop(stack["webhook"])
    verdict = _apply(stack["cp"], agent("after-stop"), stack["tmp"])
    assert "failed calling webhook" in verdict, verdict


def test_admission_policy_alone_blocks_authorization(control_plane: Any, tmp_path: Path) -> None:
    namespace = f"vap-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(namespace)
    policy, binding = admission_policy()
    suffix = uuid.uuid4().hex[:6]
    policy["metadata"]["name"] += suffix
    binding["metadata"]["name"] += suffix
    binding["spec"]["policyName"] = policy["metadata"]["name"]
    binding["spec"]["matchResources"] = {"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    for doc in (policy, binding):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(doc))
    leaky = agent("leaky", mcp(OTHER, ["t"], allowedHeaders=["Authorization"]))
    leaky["metadata"]["namespace"] = namespace
    safe = agent("safe", mcp(OTHER, ["t"], allowedHeaders=["x-fgentic-identity"]))
    safe["metadata"]["namespace"] = namespace
    deadline = time.monotonic() + 20
    verdict = "allow"
    while time.monotonic() < deadline:  # The policy takes a moment to be loaded.
        verdict = _apply(control_plane, leaky, tmp_path)
        if verdict != "allow":
            break
        control_plane.kubectl("delete", "agent", "-n", namespace, "leaky")
        time.sleep(0.5)
    assert "ValidatingAdmissionPolicy" in verdict and "FORBIDDEN_HEADER" in verdict, verdict
    # The identity carrier is the webhook's call (it needs bindings), not the policy's.
    assert _apply(control_plane, safe, tmp_path) == "allow"
    headers_from = agent("hf", with_headers_from(mcp(OTHER, ["t"]), "X-Fgentic-Identity"))
    headers_from["metadata"]["namespace"] = namespace
    assert "FORBIDDEN_HEADERS_FROM" in _apply(control_plane, headers_from, tmp_path)
