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

REPO_ROOT: Final = repo_root()
CHART: Final = REPO_ROOT / "charts" / "fgentic-governance"
VALUES: Final = CHART / "values.yaml"
SCHEMA: Final = CHART / "values.schema.json"

PORT: Final = {"type": "integer", "minimum": 1, "maximum": 65535}
URL_OR_EMPTY: Final = {"type": "string", "pattern": "^$|^https?://[^\\s]+$"}
FREE_FORM: Final = frozenset({
    "resources", "podSecurityContext", "securityContext", "podAnnotations", "podLabels",
    "nodeSelector", "affinity", "matchLabels",
})
"""Keys whose value is a Kubernetes-defined or user-defined map: any keys."""
CONSTRAINTS: Final[Mapping[str, dict[str, Any]]] = {
    "image.pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    "localHomeserver": {"pattern": "^$|^[A-Za-z0-9.-]+(:[0-9]{1,5})?$"},
    "operator.replicas": {"type": "integer", "minimum": 1},
    "webhook.replicas": {"type": "integer", "minimum": 1},
    "webhook.timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 30},
    "webhook.failurePolicy": {"enum": ["Fail"]},
    "webhook.tls.mode": {"enum": ["bootstrap", "certManager", "generate", "secret"]},
    "webhook.tls.certManager.issuerRef.kind": {"enum": ["Issuer", "ClusterIssuer"]},
    "webhook.auditIntervalSeconds": {"type": "integer", "minimum": 0},
    "webhook.warnRules": {"type": "array", "uniqueItems": True,
                          "items": {"enum": sorted(c.value for c in WARNABLE)}},
    "webhook.enforcement": {"enum": ["deny", "audit"]},
    "webhook.networkPolicy.apiServerSources": {"type": ["array", "null"]},
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
