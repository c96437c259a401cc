"""Which Agent a workload is, from its service account (pure).

kagent v0.9.11 names an Agent's Pods' service account ``spec.declarative.deployment.
serviceAccountName`` when set, else the Agent's own name (unless the controller runs with a
global ``--default-service-account-name``, when every Agent shares one: then no Agent is
resolvable, and memory is refused - never guessed). Only memory-enabled Agents count: a token
of any other workload gets no memory at all. The runtime's ``app_name`` (``X-Agent-Name`` and
every body ``agent_name``) is ``<namespace>__NS__<name>`` with ``-`` as ``_``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from fgentic_governance.memoryapi.codes import ApiError, ApiReason

ROUTED_LABEL: Final = "fgentic.dev/memory-routed"
"""The webhook sets it on every routed Pod: the chart's NetworkPolicies key on it, and the
memory API's embeddings route finds its caller's Pod by it (the Agent is the Pod's service
account's, ``routed_pod_agent``)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """An authenticated service account (TokenReview's ``system:serviceaccount:<ns>:<sa>``)."""

    namespace: str
    service_account: str


@dataclass(frozen=True, slots=True)
class AgentRef:
    namespace: str
    name: str

    @property
    def app_name(self) -> str:
        return app_name(self.namespace, self.name)


def app_name(namespace: str, name: str) -> str:
    return namespace.replace("-", "_") + "__NS__" + name.replace("-", "_")


def workload_of(username: str) -> Workload | None:
    """The service account of a TokenReview username, or None for any other kind of user."""
    parts = username.split(":")
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not all(parts[2:]):
        return None
    return Workload(parts[2], parts[3])


def memory_enabled(agent: Mapping[str, Any]) -> bool:
    """kagent enables memory by the presence of ``memory`` (v1alpha2 declarative, v1alpha1)."""
    spec = agent.get("spec") or {}
    declarative = spec.get("declarative") or {}
    return declarative.get("memory") is not None or spec.get("memory") is not None


def service_account_of(agent: Mapping[str, Any]) -> str:
    spec = agent.get("spec") or {}
    deployment = (spec.get("declarative") or {}).get("deployment") or {}
    name = deployment.get("serviceAccountName")
    return name if isinstance(name, str) and name else str(agent["metadata"]["name"])


def resolve_agent(workload: Workload, agents: Iterable[Mapping[str, Any]]) -> AgentRef:
    """The one memory-enabled Agent of the workload's namespace that runs as its account."""
    names = sorted(str(a["metadata"]["name"]) for a in agents
                   if memory_enabled(a) and service_account_of(a) == workload.service_account)
    if len(names) != 1:
        raise ApiError(ApiReason.AGENT_UNRESOLVED)
    return AgentRef(workload.namespace, names[0])


def memory_agent_of(pod: Mapping[str, Any], agents: Iterable[Mapping[str, Any]]) -> str | None:
    """The memory-enabled Agent a Pod runs: by kagent's labels (``app: kagent``,
    ``kagent: <name>``) or by running under the Agent's service account."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    labels = meta.get("labels") or {}
    account = spec.get("serviceAccountName") or "default"
    for agent in agents:
        if not memory_enabled(agent):
            continue
        name = str(agent["metadata"]["name"])
        labelled = labels.get("app") == "kagent" and labels.get("kagent") == name
        if labelled or service_account_of(agent) == account:
            return name
    return None


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
