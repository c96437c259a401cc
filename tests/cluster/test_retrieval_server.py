"""The retrieval server as the chart ships it, on the node (issue 25 §4, §5).

`helm upgrade` turns on `retrievalServer` for the example RetrievalBinding, which
test_install.py applied. Its Pods run in the binding's retrieval namespace with the binding's
selector labels and mount the configuration the operator rendered. So the binding's own
NetworkPolicies govern them:
- ingress from the proxy pods only;
- egress to the database and embeddings pods the binding names, and DNS.

Those two peers are relays here, pods with the binding's labels that forward to the host: the
cluster PostgreSQL, holding a small corpus, and a hashing embedder bound on the test bridge
(the provider is outside the system). A proxy-labelled pod's MCP call is answered from the
prefilter. An Agent-labelled pod cannot connect at all.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fgentic_devenv import free_port, terminate
from fgentic_devenv.node import BRIDGE_ADDRESS
from fgentic_devenv.postgres import SUPERUSER, LocalPostgres
from fgentic_governance import contract
from tests.support.cluster import Release, apply, client_pod, converge, ready, run_pod
from tests.support.retrieval_server import Chunk, load_corpus

pytestmark = pytest.mark.cluster

RETRIEVAL_NS, PROXY_NS, AGENT_NS = "fgentic-retrieval", "agentgateway-system", "fgentic-demo"
AGENT = contract.AgentRef(namespace=AGENT_NS, name="docs-agent")
ALICE = {"kind": "matrix", "principal": "@alice:fgentic.local"}
CORPUS = [
    Chunk(1, "chat logs are kept for thirty days", "handbook/retention.md",
          {"classification": "public", "allowed_principals": [ALICE]}),
    Chunk(2, "the partner contract renews every spring", "contracts/partner.md",
          {"classification": "public",
           "allowed_principals": [{"kind": "matrix", "principal": "@bob:fgentic.local"}]}),
]
RELAY = """
import socket, sys, threading
target = (sys.argv[2], int(sys.argv[3]))
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1]))); server.listen(32)
while True:
    client, _ = server.accept()
    upstream = socket.create_connection(target, timeout=10)
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pipe, args=(a, b), daemon=True).start()
"""
# kube-router adds a new pod to the policies' source sets within seconds; until then it
# rejects the pod's connections, so the client retries for ``seconds`` (bounded).
MCP_CALL = """
import json, sys, time, urllib.request
url, carrier, question, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "search_knowledge", "arguments": {"query": question, "k": 5}}}
request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
    "content-type": "application/json", "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25", "x-fgentic-identity": carrier})
deadline = time.monotonic() + seconds
while True:
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            reply = json.loads(answer.read())
            chunks = reply["result"]["structuredContent"]["chunks"]
            print("status", answer.status, "chunks", ",".join(c["chunk_id"] for c in chunks))
            break
    except OSError as exc:
        if time.monotonic() > deadline:
            print("unreachable", type(exc).__name__)
            break
        time.sleep(1)
"""


def _carrier() -> str:
    context = contract.RoomContext.model_validate_json(json.dumps({
        "allowed_classifications": ["public"], "audience": [ALICE], "caller": ALICE,
        "delegation_id": "d" * 64,
        "room": {"event_id": "$e", "history_visibility": "joined", "id": "!docs:fgentic.local",
                 "join_rule": "invite", "state_sha256": "0" * 64}, "v": 1}))
    return contract.encode_identity(contract.stamp_matrix(context, agent=AGENT,
                                                          iat=int(time.time())))


def _relay(release: Release, image: str, where: tuple[str, str], labels: dict[str, str], *,
           port: int, target_port: int) -> str:
    """A relay pod ``where`` = (namespace, name) with ``labels``, forwarding ``port`` to the
    host's ``target_port`` on the bridge; its address once ready."""
    namespace, name = where
    pod = client_pod(namespace, name, image, RELAY,
                     args=[str(port), BRIDGE_ADDRESS, str(target_port)], labels=labels)
    pod["spec"]["restartPolicy"] = "Always"
    pod["spec"]["automountServiceAccountToken"] = False
    pod["metadata"]["labels"]["fgentic.test/relay"] = name
    # The binding's default deny covers the retrieval namespace's egress; a real in-cluster
    # database needs none, this stand-in needs its way to the host (the test's policy).
    egress = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": f"{name}-to-host", "namespace": namespace},
              "spec": {"podSelector": {"matchLabels": {"fgentic.test/relay": name}},
                       "policyTypes": ["Egress"],
                       "egress": [{"to": [{"ipBlock": {"cidr": f"{BRIDGE_ADDRESS}/32"}}],
                                   "ports": [{"protocol": "TCP", "port": target_port}]}]}}
    apply(release.cluster, [egress, pod])

    def address() -> str | None:
        found = release.json("get", "pod", "-n", namespace, name)
        return str(found["status"]["podIP"]) if ready(found) else None

    return str(converge(address, f"{name} ready", timeout=90))


@pytest.fixture(scope="module")
def served(release: Release, cluster_postgres: LocalPostgres,
           image: tuple[Any, str]) -> Iterator[str]:
    """The chart's retrieval server up over the corpus; yields one of its pods' MCP URL."""
    asyncio.run(cluster_postgres.create_database("knowledge", extensions=("vector",)))
    asyncio.run(load_corpus(cluster_postgres.dsn("knowledge"), CORPUS))
    port = free_port()
    embedder = subprocess.Popen([sys.executable, "-m", "fgentic_devenv.embedder", "--host",
                                 BRIDGE_ADDRESS, "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        database = _relay(release, image[1], (RETRIEVAL_NS, "knowledge-db-relay"),
                          {"app.kubernetes.io/name": "knowledge-db"}, port=5432,
                          target_port=cluster_postgres.port)
        embeddings = _relay(release, image[1], (PROXY_NS, "embeddings-relay"),
                            {"app.kubernetes.io/name": "agentgateway-embeddings"}, port=8443,
                            target_port=port)
        apply(release.cluster, [{"apiVersion": "v1", "kind": "Secret", "metadata": {
            "name": "corpus-dsn", "namespace": RETRIEVAL_NS}, "stringData": {
            "dsn": f"postgresql://{SUPERUSER}@{database}:5432/knowledge"}}])
        release.upgrade(retrievalServer={
            "enabled": True, "namespace": RETRIEVAL_NS,
            "binding": {"namespace": AGENT_NS, "name": "docs-agent-retrieval"},
            "corpusDsnSecret": {"name": "corpus-dsn"},
            "embeddings": {"url": f"http://{embeddings}:8443/v1/embeddings",
                           "model": "hashing"}})
        assert release.json("get", "service", "-n", RETRIEVAL_NS, "fg-retrieval-server")
        pods = release.json("get", "pods", "-n", RETRIEVAL_NS, "-l",
                            "app.kubernetes.io/component=retrieval-server")["items"]
        # A pod's own address, as test_network_policy.py probes: the binding's ingress rule is
        # about the source pod, which a Service hop may rewrite on this node.
        yield f"http://{pods[0]['status']['podIP']}:8080/mcp"
    finally:
        terminate(embedder)
        release.upgrade()  # the release as the other modules know it
        for ns, name in ((RETRIEVAL_NS, "knowledge-db-relay"), (PROXY_NS, "embeddings-relay")):
            release.kubectl("delete", "pod", "-n", ns, name, "--ignore-not-found", "--wait=false")
            release.kubectl("delete", "networkpolicy", "-n", ns, f"{name}-to-host",
                            "--ignore-not-found")


def test_the_charts_server_runs_ready_from_its_bindings_configuration(
    release: Release, served: str,
) -> None:
    pods = release.json("get", "pods", "-n", RETRIEVAL_NS, "-l",
                        "app.kubernetes.io/component=retrieval-server")["items"]
    assert len(pods) >= 2 and all(ready(p) for p in pods)
    for pod in pods:
        assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "knowledge-retrieval"
        statuses = pod["status"]["containerStatuses"]
        assert all(s["restartCount"] == 0 for s in statuses)
    log = "\n".join(release.kubectl("logs", "-n", RETRIEVAL_NS, p["metadata"]["name"])
                    for p in pods)
    assert "knowledge retrieval server listening" in log
    assert "thirty days" not in log


def test_the_proxy_is_answered_from_the_prefilter_and_an_agent_pod_cannot_connect(
    release: Release, served: str, image: tuple[Any, str],
) -> None:
    carrier = _carrier()
    question = "how long are chat logs kept"
    proxy = client_pod(PROXY_NS, "mcp-from-proxy", image[1], MCP_CALL,
                       args=[served, carrier, question, "60"],
                       labels={"app.kubernetes.io/name": "agentgateway-proxy"})
    phase, log = run_pod(release.cluster, proxy, timeout=120)
    assert phase == "Succeeded", log
    assert log.strip() == "status 200 chunks 1", log  # Alice's chunk only, not Bob's
    # The server answered above, so a refusal here is the binding's ingress policy.
    agent = client_pod(AGENT_NS, "mcp-from-agent", image[1], MCP_CALL,
                       args=[served, carrier, question, "5"],
                       labels={"app": "kagent", "kagent": "docs-agent"})
    phase, log = run_pod(release.cluster, agent)
    assert log.strip().startswith("unreachable"), log
