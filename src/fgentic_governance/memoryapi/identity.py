"""Which Agent a workload is, from its service account (pure).

kagent v0.9.11 names an Agent's Pods' service account ``spec.declarative.deployment.
serviceAccountName`` when set, else the Agent's own name (unless the controller runs with a
global ``--default-service-account-name``, when every Agent shares one: then no Agent is
resolvable, and memory is refused - never guessed). Only memory-enabled Agents count: a token
of any other workload gets no memory at all. What we know of kagent's objects (its labels,
``app_name``, when memory is on) is ``api.kagent``, shared with the webhook.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fgentic_governance.api.kagent import AgentRef, memory_enabled, service_account_of
from fgentic_governance.memoryapi.codes import ApiError, ApiReason


@dataclass(frozen=True, slots=True)
class Workload:
    """An authenticated service account (TokenReview's ``system:serviceaccount:<ns>:<sa>``)."""

    namespace: str
    service_account: str


def workload_of(username: str) -> Workload | None:
    """The service account of a TokenReview username, or None for any other kind of user."""
    parts = username.split(":")
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not all(parts[2:]):
        return None
    return Workload(parts[2], parts[3])


def resolve_agent(workload: Workload, agents: Iterable[Mapping[str, Any]]) -> AgentRef:
    """The one memory-enabled Agent of the workload's namespace that runs as its account."""
    names = sorted(str(a["metadata"]["name"]) for a in agents
                   if memory_enabled(a) and service_account_of(a) == workload.service_account)
    if len(names) != 1:
        raise ApiError(ApiReason.AGENT_UNRESOLVED)
    return AgentRef(workload.namespace, names[0])


def routed_pod_agent(pod: Mapping[str, Any], agents: Iterable[Mapping[str, Any]]) -> AgentRef:
    """The Agent a routed Pod's requests are charged to: the one memory-enabled Agent that runs
    as the Pod's service account, as for a token (``resolve_agent``). Labels are whatever the
    Pod's creator chose, so they never name the Agent; a Pod whose ``kagent`` label names
    another Agent is refused (AGENT_MISMATCH) rather than charged to either."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    account = spec.get("serviceAccountName") or "default"
    agent = resolve_agent(Workload(str(meta.get("namespace") or ""), str(account)), agents)
    if (meta.get("labels") or {}).get("kagent", agent.name) != agent.name:
        raise ApiError(ApiReason.AGENT_MISMATCH)
    return agent
