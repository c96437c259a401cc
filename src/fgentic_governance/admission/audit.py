"""Audit mode: periodically evaluate every existing kagent Agent, as Gatekeeper audits.

Results go to content-free metrics (violations by reason code) and to one Warning event per
non-compliant Agent version, whose message is the bounded code and field path only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from fgentic_governance.admission import metrics
from fgentic_governance.admission.policy import AdmissionCode, PolicyState, agent_denials

log = logging.getLogger("fgentic_governance.admission.audit")


AuditKey = tuple[str, str, str, str]
"""(namespace, name, resourceVersion, uid) of an Agent version."""


def scan(agents: list[dict[str, Any]], state: PolicyState) -> dict[AuditKey, list[str]]:
    """Agent version → denial messages, for non-compliant Agents."""
    found = {}
    for agent in agents:
        denials = agent_denials(agent, state)
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
              interval: float) -> None:
    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    reported: set[AuditKey] = set()
    while True:
        await asyncio.sleep(interval)
        current = state()
        if current is None:
            continue
        try:
            listing: Any = await asyncio.to_thread(
                custom.list_cluster_custom_object, "kagent.dev", "v1alpha2", "agents")
            found = scan(list(listing.get("items", [])), current)
            publish(found)
            for key in found.keys() - reported:
                await asyncio.to_thread(core.create_namespaced_event, key[0],
                                        _event(key, found[key]))  # type: ignore[arg-type]
                reported.add(key)
        except Exception as exc:
            log.warning("audit failed: %s", type(exc).__name__)


def _event(key: AuditKey, messages: list[str]) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"generateName": f"{key[1]}.fgentic-audit-", "namespace": key[0]},
        "involvedObject": {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
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
