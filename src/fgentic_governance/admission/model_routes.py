"""A memory-enabled Agent's model work goes through the governed model route (pure).

kagent-adk 0.9.11 summarises a session on the Agent's own model and embeds facts and queries
on its memory's embedding model, each before it calls the memory API. With the memory API as
both routes (``memoryApi.modelUpstream``, ``memoryApi.embeddingsUpstream``), that work is
admitted against the subject's live delegation before a model sees it (ADR 0023 §42), but only
if the Agent's ModelConfigs point there. So a memory-enabled Agent is admitted only when each
ModelConfig its model work uses is in its own namespace, OpenAI-compatible, and has the
governed base URL; and such a ModelConfig cannot be repointed while that Agent uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from fgentic_governance.admission.policy import AdmissionCode, Denial

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


def model_denials(agent: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any] | None],
                  route: str) -> list[Denial]:
    """MEMORY_MODEL_UNGOVERNED at each reference of a memory-enabled Agent whose ModelConfig
    (``configs``, by name; None when absent) does not use ``route``."""
    return [Denial(AdmissionCode.MEMORY_MODEL_UNGOVERNED, path)
            for path, name in model_refs(agent).items()
            if name is None or not governed(configs.get(name), route)]


def model_config_denials(model_config: Mapping[str, Any], agents: Sequence[Mapping[str, Any]],
                         route: str) -> list[Denial]:
    """A ModelConfig a memory-enabled Agent of its namespace uses must stay governed."""
    if governed(model_config, route):
        return []
    name = str((model_config.get("metadata") or {}).get("name", ""))
    used = any(name in model_refs(agent).values() for agent in agents)
    return [Denial(AdmissionCode.MEMORY_MODEL_UNGOVERNED, "spec")] if used else []
