"""RetrievalBinding registrations: validate, and flag two bindings claiming one Agent."""

from __future__ import annotations

from typing import Any

import kopf

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.handlers.common import condition, merge_conditions, parse
from fgentic_governance.reasons import Reason


@kopf.index(GROUP, VERSION, "retrievalbindings")  # type: ignore[arg-type]
def bindings_by_agent(
    namespace: str, name: str, spec: kopf.Spec, **_: Any
) -> dict[tuple[str, str], str]:
    agent = spec.get("agent", {})
    return {(str(agent.get("namespace")), str(agent.get("name"))): f"{namespace}/{name}"}


@kopf.on.resume(GROUP, VERSION, "retrievalbindings")
@kopf.on.create(GROUP, VERSION, "retrievalbindings")
@kopf.on.update(GROUP, VERSION, "retrievalbindings")
def reconcile_binding(
    *, namespace: str, name: str, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta,
    patch: kopf.Patch, bindings_by_agent: kopf.Index[Any, Any], **_: Any,
) -> None:
    generation = int(meta.get("generation", 0))
    previous = status.get("conditions")
    binding = parse(RetrievalBindingSpec, spec)
    if binding is None:
        valid = condition("Valid", False, Reason.INVALID_SPEC, generation, previous)
        patch.status["conditions"] = merge_conditions(previous, valid)
        patch.status["observedGeneration"] = generation
        return
    claims = set(bindings_by_agent.get((binding.agent.namespace, binding.agent.name), []))
    conflict = len(claims | {f"{namespace}/{name}"}) > 1
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = merge_conditions(
        previous,
        condition("Valid", True, Reason.OK, generation, previous),
        condition("Conflict", conflict,
                  Reason.BINDING_CONFLICT if conflict else Reason.OK, generation, previous),
    )
