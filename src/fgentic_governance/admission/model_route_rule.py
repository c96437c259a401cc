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
from typing import Any

from fgentic_governance.admission.policy import AdmissionCode, Denial
from fgentic_governance.api.kagent import governed, model_refs


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
