"""The ValidatingWebhookConfiguration for the Agent webhook (the chart carries the same rules).

Ours, not Kopf's managed one: a small timeout, fail closed, no kube-system, CREATE/UPDATE of
kagent Agents only.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any


def webhook_configuration(name: str, url: str, ca_pem: bytes, *,
                          excluded: Sequence[str] = ("kube-system",)) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration for a webhook reachable at ``url`` (loopback use)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "agents.governance.fgentic.dev",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 3,
            "matchPolicy": "Equivalent",
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"apiGroups": ["kagent.dev"], "apiVersions": ["v1alpha1", "v1alpha2"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["agents"],
                       "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": list(excluded)}]},
        }],
    }
