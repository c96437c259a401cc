"""MemoryScope and ConsentRecord registrations: evaluate the gates, report content-free status."""

from __future__ import annotations

from typing import Any

import kopf

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.memory import ConsentRecordSpec, MemoryScopeSpec, ScopePhase
from fgentic_governance.consent.gates import Environment, evaluate
from fgentic_governance.handlers.common import condition, merge_conditions, now, parse
from fgentic_governance.reasons import Reason
from fgentic_governance.runtime_context import context

POKE = f"{GROUP}/consent-revision"


@kopf.index(GROUP, VERSION, "consentrecords")  # type: ignore[arg-type]
def consents_by_scope(
    namespace: str, spec: kopf.Spec, meta: kopf.Meta, **_: Any
) -> dict[tuple[str, str], tuple[str, str, dict[str, Any]]]:
    """(namespace, scope) → (creationTimestamp, name, spec) of each record."""
    key = (namespace, str(spec.get("scopeRef", {}).get("name", "")))
    return {key: (str(meta.get("creationTimestamp", "")), str(meta.get("name")), dict(spec))}


@kopf.on.resume(GROUP, VERSION, "memoryscopes")
@kopf.on.create(GROUP, VERSION, "memoryscopes")
@kopf.on.update(GROUP, VERSION, "memoryscopes")
def reconcile_scope(
    *, namespace: str, name: str, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta,
    patch: kopf.Patch, consents_by_scope: kopf.Index[Any, Any], **_: Any,
) -> None:
    generation = int(meta.get("generation", 0))
    conditions = status.get("conditions")
    scope = parse(MemoryScopeSpec, spec)
    if scope is None:
        _write(patch, generation, conditions, False, Reason.INVALID_SPEC)
        return
    records = sorted(consents_by_scope.get((namespace, name), []))
    consents = [c for c in (parse(ConsentRecordSpec, r[2]) for r in records) if c is not None]
    if len(consents) != len(records):
        _write(patch, generation, conditions, False, Reason.INVALID_SPEC)
        return
    ctx = context()
    verdict = evaluate(scope, consents, Environment(
        local_homeserver=ctx.local_homeserver, store_ready=ctx.store_ready))
    _write(patch, generation, conditions, verdict.enabled, verdict.reason)


def _write(
    patch: kopf.Patch, generation: int, previous: list[dict[str, Any]] | None,
    enabled: bool, reason: Reason,
) -> None:
    phase = ScopePhase.ENABLED if enabled else ScopePhase.DISABLED
    patch.status["phase"] = phase.value
    patch.status["reasonCode"] = reason.value
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = merge_conditions(
        previous, condition("Enabled", enabled, reason, generation, previous))


@kopf.on.create(GROUP, VERSION, "consentrecords")
@kopf.on.update(GROUP, VERSION, "consentrecords")
@kopf.on.resume(GROUP, VERSION, "consentrecords")
def reconcile_consent(
    namespace: str, spec: kopf.Spec, meta: kopf.Meta, patch: kopf.Patch, **_: Any
) -> None:
    """Validate the record and poke its scope so the scope re-evaluates its gates."""
    generation = int(meta.get("generation", 0))
    record = parse(ConsentRecordSpec, spec)
    patch.status["observedGeneration"] = generation
    if record is None:
        patch.status["conditions"] = [condition("Valid", False, Reason.INVALID_SPEC,
                                                generation, None)]
        return
    patch.status["conditions"] = [condition("Valid", True, Reason.OK, generation, None)]
    _poke_scope(namespace, record.scope_ref.name)


def _poke_scope(namespace: str, scope: str) -> None:
    """Change an annotation on the scope: Kopf then runs its update handler."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    body = {"metadata": {"annotations": {POKE: now()}}}
    try:
        client.CustomObjectsApi(context().api_client).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "memoryscopes", scope, body)
    except ApiException as exc:
        if exc.status != 404:  # A record for a missing scope gates nothing.
            raise kopf.TemporaryError("scope poke failed", delay=5) from None
