"""The chart's ``values.schema.json``, generated from ``values.yaml`` (the one source of the
values and their defaults) plus the constraints below; ``--check`` fails on drift.

Every key of ``values.yaml`` gets the type of its default and an object is closed to unknown
keys (a misspelt value is refused by ``helm install``/``template``, not silently ignored),
except the free-form maps Kubernetes defines (resources, security contexts, labels, placement).
Constraints narrow what a default cannot say: enums, port ranges, replica counts, URL and MXID
shapes. Cross-value rules (a bot MXID on the local homeserver, say) live in the templates.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, Final

import yaml

from fgentic_devenv.generated import write_or_check
from fgentic_devenv.paths import repo_root
from fgentic_governance.admission.enforcement import WARNABLE
from fgentic_governance.api.appservice import MAX_NAMESPACES
from fgentic_governance.api.common import DNS1123_LABEL

REPO_ROOT: Final = repo_root()
CHART: Final = REPO_ROOT / "charts" / "fgentic-governance"
VALUES: Final = CHART / "values.yaml"
SCHEMA: Final = CHART / "values.schema.json"

PORT: Final = {"type": "integer", "minimum": 1, "maximum": 65535}
_OCTET: Final = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
CIDR: Final = {"type": "string", "pattern": (
    f"^({_OCTET}\\.){{3}}{_OCTET}/(3[0-2]|[12]?[0-9])$"
    "|^[0-9a-fA-F]{0,4}(:[0-9a-fA-F]{0,4}){2,7}/(12[0-8]|1[01][0-9]|[1-9]?[0-9])$")}
"""An IPv4 or IPv6 CIDR (the API server refuses a malformed one only at install, after the
release's other objects were created; RE2 syntax: Helm validates with Go regexps)."""
QUANTITY: Final = {"type": ["string", "number"],
                   "pattern": "^[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)"
                              "(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$"}
"""A Kubernetes resource quantity (128Mi, 0.5, 50m): "lots" is refused at render time."""
RESOURCES: Final = {"type": "object", "additionalProperties": False, "properties": {
    "requests": {"type": "object", "additionalProperties": QUANTITY},
    "limits": {"type": "object", "additionalProperties": QUANTITY},
    "claims": {"type": "array"}}}
PEERS: Final = {"type": "array", "items": {"type": "object", "properties": {"ipBlock": {
    "type": "object", "additionalProperties": False, "required": ["cidr"],
    "properties": {"cidr": CIDR, "except": {"type": "array", "items": CIDR}}}}}}
"""NetworkPolicy peers (ipBlock, namespaceSelector, podSelector): CIDRs checked."""
SECRET_MODE_NEEDS_CA: Final = {
    "if": {"required": ["mode"], "properties": {"mode": {"const": "secret"}}},
    "then": {"properties": {"caBundle": {"minLength": 1}, "secretName": {"minLength": 1}}}}
"""tls.mode=secret: the chart cannot know the CA of a Secret it did not make, and the default
name is the one the bootstrap webhook and cert-manager write (a stale pair after a switch)."""
URL_OR_EMPTY: Final = {"type": "string", "pattern": "^$|^https?://[^\\s]+$"}
FREE_FORM: Final = frozenset({
    "resources", "podSecurityContext", "securityContext", "podAnnotations", "podLabels",
    "nodeSelector", "affinity", "matchLabels",
})
"""Keys whose value is a Kubernetes-defined or user-defined map: any keys."""
CONSTRAINTS: Final[Mapping[str, dict[str, Any]]] = {
    "image.pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    "localHomeserver": {"pattern": "^$|^[A-Za-z0-9.-]+(:[0-9]{1,5})?$"},
    # The shape of api/appservice.py's AppserviceNamespace (the processes check the rest:
    # that each userRegex compiles and is portable to RE2, one entry per network).
    "appserviceNamespaces": {"type": "array", "maxItems": MAX_NAMESPACES, "items": {
        "type": "object", "additionalProperties": False, "required": ["network", "userRegex"],
        "properties": {
            "network": {"type": "string", "maxLength": 63,
                        "pattern": DNS1123_LABEL},
            "userRegex": {"type": "string", "minLength": 1, "maxLength": 1024}}}},
    "operator.replicas": {"type": "integer", "minimum": 1},
    # Fail closed: with one replica every restart, drain or node loss refuses every Agent
    # write (a PodDisruptionBudget cannot keep the only Pod of a drained node).
    "webhook.replicas": {"type": "integer", "minimum": 2},
    "webhook.tls": SECRET_MODE_NEEDS_CA,
    "webhook.tls.caBundle": {"pattern": "^[A-Za-z0-9+/]*={0,2}$"},
    "webhook.timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 30},
    "webhook.failurePolicy": {"enum": ["Fail"]},
    "webhook.tls.mode": {"enum": ["bootstrap", "certManager", "generate", "secret"]},
    "webhook.tls.certManager.issuerRef.kind": {"enum": ["Issuer", "ClusterIssuer"]},
    "webhook.auditIntervalSeconds": {"type": "integer", "minimum": 0},
    "webhook.warnRules": {"type": "array", "uniqueItems": True,
                          "items": {"enum": sorted(c.value for c in WARNABLE)}},
    "webhook.enforcement": {"enum": ["deny", "audit"]},
    "webhook.networkPolicy.apiServerSources": {**PEERS, "type": ["array", "null"]},
    "webhook.networkPolicy.metricsSources": PEERS,
    **{f"memoryApi.networkPolicy.{key}": PEERS for key in (
        "storePeers", "controllerPeers", "embeddingsPeers", "modelPeers", "apiServerPeers",
        "metricsSources")},
    "memoryApi.agentEgress": {"type": "array", "items": {
        "type": "object", "properties": {"to": PEERS}}},
    "memoryApi.replicas": {"type": "integer", "minimum": 2},
    "memoryApi.url": URL_OR_EMPTY,
    "memoryApi.controllerUrl": URL_OR_EMPTY,
    "memoryApi.embeddingsUpstream": URL_OR_EMPTY,
    "memoryApi.modelUpstream": URL_OR_EMPTY,
    "memoryApi.service.clusterIP": {"pattern": "^$|^[0-9a-fA-F.:]+$"},
    "controlApi.replicas": {"type": "integer", "minimum": 1},
    "controlApi.botMxid": {"pattern": "^$|^@[^:\\s]+:[A-Za-z0-9.-]+(:[0-9]{1,5})?$"},
    "retrievalServer.replicas": {"type": "integer", "minimum": 2},
    "retrievalServer.dimensions": {"enum": [768, 1024]},
    "retrievalServer.embeddings.url": URL_OR_EMPTY,
    "operator.tuning.scopeResyncSeconds": {"type": "integer", "minimum": 1},
    "operator.tuning.bindingResyncSeconds": {"type": "integer", "minimum": 1},
    "operator.tuning.apiConnections": {"type": "integer", "minimum": 1, "maximum": 256},
    "metrics.prometheusRule.runbookBaseUrl": {"pattern": "^https?://[^\\s]+$"},
}


def _leaf(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    return {}  # null: any value (the templates say what they need)


def _schema(value: Any, path: str) -> dict[str, Any]:
    key = path.rsplit(".", 1)[-1]
    if isinstance(value, dict) and key not in FREE_FORM and value:
        node: dict[str, Any] = {
            "type": "object", "additionalProperties": False,
            "properties": {k: _schema(v, f"{path}.{k}" if path else k)
                           for k, v in value.items()}}
    elif key == "resources":
        node = dict(RESOURCES)
    elif isinstance(value, dict):
        node = {"type": "object"}
    else:
        node = _leaf(value)
        if key in ("port", "metricsPort") or key.endswith("Port"):
            node = dict(PORT)
    node.update(CONSTRAINTS.get(path, {}))
    return node


def render() -> str:
    values = yaml.safe_load(VALUES.read_text())
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "title": "fgentic-governance chart values", **_schema(values, "")}
    return json.dumps(schema, indent=2) + "\n"


def unknown_constraints() -> list[str]:
    """Constrained paths that no longer exist in values.yaml (a renamed value)."""
    values = yaml.safe_load(VALUES.read_text())

    def exists(path: str) -> bool:
        node: Any = values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    return [path for path in CONSTRAINTS if not exists(path)]


def run(*, check: bool) -> int:
    stale = unknown_constraints()
    if stale:
        print(f"constraints name values that do not exist: {', '.join(stale)}", file=sys.stderr)
        return 1
    return write_or_check(SCHEMA, render(), check=check, command="fgentic-dev chart-schema")
