"""The admission policy samples (examples/policy/<CODE>/) through the real kube-apiserver.

Per code, in a namespace of its own: setup.yaml is applied, then allowed.yaml and denied.yaml
are created with server-side dry-run (``dryRun=All``: admission runs, nothing is stored). The
first is admitted; the second is refused with exactly that code, by the real webhook process
behind its ValidatingWebhookConfiguration, or first by the ValidatingAdmissionPolicy for the
stateless header rules it enforces (then the webhook alone must deny the same object too). The
operator (with PostgreSQL) gives demo-profile MemoryScopes the status gates memory rules read.
examples/policy/README.md describes the samples and the codes no object can produce.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.admission.cel import STATELESS_RULES
from fgentic_governance.admission.policy import AdmissionCode
from fgentic_governance.admission.render import (
    admission_policy,
    scope_policy,
    webhook_configuration,
)
from fgentic_governance.admission.views import scope_view
from fgentic_governance.api.appservice import FLAG, parse_registry
from tests.support import processes
from tests.support.objects import api_message, scoped_policies
from tests.support.polling import until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "policy"
PLACEHOLDER = "policy-samples"
"""The namespace every sample names; rewritten to a namespace per code."""
SAMPLES = sorted(p.name for p in POLICY.iterdir() if p.is_dir())
VAP_CODES = frozenset(rule.code.value for rule in STATELESS_RULES)
"""The codes the ValidatingAdmissionPolicy enforces (its messages start with the code)."""
NEAR_MISS = 1
"""Values (leaves) in which allowed.yaml differs from denied.yaml."""
GATE_SECONDS = 60.0
GOVERNED_URL = "http://fgentic-memory-api.fgentic-system.svc:8083"
"""The memory API URL the samples' webhook routes Pods to (what the chart would give it); the
webhook asks the real memory API process on loopback whether it is ready."""
ENFORCED_SECONDS = 30.0
APPSERVICE = parse_registry(json.dumps(yaml.safe_load((POLICY / "suite.yaml").read_text())[
    "settings"]["appserviceNamespaces"]))
"""The offline suite's appservice-namespace registry: the webhook's --appservice-namespaces and
the MemoryScope policy's appservice rule (one registry)."""
APPSERVICE_FLAG = (FLAG, APPSERVICE.flag_value())


def namespace(code: str) -> str:
    return "policy-" + code.lower().replace("_", "-")


def _rewrite(node: Any, ns: str) -> Any:
    if isinstance(node, dict):
        return {key: _rewrite(value, ns) for key, value in node.items()}
    if isinstance(node, list):
        return [_rewrite(value, ns) for value in node]
    return ns if node == PLACEHOLDER else node


def load(code: str, name: str) -> list[dict[str, Any]]:
    """The documents of examples/policy/<code>/<name>, in the code's namespace (none if absent)."""
    path = POLICY / code / name
    if not path.is_file():
        return []
    return [_rewrite(doc, namespace(code)) for doc in yaml.safe_load_all(path.read_text()) if doc]


def _leaves(node: Any, path: str = "") -> dict[str, Any]:
    """Every scalar (or empty container) of a document by its path."""
    if isinstance(node, dict) and node:
        items = [(f"{path}.{key}", value) for key, value in node.items()]
    elif isinstance(node, list) and node:
        items = [(f"{path}[{index}]", value) for index, value in enumerate(node)]
    else:
        return {path: node}
    return {leaf: value for sub, child in items for leaf, value in _leaves(child, sub).items()}


def changed_leaves(a: Any, b: Any) -> list[str]:
    left, right = _leaves(a), _leaves(b)
    return sorted(k for k in left.keys() | right.keys() if left.get(k, ...) != right.get(k, ...))


def codes(denial: str) -> list[str]:
    """The codes of a webhook denial message: ``CODE at PATH[ (header)]``, joined by ``; ``."""
    return [part.split(" at ", 1)[0] for part in denial.split("; ")]


def readme_codes(heading: str) -> dict[str, str]:
    """Code -> its table row, from one ``## heading`` section of examples/policy/README.md."""
    text = (POLICY / "README.md").read_text()
    assert f"\n## {heading}\n" in text, heading
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([A-Z_]+)` \|.*$", section, re.M)}


# -- the stack: webhook + admission policy + operator, one per module ---------------------------


def api_group(api_version: str) -> str:
    """``group/version``, or ``""`` for the core group's bare ``v1``."""
    return api_version.split("/", maxsplit=1)[0] if "/" in api_version else ""


CORE = {("", "Pod"): ("pods", True), ("", "ServiceAccount"): ("serviceaccounts", True)}
"""The core kinds samples use (the Pod routing rule and its service account)."""


@dataclass
class Stack:
    cp: Any
    api: client.CustomObjectsApi
    core: client.CoreV1Api
    resources: dict[tuple[str, str], tuple[str, bool]]
    """(group, kind) -> (plural, namespaced), from the installed CRDs."""
    routes: dict[str, str]
    """API group -> the webhook URL its objects are reviewed at (from our configuration)."""
    tls: ssl.SSLContext
    operator_log: Path
    cluster_objects: list[dict[str, Any]] = field(default_factory=list)

    def dry_run(self, doc: dict[str, Any]) -> str | None:
        """Create ``doc`` with ``dryRun=All``: None when admitted, else the refusal message."""
        group, version = api_group(doc["apiVersion"]), doc["apiVersion"].split("/")[-1]
        plural, namespaced = self.resources[(group, doc["kind"])]
        try:
            if doc["kind"] == "Pod":
                self.core.create_namespaced_pod(doc["metadata"]["namespace"], doc,
                                                dry_run="All")
            elif namespaced:
                self.api.create_namespaced_custom_object(
                    group, version, doc["metadata"]["namespace"], plural, doc, dry_run="All")
            else:
                self.api.create_cluster_custom_object(group, version, plural, doc,
                                                      dry_run="All")
        except ApiException as exc:
            return f"{exc.status}: {api_message(exc)}"
        return None

    def review(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The webhook's own answer to a CREATE review of ``doc``, sent straight to it."""
        group = api_group(doc["apiVersion"])
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "object": doc,
                            "namespace": doc["metadata"].get("namespace", "")}}
        request = urllib.request.Request(self.routes[group], data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=self.tls, timeout=10) as answer:
            response: dict[str, Any] = json.load(answer)["response"]
        return response


def _probe(ns: str, headers: list[str]) -> dict[str, Any]:
    return {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"name": "policy-probe", "namespace": ns},
            "spec": {"type": "Declarative", "declarative": {
                "modelConfig": "m", "systemMessage": "probe", "tools": [
                    {"type": "McpServer", "mcpServer": {"name": "probe", "toolNames": ["t"],
                                                        "allowedHeaders": headers}}]}}}


def _wait_enforced(stack: Stack, ns: str) -> None:
    """Both the admission policy and our webhook take a moment to be loaded."""
    until(lambda: (stack.dry_run(_probe(ns, ["Authorization"])) or "admitted",
                   stack.dry_run(_probe(ns, ["X-Fgentic-Identity"])) or "admitted"),
          "admission enforced by the policy and the webhook", ENFORCED_SECONDS, interval=0.25,
          holds=lambda verdicts: "ValidatingAdmissionPolicy" in verdicts[0]
          and "IDENTITY_HEADER_UNBOUND at" in verdicts[1])


@pytest.fixture(scope="module")
def stack(control_plane: Any, postgres: Any, k8s_client: client.ApiClient,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("policy-samples")
    namespaces = [namespace(code) for code in SAMPLES]
    for ns in namespaces:
        control_plane.ensure_namespace(ns)
    crds = client.ApiextensionsV1Api(k8s_client).list_custom_resource_definition().items
    resources = {(c.spec.group, c.spec.names.kind): (c.spec.names.plural,
                                                      c.spec.scope == "Namespaced")
                 for c in crds} | CORE
    suffix = uuid.uuid4().hex[:6]
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                      "values": namespaces}]}
    with contextlib.ExitStack() as cleanup:
        # The operator only where a MemoryScope needs its status (never cluster-wide).
        operated = [namespace(code) for code in SAMPLES
                    if any(doc["kind"] == "MemoryScope" for doc in load(code, "setup.yaml"))]
        if operated:
            dsn = asyncio.run(postgres.create_database(f"policy_samples_{suffix}", ("vector",)))
            (work / "dsn").write_text(dsn)
            operator = processes.spawn_operator(control_plane.kubeconfig, work / "dsn",
                                                operated, work / "operator.log")
            cleanup.callback(processes.stop, operator)
        memory_api, memory_port = processes.spawn_memory_api(
            control_plane.kubeconfig, work / "dsn", "http://127.0.0.1:9", work / "memory.log")
        cleanup.callback(processes.stop, memory_api)
        webhook, port, ca = processes.spawn_webhook(
            control_plane.kubeconfig, work, memory_api_url=GOVERNED_URL,
            memory_api_ready_url=f"http://127.0.0.1:{memory_port}",
            memory_model_url=GOVERNED_URL + "/v1", extra=APPSERVICE_FLAG)
        cleanup.callback(processes.stop, webhook)
        config = webhook_configuration(f"policy-samples-{suffix}", f"https://127.0.0.1:{port}",
                                       ca, memory_routing=True)
        for hook in config["webhooks"]:
            hook["namespaceSelector"] = selector
        policies = scoped_policies([admission_policy(),
                                    scope_policy("fgentic.local", appservice=APPSERVICE)],
                                   selector, f"-{suffix}")
        for doc in (*policies, config):
            control_plane.kubectl("apply", "-f", "-", input=json.dumps(doc))
            cleanup.callback(control_plane.kubectl, "delete", "--ignore-not-found", "--wait=false",
                             f"{doc['kind'].lower()}.admissionregistration.k8s.io",
                             doc["metadata"]["name"])
        routes = {group: hook["clientConfig"]["url"] for hook in config["webhooks"]
                  for rule in hook["rules"] for group in rule["apiGroups"]}
        made = Stack(control_plane, client.CustomObjectsApi(k8s_client),
                     client.CoreV1Api(k8s_client), resources, routes,
                     ssl.create_default_context(cadata=ca.decode()), work / "operator.log")
        cleanup.callback(_delete_cluster_objects, made)  # Runs before the processes stop.
        _wait_enforced(made, namespaces[0])
        yield made


def _delete_cluster_objects(stack: Stack) -> None:
    for doc in stack.cluster_objects:  # Namespaced ones stay: nothing deletes namespaces here.
        group = api_group(doc["apiVersion"])
        plural, _ = stack.resources[(group, doc["kind"])]
        stack.cp.kubectl("delete", "--ignore-not-found", "--wait=false", f"{plural}.{group}",
                         doc["metadata"]["name"])


def _set_up(stack: Stack, code: str) -> None:
    docs = load(code, "setup.yaml")
    if not docs:
        return
    for doc in docs:
        if not stack.resources[(api_group(doc["apiVersion"]), doc["kind"])][1]:
            stack.cluster_objects.append(doc)
    # Agents last: a memory-enabled Agent is admitted only once its demo scope is gated.
    agents = [doc for doc in docs if doc["kind"] == "Agent"]
    stack.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        [doc for doc in docs if doc["kind"] != "Agent"]))
    for doc in docs:
        if doc["kind"] == "MemoryScope" and doc["spec"].get("profile") == "demo":
            _wait_gated(stack, doc)
    if agents:
        stack.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(agents))


def _wait_gated(stack: Stack, scope: dict[str, Any]) -> None:
    """Until the scope's status shows the gates exactly as the webhook reads them."""
    group, version = scope["apiVersion"].split("/")
    plural, _ = stack.resources[(group, scope["kind"])]
    meta = scope["metadata"]
    try:
        until(lambda: stack.api.get_namespaced_custom_object(group, version, meta["namespace"],
                                                             plural, meta["name"]),
              f"{meta['namespace']}/{meta['name']} gated", GATE_SECONDS,
              holds=lambda obj: scope_view(obj).gates_hold)
    except AssertionError as exc:
        log = stack.operator_log.read_text()[-2000:] if stack.operator_log.exists() else ""
        raise AssertionError(f"{exc}\noperator log tail:\n{log}") from None


# -- the suite ----------------------------------------------------------------------------------


def test_every_code_has_samples_or_a_documented_reason() -> None:
    sampled = set(SAMPLES)
    documented = readme_codes("Codes without samples")
    assert sampled.isdisjoint(documented), sampled & documented.keys()
    assert sampled | documented.keys() == {code.value for code in AdmissionCode}
    assert readme_codes("Samples").keys() == sampled
    for code, row in documented.items():  # Each reason names a test that exists.
        tests = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row)
        assert tests, code
        for path, name in tests:
            assert f"def {name}(" in (ROOT / path).read_text(), (code, path, name)


@pytest.mark.parametrize("code", SAMPLES)
def test_policy_sample(stack: Stack, code: str) -> None:
    allowed, denied = load(code, "allowed.yaml"), load(code, "denied.yaml")
    assert len(allowed) == 1 and len(denied) == 1, "one document in each of allowed/denied.yaml"
    near = changed_leaves(allowed[0], denied[0])
    assert len(near) == NEAR_MISS, f"allowed.yaml is not a near miss of denied.yaml: {near}"
    _set_up(stack, code)

    verdict = stack.dry_run(allowed[0])
    assert verdict is None, f"{code}/allowed.yaml refused: {verdict}"
    message = stack.dry_run(denied[0])
    assert message is not None, f"{code}/denied.yaml admitted"
    if "ValidatingAdmissionPolicy" in message:
        # Evaluated in the API server before the webhook; the webhook must agree on its own.
        assert code in VAP_CODES, message
        assert f"denied request: {code}:" in message, message
        answer = stack.review(denied[0])
        assert answer["allowed"] is False, answer
        assert codes(answer["status"]["message"]) == [code], answer
    else:
        head, marker, denial = message.partition(" denied the request: ")
        assert marker and "admission webhook" in head, message
        assert codes(denial) == [code], message


MALFORMED: list[tuple[str, dict[str, Any]]] = [
    ("tools-not-a-list", {"tools": "not-a-list"}),
    ("tool-null", {"tools": [None]}),
    ("mcp-server-list", {"tools": [{"type": "McpServer", "mcpServer": ["x-fgentic-identity"]}]}),
    ("headers-from-string", {"tools": [{"type": "McpServer", "mcpServer": {"name": "s"},
                                        "headersFrom": ["Authorization"]}]}),
    ("memory-string", {"memory": "kagent-memory"}),
]


@pytest.mark.parametrize("declarative", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_agents_never_reach_admission(stack: Stack,
                                                declarative: dict[str, Any]) -> None:
    """Why MALFORMED_OBJECT has no sample: the kagent schema refuses these shapes (422) first."""
    doc = _probe(namespace(SAMPLES[0]), [])
    doc["metadata"]["name"] = "malformed"
    doc["spec"]["declarative"].update(declarative)
    message = stack.dry_run(doc)
    assert message is not None and message.startswith("422: "), message
    assert "admission webhook" not in message and "MALFORMED_OBJECT" not in message, message
