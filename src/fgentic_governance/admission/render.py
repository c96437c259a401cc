"""Admission configuration, rendered from one place for the chart, `fgentic-dev up` and the tests.

- The ValidatingWebhookConfiguration is ours, not Kopf's managed one: a small timeout, fail
  closed, kagent Agents plus our own kinds only, and never kube-system or our namespace.
- The ValidatingAdmissionPolicy is defence in depth: the stateless header-name rules,
  evaluated in the API server itself, so they hold even while the webhook is down.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from fgentic_governance.admission import cel
from fgentic_governance.api import kagent
from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.kagent import ROUTED_LABEL
from fgentic_governance.api.registry import CONSENT_RECORD, MEMORY_SCOPE, RETRIEVAL_BINDING

AGENT_WEBHOOK = f"agents.{GROUP}"
GOVERNANCE_WEBHOOK = f"objects.{GROUP}"
POD_CHECK_WEBHOOKS = (f"podcheck-kagent.{GROUP}", f"podcheck-accounts.{GROUP}")
POD_ROUTING_WEBHOOKS = (f"pods-kagent.{GROUP}", f"pods-accounts.{GROUP}")
ROUTED_POD_CHECK_WEBHOOK = f"podcheck-routed.{GROUP}"
"""Every Pod that carries the routed label, in every namespace, and its ``pods/status`` and
``pods/ephemeralcontainers`` writes: the label cannot be set on another Pod, nor dropped or
an ephemeral container added around the check (an objectSelector matches a write when the
old or the new object matches)."""
ROUTED_NAMESPACE_LABEL = "fgentic.dev/memory-routing"
"""Namespaces with this label set to ``enabled`` also send Pods *without* kagent's labels, so
that a Pod running under a memory-enabled Agent's service account is routed too. Only these
namespaces depend on the webhook for every Pod; elsewhere only kagent's Agent Pods do."""
_NOT_ROUTED_NAMESPACE = {"key": ROUTED_NAMESPACE_LABEL, "operator": "NotIn", "values": ["enabled"]}
AGENT_POLICY_NAME = "fgentic-governance-agents"
SCOPE_POLICY_NAME = "fgentic-governance-memoryscopes"

_GOVERNANCE_RULES = [
    {"apiGroups": [GROUP], "apiVersions": [VERSION],
     "operations": ["CREATE"], "resources": [CONSENT_RECORD.plural], "scope": "Namespaced"},
    {"apiGroups": [GROUP], "apiVersions": [VERSION],
     "operations": ["CREATE", "UPDATE"],
     "resources": [RETRIEVAL_BINDING.plural, MEMORY_SCOPE.plural],
     "scope": "Namespaced"},
]
_AGENT_RULES = [
    {"apiGroups": [kagent.GROUP], "apiVersions": [kagent.LEGACY_VERSION, kagent.VERSION],
     "operations": ["CREATE", "UPDATE"],
     "resources": [kagent.AGENT.plural, kagent.MODEL_CONFIG.plural],
     "scope": "Namespaced"},
]


_POD_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
     "scope": "Namespaced"},
]
_ROUTED_POD_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["pods", "pods/status", "pods/ephemeralcontainers"], "scope": "Namespaced"},
]
# kagent v0.9.11 labels every Agent's Pods with both (its Deployment selects on them, so an
# Agent's deployment.labels cannot drop them); kagent's own controller and UI carry neither.
_KAGENT_POD = [{"key": "app", "operator": "In", "values": ["kagent"]},
               {"key": "kagent", "operator": "Exists"}]
_ROUTED_POD = {"key": ROUTED_LABEL, "operator": "Exists"}


def namespace_selector(excluded: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                  "values": list(excluded)}]}


def _pod_webhooks(names: tuple[str, str], client_config: dict[str, Any],
                  excluded: Sequence[str], timeout: int,
                  operations: Sequence[str] = ("CREATE",)) -> list[dict[str, Any]]:
    """kagent's Agent Pods (labels ``app: kagent`` and ``kagent``) in namespaces not labelled
    for routing; every Pod in namespaces labelled for routing (a Pod under a memory-enabled
    Agent's service account is routed whatever its labels). Each Pod meets exactly one of the
    two. Both fail closed: while the webhook is down no Agent Pod (memory-enabled or not) is
    created outside the excluded namespaces, and no Pod at all in a namespace labelled for
    routing."""
    rules = [{**_POD_RULES[0], "operations": list(operations)}]
    by_label = _webhook(names[0], client_config, rules, excluded, timeout)
    by_label["objectSelector"] = {"matchExpressions": list(_KAGENT_POD)}
    by_label["namespaceSelector"]["matchExpressions"].append(_NOT_ROUTED_NAMESPACE)
    by_account = _webhook(names[1], client_config, rules, excluded, timeout)
    by_account["namespaceSelector"]["matchLabels"] = {ROUTED_NAMESPACE_LABEL: "enabled"}
    return [by_label, by_account]


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
                          timeout: int = 3, memory_routing: bool = False) -> dict[str, Any]:
    """The configuration for a webhook reachable at ``base_url`` (…/agents, …/governance,
    and with ``memory_routing`` …/podcheck: a routed Pod's environment, DNS and label)."""
    ca = base64.b64encode(ca_pem).decode()
    base = base_url.rstrip("/")
    hooks = [
        _webhook(AGENT_WEBHOOK, {"url": f"{base}/agents", "caBundle": ca}, _AGENT_RULES,
                 excluded, timeout),
        _webhook(GOVERNANCE_WEBHOOK, {"url": f"{base}/governance", "caBundle": ca},
                 _GOVERNANCE_RULES, excluded, timeout),
    ]
    if memory_routing:
        # UPDATE too: a routed Pod may not drop its label (the NetworkPolicy keys on it).
        podcheck = {"url": f"{base}/podcheck", "caBundle": ca}
        hooks += _pod_webhooks(POD_CHECK_WEBHOOKS, podcheck, excluded, timeout,
                               ("CREATE", "UPDATE"))
        routed = _webhook(ROUTED_POD_CHECK_WEBHOOK, podcheck, _ROUTED_POD_RULES, excluded,
                          timeout)
        routed["objectSelector"] = {"matchExpressions": [_ROUTED_POD]}
        hooks.append(routed)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": hooks,
    }


def mutating_configuration(name: str, base_url: str, ca_pem: bytes, *,
                           excluded: Sequence[str] = ("kube-system",),
                           timeout: int = 3) -> dict[str, Any]:
    """The Pod routing, so that kagent's runtime reaches memory only through the memory API:
    memory-enabled Agents' Pods get it as KAGENT_URL and LOG_LEVEL=ERROR. Reinvoked if a later
    webhook changes the Pod."""
    ca = base64.b64encode(ca_pem).decode()
    hooks = _pod_webhooks(POD_ROUTING_WEBHOOKS,
                          {"url": f"{base_url.rstrip('/')}/pods", "caBundle": ca},
                          excluded, timeout)
    for hook in hooks:
        hook["reinvocationPolicy"] = "IfNeeded"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": hooks,
    }


def admission_policy(excluded: Sequence[str] = ("kube-system",), *,
                     audit_only: bool = False) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Deny; Warn and Audit for a webhook in
    audit-only mode, ``enforcement.py``) for the stateless Agent rules."""
    return _policy(AGENT_POLICY_NAME, kagent.GROUP, kagent.AGENT.plural,
                   cel.validations(kagent.AGENT.plural), excluded, audit_only=audit_only)


def scope_policy(local_homeserver: str, excluded: Sequence[str] = ("kube-system",), *,
                 audit_only: bool = False,
                 appservice: AppserviceRegistry = EMPTY) -> list[dict[str, Any]]:
    """The same for MemoryScopes: the subject's homeserver is the local one, and its MXID in
    no namespace of the appservice-namespace registry."""
    return _policy(SCOPE_POLICY_NAME, GROUP, MEMORY_SCOPE.plural,
                   cel.validations(MEMORY_SCOPE.plural, local_homeserver, appservice), excluded,
                   audit_only=audit_only)


def _policy(name: str, group: str, plural: str, rules: list[dict[str, str]],
            excluded: Sequence[str], *, audit_only: bool) -> list[dict[str, Any]]:
    version = kagent.VERSION if group == kagent.GROUP else VERSION
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [group], "apiVersions": [version],
                 "operations": ["CREATE", "UPDATE"], "resources": [plural],
                 "scope": "Namespaced"}]},
            "validations": rules,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Warn", "Audit"] if audit_only else ["Deny"],
            "matchResources": {"namespaceSelector": namespace_selector(excluded)},
        },
    }
    return [policy, binding]
