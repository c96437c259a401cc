"""Audit results as PolicyReports (wgpolicyk8s.io/v1alpha2, as Kyverno and policy-reporter
use): one report per namespace, every kagent Agent of it a result (pass, or fail per denial
with the rule's code and what to change), content-free (codes, field paths, names and uids
only). Pure: the webhook's audit writes what this renders.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from fgentic_governance.admission.guidance import GUIDANCE
from fgentic_governance.admission.policy import AdmissionCode, Denial
from fgentic_governance.api import kagent

GROUP: Final = "wgpolicyk8s.io"
VERSION: Final = "v1alpha2"
PLURAL: Final = "policyreports"
NAME: Final = "fgentic-governance-audit"
SOURCE: Final = "fgentic-governance"
POLICY: Final = "fgentic-governance-admission"


def _resource(agent: Mapping[str, Any]) -> dict[str, str]:
    meta = agent.get("metadata") or {}
    return {"apiVersion": str(agent.get("apiVersion", kagent.API_VERSION)),
            "kind": kagent.AGENT.kind,
            "namespace": str(meta.get("namespace", "")), "name": str(meta.get("name", "")),
            "uid": str(meta.get("uid", ""))}


def _results(agent: Mapping[str, Any], denials: Sequence[Denial],
             warned: frozenset[AdmissionCode]) -> list[dict[str, Any]]:
    resource = [_resource(agent)]
    if not denials:
        return [{"policy": POLICY, "rule": "all", "result": "pass", "source": SOURCE,
                 "scored": True, "resources": resource}]
    return [{"policy": POLICY, "rule": d.code.value, "source": SOURCE, "scored": True,
             **({"result": "warn", "severity": "medium"} if d.code in warned
                else {"result": "fail", "severity": "high"}),
             "resources": resource, "message": f"{d.message()}: {GUIDANCE[d.code]}"}
            for d in denials]


def namespace_reports(audited: Sequence[tuple[Mapping[str, Any], Sequence[Denial]]],
                      warned: frozenset[AdmissionCode] = frozenset(),
                      ) -> dict[str, dict[str, Any]]:
    """Namespace → its PolicyReport (without resourceVersion), results in a stable order; a
    rule set to warn (enforcement.py) is a ``warn`` result, every other denial ``fail``."""
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for agent, denials in audited:
        namespace = str((agent.get("metadata") or {}).get("namespace", ""))
        by_namespace.setdefault(namespace, []).extend(_results(agent, denials, warned))
    reports = {}
    for namespace, results in by_namespace.items():
        results.sort(key=lambda r: (r["resources"][0]["name"], r["rule"]))
        counts = Counter(r["result"] for r in results)
        reports[namespace] = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PolicyReport",
            "metadata": {"name": NAME, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": SOURCE}},
            "summary": {k: counts.get(k, 0) for k in ("pass", "fail", "warn", "error", "skip")},
            "results": results,
        }
    return reports
