"""Admission configuration, rendered from one place for the chart, `dev up` and the tests.

- The ValidatingWebhookConfiguration is ours, not Kopf's managed one: a small timeout, fail
  closed, kagent Agents plus our own kinds only, and never kube-system or our namespace.
- The ValidatingAdmissionPolicy is defence in depth: the stateless header-name rules,
  evaluated in the API server itself, so they hold even while the webhook is down.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.registry import CONSENT_RECORD, MEMORY_SCOPE, RETRIEVAL_BINDING
from fgentic_governance.contract.codec import IDENTITY_HEADER

AGENT_WEBHOOK = f"agents.{GROUP}"
GOVERNANCE_WEBHOOK = f"objects.{GROUP}"
POLICY_NAME = "fgentic-governance-agent-headers"

_GOVERNANCE_RULES = [
    {"apiGroups": [GROUP], "apiVersions": [VERSION],
     "operations": ["CREATE"], "resources": [CONSENT_RECORD.plural], "scope": "Namespaced"},
    {"apiGroups": [GROUP], "apiVersions": [VERSION],
     "operations": ["CREATE", "UPDATE"],
     "resources": [RETRIEVAL_BINDING.plural, MEMORY_SCOPE.plural],
     "scope": "Namespaced"},
]
_AGENT_RULES = [
    {"apiGroups": ["kagent.dev"], "apiVersions": ["v1alpha1", "v1alpha2"],
     "operations": ["CREATE", "UPDATE"], "resources": ["agents"], "scope": "Namespaced"},
]


def namespace_selector(excluded: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                  "values": list(excluded)}]}


def _webhook(name: str, client_config: dict[str, Any], rules: list[dict[str, Any]],
             excluded: Sequence[str], timeout: int) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": timeout,
        "matchPolicy": "Equivalent",
        "clientConfig": client_config,
        "rules": rules,
        "namespaceSelector": namespace_selector(excluded),
    }


def webhook_configuration(name: str, base_url: str, ca_pem: bytes, *,
                          excluded: Sequence[str] = ("kube-system",),
                          timeout: int = 3) -> dict[str, Any]:
    """The configuration for a webhook reachable at ``base_url`` (…/agents, …/governance)."""
    ca = base64.b64encode(ca_pem).decode()
    base = base_url.rstrip("/")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            _webhook(AGENT_WEBHOOK, {"url": f"{base}/agents", "caBundle": ca}, _AGENT_RULES,
                     excluded, timeout),
            _webhook(GOVERNANCE_WEBHOOK, {"url": f"{base}/governance", "caBundle": ca},
                     _GOVERNANCE_RULES, excluded, timeout),
        ],
    }


# CEL over optional fields: absent lists count as empty (kagent omits them freely).
_TOOLS = "object.spec.?declarative.?tools.orValue([])"
HEADER_RULES = [
    {
        "expression": (f"{_TOOLS}.all(t, t.?mcpServer.?allowedHeaders.orValue([])"
                       f".all(h, h.lowerAscii() == '{IDENTITY_HEADER.lower()}'))"),
        "message": "FORBIDDEN_HEADER: only x-fgentic-identity may be propagated to an MCP server",
        "reason": "Forbidden",
    },
    {
        "expression": (f"{_TOOLS}.all(t, t.?headersFrom.orValue([])"
                       ".all(h, !h.name.lowerAscii().startsWith('x-fgentic-')))"),
        "message": "FORBIDDEN_HEADERS_FROM: headersFrom may not set X-Fgentic-* headers",
        "reason": "Forbidden",
    },
]


def admission_policy(excluded: Sequence[str] = ("kube-system",)) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Deny) for the stateless header rules."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {**rule, "apiVersions": ["v1alpha2"]} for rule in _AGENT_RULES]},
            "validations": HEADER_RULES,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": namespace_selector(excluded)},
        },
    }
    return [policy, binding]
