"""Audit mode: periodically evaluate every existing kagent Agent, as Gatekeeper audits.

Results go to content-free metrics (violations by reason code) on every replica, and, from the
one replica holding the audit Lease, to one Warning event per non-compliant Agent version
(its uid included) and to a PolicyReport per namespace (``reports``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.admission import metrics, reports
from fgentic_governance.admission.policy import (
    AdmissionCode,
    Denial,
    PolicyState,
    agent_denials,
)
from fgentic_governance.api import kagent
from fgentic_governance.kube.lease import LeaseElector

log = logging.getLogger("fgentic_governance.admission.audit")


AuditKey = tuple[str, str, str, str]
"""(namespace, name, resourceVersion, uid) of an Agent version."""


Audited = list[tuple[dict[str, Any], list[Denial]]]
"""Every Agent with its denials (none when compliant)."""


def audit(agents: list[dict[str, Any]], state: PolicyState) -> Audited:
    return [(agent, agent_denials(agent, state)) for agent in agents]


def scan(audited: Audited) -> dict[AuditKey, list[str]]:
    """Agent version → denial messages, for non-compliant Agents."""
    found = {}
    for agent, denials in audited:
        if denials:
            meta = agent.get("metadata") or {}
            key = (str(meta.get("namespace")), str(meta.get("name")),
                   str(meta.get("resourceVersion")), str(meta.get("uid", "")))
            found[key] = [d.message() for d in denials]
    return found


def publish(found: dict[AuditKey, list[str]]) -> None:
    counts = Counter(m.split(" ", 1)[0] for messages in found.values() for m in messages)
    for code in AdmissionCode:
        metrics.AUDIT_VIOLATIONS.labels(code.value).set(counts.get(code.value, 0))
    metrics.AUDIT_RUNS.inc()


async def run(api_client: client.ApiClient, state: Callable[[], PolicyState | None],
              interval: float, elector: LeaseElector | None = None,
              warned: frozenset[AdmissionCode] = frozenset()) -> None:
    """Every ``interval``: metrics on every replica; events and PolicyReports only on the
    replica holding the audit Lease (one writer, however many replicas)."""
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    reported: set[AuditKey] = set()
    writer = ReportWriter(custom)
    while True:
        await asyncio.sleep(interval)
        current = state()
        if current is None:
            continue
        try:
            leading = elector is None or await asyncio.to_thread(elector.try_acquire)
            listing: Any = await asyncio.to_thread(
                custom.list_cluster_custom_object, kagent.GROUP, kagent.VERSION,
                kagent.AGENT.plural)
            audited = audit(list(listing.get("items", [])), current)
            found = scan(audited)
            publish(found)
            if not leading:
                continue
            for key in found.keys() - reported:
                await asyncio.to_thread(core.create_namespaced_event, key[0],
                                        _event(key, found[key]))  # type: ignore[arg-type]
                reported.add(key)
            await asyncio.to_thread(writer.write, reports.namespace_reports(audited, warned))
        except Exception as exc:
            log.warning("audit failed: %s", type(exc).__name__)


REPORTS_REQUEST_SECONDS = 10
"""Bound on the one list request per run that also tells whether PolicyReports are served."""


class ReportWriter:
    """Writes each namespace's PolicyReport in place (only when its results changed) and
    removes ours from namespaces without Agents. Without the PolicyReport CRD it writes
    nothing; every run asks again (one bounded list request, which the API server answers 404
    while the kind is not served), so a CRD installed or removed after start-up is noticed
    within one audit interval, and each change is logged once."""

    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self._custom = custom
        self._served: bool | None = None  # Unknown until the first run.

    def write(self, wanted: dict[str, dict[str, Any]]) -> None:
        existing = self._ours()
        if existing is None:
            return
        have = {str(r["metadata"]["namespace"]): r for r in existing.get("items", [])}
        for namespace, report in wanted.items():
            self._put(namespace, report, have.get(namespace))
        for namespace in have.keys() - wanted.keys():
            self._custom.delete_namespaced_custom_object(
                reports.GROUP, reports.VERSION, namespace, reports.PLURAL, reports.NAME)

    def _ours(self) -> Any:
        """Our PolicyReports, or None while the kind is not served."""
        try:
            existing = self._custom.list_cluster_custom_object(
                reports.GROUP, reports.VERSION, reports.PLURAL,
                label_selector=f"app.kubernetes.io/managed-by={reports.SOURCE}",
                _request_timeout=REPORTS_REQUEST_SECONDS)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._note(served=False)
            return None
        self._note(served=True)
        return existing

    def _note(self, *, served: bool) -> None:
        if served == self._served:
            return
        if served:
            log.info("PolicyReport CRD (wgpolicyk8s.io) served: audit results go to "
                     "PolicyReports")
        else:
            log.info("no PolicyReport CRD (wgpolicyk8s.io): audit results go to events only; "
                     "checked again every audit interval")
        self._served = served

    def _put(self, namespace: str, report: dict[str, Any], old: dict[str, Any] | None) -> None:
        if old is None:
            self._custom.create_namespaced_custom_object(
                reports.GROUP, reports.VERSION, namespace, reports.PLURAL, report)
        elif (old.get("summary"), old.get("results")) != (report["summary"], report["results"]):
            report["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            self._custom.replace_namespaced_custom_object(
                reports.GROUP, reports.VERSION, namespace, reports.PLURAL, reports.NAME, report)


def _event(key: AuditKey, messages: list[str]) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"generateName": f"{key[1]}.fgentic-audit-", "namespace": key[0]},
        "involvedObject": {"apiVersion": kagent.API_VERSION, "kind": kagent.AGENT.kind,
                           "namespace": key[0], "name": key[1], "resourceVersion": key[2],
                           "uid": key[3]},
        "type": "Warning",
        "reason": "PolicyViolation",
        "message": "; ".join(messages)[:1024],
        "source": {"component": "fgentic-governance-audit"},
        "reportingComponent": "fgentic-governance-audit",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
