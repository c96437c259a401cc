"""What fgentic-governance relies on in kagent v0.9.11's objects (pure facts, no I/O): their
coordinates (the one spelling of ``kagent.dev/v1alpha2`` and its kinds) and fields.

Shared by the admission webhook (which Pods to route) and the memory API (which Agent a caller
is). The runtime's ``app_name`` (``X-Agent-Name`` and every body ``agent_name``) is
``<namespace>__NS__<name>`` with ``-`` as ``_``. kagent enables memory by the presence of
``memory``; an Agent's Pods run as ``spec.declarative.deployment.serviceAccountName`` when set,
else as the Agent's own name, and carry the labels ``app: kagent`` and ``kagent: <name>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

GROUP: Final = "kagent.dev"
VERSION: Final = "v1alpha2"
"""The version our processes read, write and render (kagent v0.9.11's storage version)."""
API_VERSION: Final = f"{GROUP}/{VERSION}"
LEGACY_VERSION: Final = "v1alpha1"
"""Still served by kagent v0.9.11: the webhook reviews Agents of either version."""


@dataclass(frozen=True, slots=True)
class Kind:
    """One kagent kind we read or review (of :data:`GROUP`, :data:`VERSION`)."""

    kind: str
    plural: str


AGENT: Final = Kind("Agent", "agents")
MODEL_CONFIG: Final = Kind("ModelConfig", "modelconfigs")
REMOTE_MCP_SERVER: Final = Kind("RemoteMCPServer", "remotemcpservers")

ROUTED_LABEL: Final = "fgentic.dev/memory-routed"
"""The webhook sets it on every routed Pod: the chart's NetworkPolicies key on it, and the
memory API's embeddings route finds its caller's Pod by it (the Agent is the Pod's service
account's, ``routed_pod_agent``)."""


@dataclass(frozen=True, slots=True)
class AgentRef:
    namespace: str
    name: str

    @property
    def app_name(self) -> str:
        return app_name(self.namespace, self.name)


def app_name(namespace: str, name: str) -> str:
    return namespace.replace("-", "_") + "__NS__" + name.replace("-", "_")


def agent_pod_labels(name: str) -> dict[str, str]:
    """The selector kagent v0.9.11 gives an Agent's Deployment and Service (manifest_builder)."""
    return {"app": "kagent", "kagent": name}


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
        labelled = all(labels.get(k) == v for k, v in agent_pod_labels(name).items())
        if labelled or service_account_of(agent) == account:
            return name
    return None


def lists_tool(agent: Mapping[str, Any], server_namespace: str, server_name: str,
               tool: str) -> bool:
    """Whether a kagent v1alpha2 Agent lists ``tool`` of the RemoteMCPServer
    ``server_namespace/server_name`` among its declarative tools (kagent resolves an omitted
    namespace to the Agent's own)."""
    meta = agent.get("metadata") or {}
    declarative = (agent.get("spec") or {}).get("declarative") or {}
    tools = declarative.get("tools") if isinstance(declarative, Mapping) else None
    for entry in tools if isinstance(tools, list) else []:
        mcp = entry.get("mcpServer") if isinstance(entry, Mapping) else None
        kind = REMOTE_MCP_SERVER.kind
        if not isinstance(mcp, Mapping) or mcp.get("kind", kind) != kind:
            continue
        namespace = mcp.get("namespace") or meta.get("namespace")
        names = mcp.get("toolNames")
        if (namespace, mcp.get("name")) == (server_namespace, server_name) \
                and isinstance(names, list) and tool in names:
            return True
    return False


DEFAULT_MODEL_CONFIG: Final = "default-model-config"
"""kagent v0.9.11's ModelConfig for a declarative Agent that names none."""
OPENAI: Final = "OpenAI"


def model_refs(agent: Mapping[str, Any]) -> dict[str, str | None]:
    """Field path -> the ModelConfig (a name in the Agent's namespace) that part of a
    memory-enabled v1alpha2 Agent's model work uses; None where it names another namespace
    or nothing usable. Empty for an Agent without memory."""
    meta = agent.get("metadata") or {}
    declarative = (agent.get("spec") or {}).get("declarative") or {}
    memory = declarative.get("memory")
    if not isinstance(memory, Mapping):
        return {}
    own = str(meta.get("namespace", ""))
    return {
        "spec.declarative.modelConfig": _local(
            declarative.get("modelConfig") or DEFAULT_MODEL_CONFIG, own),
        "spec.declarative.memory.modelConfig": _local(memory.get("modelConfig"), own),
    }


def _local(ref: Any, namespace: str) -> str | None:
    if not isinstance(ref, str) or not ref:
        return None
    if "/" in ref:  # kagent's <namespace>/<name>: only the Agent's own namespace is reviewed
        ref_namespace, _, name = ref.partition("/")
        return name if ref_namespace == namespace and name else None
    return ref


def governed(model_config: Mapping[str, Any] | None, route: str) -> bool:
    """An OpenAI-compatible ModelConfig whose base URL is the governed route."""
    if not isinstance(model_config, Mapping):
        return False
    spec = model_config.get("spec")
    openai = spec.get("openAI") if isinstance(spec, Mapping) else None
    base = openai.get("baseUrl") if isinstance(openai, Mapping) else None
    return isinstance(spec, Mapping) and spec.get("provider") == OPENAI \
        and isinstance(base, str) and base.rstrip("/") == route.rstrip("/")
