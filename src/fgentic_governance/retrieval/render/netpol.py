"""NetworkPolicies of one RetrievalBinding (ADR 0017 §14).

* The retrieval namespace denies all ingress and egress by default (it is dedicated to the
  retrieval service and, optionally, its database).
* The retrieval service admits ingress only from the selected agentgateway proxy pods and
  sends egress only to DNS, its database, the declared observability sinks and the
  query-embeddings listener.
* The database pods admit ingress only from the retrieval service.

* The retrieval Agent's pods (kagent labels them ``app: kagent``, ``kagent: <name>``) admit
  ingress only from the proxy pods, on the Agent Service's port: the A2A routes reach the
  Agent there directly (``rules.DEVIATIONS``), and nothing else may, neither kagent's
  controller (its /api/a2a hop has no projector) nor another Agent calling it as a sub-agent.

kagent and Agent pods therefore have no direct path to the retrieval service or the database.
What NetworkPolicy cannot say (Agent egress to models) is listed as unenforceable by
`render.rules.UNENFORCEABLE`.
"""

from __future__ import annotations

from typing import Any

from fgentic_governance.api.kagent import agent_pod_labels
from fgentic_governance.api.retrieval import RetrievalBindingSpec, Workload
from fgentic_governance.retrieval.render.names import BindingId

NAMESPACE_LABEL = "kubernetes.io/metadata.name"
DNS = Workload(namespace="kube-system", selector={"k8s-app": "kube-dns"}, port=53)


def _peer(workload: Workload) -> dict[str, Any]:
    """Pods matching the selector in exactly that namespace (both selectors in one peer: AND)."""
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: workload.namespace}},
        "podSelector": {"matchLabels": dict(sorted(workload.selector.items()))},
    }


def _rule(direction: str, workload: Workload, *protocols: str) -> dict[str, Any]:
    return {direction: [_peer(workload)],
            "ports": [{"protocol": p, "port": workload.port} for p in protocols or ("TCP",)]}


def _policy(binding: BindingId, suffix: str, namespace: str,
            spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": binding.object_name(suffix), "namespace": namespace},
        "spec": spec,
    }


def network_policies(binding: BindingId, spec: RetrievalBindingSpec) -> list[dict[str, Any]]:
    service, peers, proxy = spec.retrieval_service, spec.peers, spec.proxy
    egress = [_rule("to", DNS, "UDP", "TCP"), _rule("to", peers.database),
              _rule("to", peers.embeddings),
              *(_rule("to", sink) for sink in peers.observability)]
    return [
        _policy(binding, "retrieval-default-deny", service.namespace, {
            "podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy(binding, "retrieval-service", service.namespace, {
            "podSelector": {"matchLabels": dict(sorted(service.selector.items()))},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [_peer(proxy)],
                         "ports": [{"protocol": "TCP", "port": service.port}]}],
            "egress": egress,
        }),
        _policy(binding, "retrieval-agent-a2a", spec.agent.namespace, {
            "podSelector": {"matchLabels": dict(sorted(agent_pod_labels(spec.agent.name)
                                                       .items()))},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [_peer(proxy)],
                         "ports": [{"protocol": "TCP", "port": spec.kagent.port}]}],
        }),
        _policy(binding, "retrieval-database", peers.database.namespace, {
            "podSelector": {"matchLabels": dict(sorted(peers.database.selector.items()))},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [_peer(service)],
                         "ports": [{"protocol": "TCP", "port": peers.database.port}]}],
        }),
    ]
