"""NetworkPolicy enforced on the node (kube-router, firewall only): the policies the operator
rendered for the example RetrievalBinding (ADR 0017 §5, "installed-CNI NetworkPolicy
negatives") and the chart's own for the control API. Allowed paths connect; denied ones are
refused or time out.

Stand-ins run our image's Python as TCP listeners with the labels the binding selects; probes
run inside them through ``kubectl exec`` (the API server → kubelet path)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.cluster import PYTHON, Release, apply, client_pod, converge, ready

LISTEN = """
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(b"ok"); c.close()
for port in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(port),), daemon=True).start()
threading.Event().wait()
"""
PROBE = """
import socket, sys
try:
    # A completed handshake is the answer (the control API, HTTP, sends nothing first).
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3):
        print("open")
except ConnectionRefusedError:
    print("refused")
except OSError:
    print("timeout")
"""
# (namespace, pod, labels, listening port)
STAND_INS = [
    ("fgentic-retrieval", "retrieval", {"app.kubernetes.io/name": "knowledge-retrieval"}, 8080),
    ("fgentic-retrieval", "database", {"app.kubernetes.io/name": "knowledge-db"}, 5432),
    ("agentgateway-system", "proxy", {"app.kubernetes.io/name": "agentgateway-proxy"}, 8080),
    ("agentgateway-system", "embeddings",
     {"app.kubernetes.io/name": "agentgateway-embeddings"}, 8443),
    ("agentgateway-system", "model", {"app.kubernetes.io/name": "model-stub"}, 9000),
    ("fgentic-demo", "agent", {"app": "kagent", "kagent": "docs-agent"}, 8080),
    ("matrix", "bridge", {"app.kubernetes.io/name": "matrix-a2a-bridge"}, 8080),
    # kagent's controller, labelled as kagent's chart labels it; 8083 serves its /api/a2a.
    # (test_memory_routing's "controller" in the same namespace is its echo stand-in.)
    ("kagent", "kagent-controller",
     {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "controller"}, 8083),
]
# (from, to, port, allowed)
PATHS = [
    ("proxy", "retrieval", 8080, True),
    ("retrieval", "database", 5432, True),
    ("retrieval", "embeddings", 8443, True),
    # The A2A routes reach the retrieval Agent's own Service (status.deviations), so its pods
    # admit the proxy alone: not the bridge, nor any other pod (kagent's controller, whose
    # /api/a2a hop has no projector, or another Agent calling it as a sub-agent).
    ("proxy", "agent", 8080, True),
    ("bridge", "agent", 8080, False),
    ("kagent-controller", "agent", 8080, False),  # the bypass: /api/a2a/<ns>/<agent>
    ("kagent-controller", "retrieval", 8080, False),
    ("kagent-controller", "database", 5432, False),
    ("model", "agent", 8080, False),
    ("agent", "retrieval", 8080, False),
    ("agent", "database", 5432, False),
    ("proxy", "database", 5432, False),
    ("retrieval", "model", 9000, False),
    ("bridge", "control-api", 8443, True),
    ("agent", "control-api", 8443, False),
    ("model", "control-api", 8443, False),
]


@pytest.fixture(scope="module")
def stand_ins(release: Release, image: tuple[Any, str]) -> dict[str, tuple[str, str]]:
    """Pod name → (namespace, pod IP), the control API's pod included."""
    cluster = release.cluster
    for ns in {ns for ns, *_ in STAND_INS}:
        apply(cluster, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    pods = []
    for ns, name, labels, port in STAND_INS:
        pod = client_pod(ns, name, image[1], LISTEN, args=[str(port)], labels=labels)
        pod["spec"]["automountServiceAccountToken"] = False
        pods.append(pod)
    apply(cluster, pods)
    found: dict[str, tuple[str, str]] = {}
    for ns, name, *_ in STAND_INS:
        pod = converge(lambda ns=ns, name=name: _ready_pod(release, ns, name), f"{name} ready")
        found[name] = (ns, pod["status"]["podIP"])
    control = next(p for p in release.pods("control-api") if ready(p))
    found["control-api"] = (release.namespace, control["status"]["podIP"])
    return found


def _ready_pod(release: Release, ns: str, name: str) -> dict[str, Any] | None:
    pod = release.json("get", "pod", "-n", ns, name)
    return pod if ready(pod) and pod["status"].get("podIP") else None


def probe(release: Release, pods: dict[str, tuple[str, str]], source: str, target: str,
          port: int) -> str:
    ns = pods[source][0]
    return release.kubectl("exec", "-n", ns, source, "--", PYTHON, "-c", PROBE,
                           pods[target][1], str(port), timeout=30).strip()


def test_rendered_and_chart_policies_allow_only_the_declared_paths(
        release: Release, stand_ins: dict[str, tuple[str, str]]) -> None:
    # The operator applied the binding's policies when the example was created.
    names = json.loads(release.kubectl("get", "networkpolicy", "-n", "fgentic-retrieval",
                                       "-o", "json"))["items"]
    assert len(names) >= 3

    def outcomes() -> dict[tuple[str, str, int], str]:
        return {(s, t, p): probe(release, stand_ins, s, t, p) for s, t, p, _ in PATHS}

    def as_declared(seen: dict[tuple[str, str, int], str]) -> bool:
        return all((seen[(s, t, p)] == "open") == allowed for s, t, p, allowed in PATHS)

    # kube-router programs a new pod's rules within seconds; then they must hold, twice.
    last: dict[str, dict[tuple[str, str, int], str]] = {}

    def enforced() -> bool:
        last["seen"] = outcomes()
        return as_declared(last["seen"])

    try:
        converge(enforced, "the policies enforced", timeout=90, interval=3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last outcomes: {last.get('seen')}") from None
    seen = outcomes()
    assert as_declared(seen), seen
    denied = {path: seen[path[:3]] for path in PATHS if not path[3]}
    assert all(result in ("refused", "timeout") for result in denied.values()), denied


def test_without_the_binding_policies_the_same_paths_are_open(
        release: Release, stand_ins: dict[str, tuple[str, str]]) -> None:
    """The negative control: the denials above come from the rendered policies, not from the
    node. A namespace without policies lets the agent stand-in reach the model stand-in, and
    the bridge reach kagent's controller (whose own ingress is kagent's to decide)."""
    assert probe(release, stand_ins, "agent", "model", 9000) == "open"
    assert probe(release, stand_ins, "bridge", "kagent-controller", 8083) == "open"
