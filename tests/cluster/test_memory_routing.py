"""Issue 17 §3 on the node: a memory-enabled Agent's Pod, as kagent v0.9.11 would run it, is
rewritten by the webhook to send memory to the memory API, whose pods authenticate the Pod's
projected token by TokenReview, gate every call by the store's delegation lease, and pass
everything else to kagent's controller; the chart's NetworkPolicy lets the routed Pod reach
the controller only through the memory API (kube-router enforces it), while an unrouted Pod
in the same namespace still reaches it (the negative control).

kagent's controller is a stand-in: an HTTP echo in namespace ``kagent`` behind the Service
the chart's ``memoryApi.controllerUrl`` names. The Agent's Pod runs our image's Python.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fgentic_governance.api.kagent import app_name
from fgentic_governance.memory import MemoryStore
from fgentic_governance.memoryapi.model_requests import SUMMARY_HEAD, SUMMARY_TAIL
from tests.support.cluster import (
    PYTHON,
    Release,
    access,
    apply,
    client_pod,
    converge,
    entry_count,
    kubectl_result,
    phase_is,
    ready,
    scope_and_consent,
    scope_status,
)
from tests.support.store import leased_turn, migrated_pool

NS = "team-mem"  # conftest.AGENT_NAMESPACE: the chart renders the routed-egress policy here
AGENT = "mem-agent"
SCOPE = "alice-mem-agent"
ALICE = "@alice:fgentic.local"
CONTROLLER_IP = "10.96.77.13"  # conftest.CONTROLLER_IP (the node has no Service DNS)
CONTROLLER_URL = f"http://{CONTROLLER_IP}:8083"
ECHO = """
import http.server, json
class Echo(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        body = json.dumps({"echo": self.path}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _answer
    def log_message(self, *args): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8083), Echo).serve_forever()
"""
IDLE = "import threading; threading.Event().wait()"
CALL = """
import json, sys, urllib.error, urllib.request
method, url, body, headers = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
token_file = headers.pop("token-file", None)
if token_file:
    headers["Authorization"] = "Bearer " + open(token_file).read().strip()
request = urllib.request.Request(url, data=body.encode() if body else None, method=method,
                                 headers=headers)
try:
    with urllib.request.urlopen(request, timeout=5) as answer:
        print(answer.status, answer.read().decode())
except urllib.error.HTTPError as error:
    print(error.code, error.read().decode())
except OSError as error:
    print("unreachable", type(error).__name__)
"""
TOKEN_FILE = "/var/run/secrets/tokens/kagent-token"


def agent_pod(image: str) -> dict[str, Any]:
    """What kagent's controller renders for a memory-enabled Agent (manifest_builder.go at
    v0.9.11): its labels and service account, the projected token with audience kagent, and
    its own KAGENT_URL appended last."""
    pod = client_pod(NS, "mem-agent-pod", image, IDLE,
                     labels={"app": "kagent", "kagent": AGENT}, service_account=AGENT)
    spec = pod["spec"]
    spec["volumes"] = [{"name": "kagent-token", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "kagent", "expirationSeconds": 3600,
                                 "path": "kagent-token"}}]}}]
    container = spec["containers"][0]
    container["volumeMounts"] = [{"name": "kagent-token", "mountPath": "/var/run/secrets/tokens",
                                  "readOnly": True}]
    container["env"] = [{"name": "KAGENT_URL", "value": CONTROLLER_URL},
                        {"name": "LOG_LEVEL", "value": "INFO"}]
    return pod


@pytest.fixture(scope="module")
def routed(release: Release, image: tuple[Any, str]) -> dict[str, Any]:
    cluster = release.cluster
    apply(cluster, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": NS, "labels": {"fgentic.dev/memory-routing": "enabled"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kagent"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {
            "name": "kagent-controller", "namespace": "kagent"},
         "spec": {"clusterIP": CONTROLLER_IP, "selector": {"app": "controller-stand-in"},
                  "ports": [{"port": 8083, "targetPort": 8083}]}},
        client_pod("kagent", "controller", image[1], ECHO,
                   labels={"app": "controller-stand-in"}),
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": AGENT, "namespace": NS}},
        *scope_and_consent(NS, SCOPE, "alice", agent=AGENT),
        # The Agent's model and its memory's embedding model at the governed routes: the
        # webhook admits a memory-enabled Agent only then (MEMORY_MODEL_UNGOVERNED).
        *(model_config(name, release.values["memoryApi"]["url"] + "/v1") for name in "me"),
    ])
    converge(lambda: phase_is(cluster, SCOPE, "Enabled", ns=NS), "the scope enabled")
    agent = {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
             "metadata": {"name": AGENT, "namespace": NS},
             "spec": {"type": "Declarative", "declarative": {
                 "modelConfig": "m", "systemMessage": "help",
                 "memory": {"modelConfig": "e", "ttlDays": 3}}}}

    def admitted() -> bool:  # once the webhook has seen the memory API ready
        return kubectl_result(cluster, "apply", "-f", "-",
                              input=json.dumps(agent)).returncode == 0

    converge(admitted, "the memory-enabled Agent admitted", timeout=90, interval=2)
    plain = client_pod(NS, "plain-pod", image[1], IDLE)
    plain["spec"]["automountServiceAccountToken"] = False
    apply(cluster, [agent_pod(image[1]), plain])
    pods = {}
    for ns, name in ((NS, "mem-agent-pod"), (NS, "plain-pod"), ("kagent", "controller")):
        pods[name] = converge(lambda ns=ns, name=name: _ready(release, ns, name),
                              f"{name} ready")
    args = release.pods("webhook")[0]["spec"]["containers"][0]["args"]
    governed = next(a for a in args if a.startswith("--memory-api-url=")).split("=", 1)[1]
    return {"pods": pods, "governed": governed}


def model_config(name: str, base_url: str) -> dict[str, Any]:
    return {"apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"model": "stub", "provider": "OpenAI", "openAI": {"baseUrl": base_url}}}


def _ready(release: Release, ns: str, name: str) -> dict[str, Any] | None:
    pod = release.json("get", "pod", "-n", ns, name)
    return pod if ready(pod) and pod["status"].get("podIP") else None


def call(release: Release, pod: str, method: str, url: str, *, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[str, str]:
    out = release.kubectl(
        "exec", "-n", NS, pod, "--", PYTHON, "-c", CALL, method, url,
        "" if body is None else json.dumps(body), json.dumps(headers or {}), timeout=30)
    status, _, rest = out.strip().partition(" ")
    return status, rest


def runtime_headers(user: str = ALICE) -> dict[str, str]:
    """What kagent's runtime sends (RUNTIME.md): its app name, the user, its token."""
    return {"X-Agent-Name": app_name(NS, AGENT), "X-User-Id": user,
            "token-file": TOKEN_FILE, "Content-Type": "application/json"}


def memory_body(content: str | None = None, user: str = ALICE) -> dict[str, Any]:
    body: dict[str, Any] = {"agent_name": app_name(NS, AGENT), "user_id": user,
                            "vector": [0.03125] * 768}
    if content is not None:
        body["content"] = content
    else:
        body.update(limit=5, min_score=0.3)
    return body


def test_the_agents_pod_is_routed_to_the_memory_api(release: Release,
                                                   routed: dict[str, Any]) -> None:
    pod = routed["pods"]["mem-agent-pod"]
    env = pod["spec"]["containers"][0]["env"]
    # The proxies of an http memory API set empty (the API server omits an empty value).
    assert env == [{"name": "KAGENT_URL", "value": routed["governed"]},
                   {"name": "LOG_LEVEL", "value": "ERROR"},
                   *({"name": n, "value": "false"} for n in (
                       "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", "TRACELOOP_TRACE_CONTENT",
                       "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")),
                   *({"name": n} for n in (
                       "KAGENT_CONFIG_JSON", "KAGENT_AGENT_CARD_JSON", "KAGENT_SRT_SETTINGS_JSON",
                       "KAGENT_TOKEN", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"))]
    assert pod["metadata"]["labels"]["fgentic.dev/memory-routed"] == "true"
    plain = routed["pods"]["plain-pod"]
    assert "fgentic.dev/memory-routed" not in plain["metadata"].get("labels", {})
    # The routed label cannot be dropped afterwards (the NetworkPolicy keys on it).
    result = kubectl_result(release.cluster, "label", "pod", "-n", NS, "mem-agent-pod",
                            "fgentic.dev/memory-routed-")
    assert result.returncode != 0 and "MEMORY_RUNTIME_UNGOVERNED" in result.stderr


def test_routed_pods_reach_the_controller_only_through_the_memory_api(
        release: Release, routed: dict[str, Any]) -> None:
    governed = routed["governed"]
    seen: dict[str, tuple[str, str]] = {}

    def enforced() -> bool:
        seen["direct"] = call(release, "mem-agent-pod", "GET", CONTROLLER_URL + "/api/tasks/t")
        seen["through"] = call(release, "mem-agent-pod", "GET", governed + "/api/tasks/t?x=1")
        seen["plain"] = call(release, "plain-pod", "GET", CONTROLLER_URL + "/api/tasks/t")
        return seen["direct"][0] == "unreachable" and seen["through"][0] == "200"

    try:
        converge(enforced, "the routed-egress policy enforced", timeout=90, interval=3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last: {seen}") from None
    assert json.loads(seen["through"][1]) == {"echo": "/api/tasks/t?x=1"}  # passed through
    assert seen["plain"][0] == "200"  # the negative control: the node itself allows it


def test_the_memory_api_authenticates_the_pod_and_gates_by_lease(
        release: Release, routed: dict[str, Any], host_dsn: str) -> None:
    governed = routed["governed"]
    search = governed + "/api/memories/search"
    save = governed + "/api/memories/sessions"
    # Consent is granted, but no delegation is open: refused, never an empty answer.
    status, body = call(release, "mem-agent-pod", "POST", search, body=memory_body(),
                        headers=runtime_headers())
    assert (status, json.loads(body)) == ("403", {"error": "LEASE_MISSING"})
    cases = [
        ({**runtime_headers(), "token-file": ""}, memory_body(), "401", "UNAUTHENTICATED"),
        (runtime_headers(user="@bob:fgentic.local"), memory_body(), "403", "USER_MISMATCH"),
        ({**runtime_headers(), "X-Agent-Name": app_name(NS, "other")}, memory_body(), "403",
         "AGENT_MISMATCH"),
    ]
    for headers, body_, want_status, code in cases:
        status, body = call(release, "mem-agent-pod", "POST", search, body=body_,
                            headers=headers)
        assert (status, json.loads(body)) == (want_status, {"error": code}), code
    generation = int(release.json("get", "memoryscope", "-n", NS, SCOPE)["status"][
        "consentGeneration"])
    grant = access(release.cluster, SCOPE, generation, NS)
    asyncio.run(_open_lease(host_dsn, grant))
    status, body = call(release, "mem-agent-pod", "POST", save,
                        body=memory_body("Alice prefers green tea."), headers=runtime_headers())
    assert status == "201" and set(json.loads(body)) == {"id"}, body
    assert entry_count(host_dsn, grant.scope_key) == 1
    status, body = call(release, "mem-agent-pod", "POST", search, body=memory_body(),
                        headers=runtime_headers())
    assert status == "200"
    assert [f["content"] for f in json.loads(body)] == ["Alice prefers green tea."]
    # The whole-store routes stay refused, even with a lease.
    status, body = call(release, "mem-agent-pod", "DELETE",
                        governed + f"/api/memories?agent_name={app_name(NS, AGENT)}",
                        headers=runtime_headers())
    assert (status, json.loads(body)) == ("403", {"error": "ERASURE_NOT_HERE"})


async def _open_lease(dsn: str, grant: Any) -> None:
    pool = await migrated_pool(dsn, max_size=2)
    try:
        # The lease names the context the Pod's session calls name (sql/0021): in progress.
        await leased_turn(MemoryStore(pool), pool, grant, 300, context="ctx")
    finally:
        await pool.close()


def test_the_agents_model_routes_are_governed_in_place(
        release: Release, routed: dict[str, Any]) -> None:
    """Issue 26, cost before model work, on the node: the memory API is the routed Pod's model
    and embeddings route. kagent's summarisation is admitted by the store before the model
    (here the lease the test above opened is one turn: the cadence refuses it, and tells the
    runtime's OpenAI client not to retry); the Agent's own turn reaches the model upstream
    (the stand-in echoes its path); an embedding over 512 bytes never leaves; and the webhook
    refuses to repoint a ModelConfig the memory-enabled Agent uses. The scope says so per
    Agent: its ModelRouteGoverned condition is True."""
    governed = routed["governed"] + "/v1"

    def route_condition() -> tuple[str, str] | None:
        conditions = scope_status(release.cluster, SCOPE, NS).get("conditions", [])
        found = [(c["status"], c["reason"]) for c in conditions
                 if c["type"] == "ModelRouteGoverned"]
        return found[0] if found else None

    converge(lambda: route_condition() == ("True", "OK"), "ModelRouteGoverned True",
             timeout=120, interval=2)
    summary = {"model": "stub", "messages": [{"role": "user", "content": (
        SUMMARY_HEAD + "user: I like tea." + SUMMARY_TAIL)}]}

    def alices_summary() -> tuple[str, Any] | None:
        """A turn of Alice's starts with its session (passed through to the controller): the
        summary that follows is hers (memoryapi/activity.py). The test above named Bob from
        this Pod; until that ages out of the 60 s window the summary is SCOPE_AMBIGUOUS."""
        call(release, "mem-agent-pod", "GET",
             routed["governed"] + "/api/sessions/ctx?user_id=" + ALICE.replace("@", "%40"),
             headers=runtime_headers())
        status, body = call(release, "mem-agent-pod", "POST", governed + "/chat/completions",
                            body=summary, headers={"Content-Type": "application/json"})
        answer = (status, json.loads(body))
        return None if answer == ("403", {"error": "SCOPE_AMBIGUOUS"}) else answer

    answer = converge(alices_summary, "the summary attributed to Alice alone", timeout=120,
                      interval=5)
    assert answer == ("429", {"error": "SUMMARY_CADENCE_REACHED"})
    turn = {"model": "stub", "messages": [{"role": "system", "content": "help"},
                                          {"role": "user", "content": "Hello"}]}
    status, body = call(release, "mem-agent-pod", "POST", governed + "/chat/completions",
                        body=turn, headers={"Content-Type": "application/json"})
    assert (status, json.loads(body)) == ("200", {"echo": "/v1/chat/completions"})
    status, body = call(release, "mem-agent-pod", "POST", governed + "/embeddings",
                        body={"model": "e", "input": ["x" * 513]},
                        headers={"Content-Type": "application/json"})
    assert (status, json.loads(body)) == ("400", {"error": "FACT_TOO_LARGE"})
    moved = model_config("e", "https://api.openai.com/v1")
    result = kubectl_result(release.cluster, "apply", "-f", "-", input=json.dumps(moved))
    assert result.returncode != 0
    assert "MEMORY_MODEL_UNGOVERNED at spec" in result.stderr


def test_memory_api_logs_carry_no_content(release: Release, routed: dict[str, Any]) -> None:
    logs = release.logs("memory-api")
    assert "memory-api action=" in logs
    assert "green tea" not in logs and ALICE not in logs
