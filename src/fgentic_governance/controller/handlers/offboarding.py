"""PrincipalOffboarding registrations: thin; the flow lives in `offboarding.flow`.

The two indices belong to the operator's main Kopf operator (the scope reconciles read
``offboarding_principals``); the handlers belong to the erasure lane's own Kopf operator
(``lanes.ERASURE_REGISTRY``), which reads ``scopes_by_subject`` across threads
(:func:`subject_scopes`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Final

import kopf
from kubernetes.client import ApiClient

from fgentic_governance.api.common import GROUP, VERSION, Principal
from fgentic_governance.api.offboarding import OffboardingPhase, OffboardingSpec
from fgentic_governance.api.registry import MEMORY_SCOPE, PRINCIPAL_OFFBOARDING
from fgentic_governance.controller import erasure_process, lanes
from fgentic_governance.controller import kube_calls as kube
from fgentic_governance.controller.context import of, owns_cluster_kinds, scope_lock
from fgentic_governance.controller.handlers.common import (
    Transition,
    announce,
    announced,
    condition,
    merge_conditions,
    parse,
    ready,
    revision,
)
from fgentic_governance.controller.leadership import gated
from fgentic_governance.controller.metrics import OFFBOARDING_STAGE
from fgentic_governance.memory import MemoryStore, StoreRefusal
from fgentic_governance.offboarding.flow import ScopeOutcome, offboard
from fgentic_governance.reasons import Reason

RETRY_DELAY = 10
INDEX_READS: Final = 5
"""Attempts at reading the scope index across threads before the handler retries later."""
POKE = f"{GROUP}/offboarding-revision"
"""Annotation whose change has Kopf reconcile a MemoryScope at once (its own key: a consent
poke in the same second would otherwise leave the value, and so the object, unchanged)."""


@kopf.index(GROUP, VERSION, MEMORY_SCOPE.plural)
async def scopes_by_subject(
    namespace: str, name: str, spec: kopf.Spec, **_: Any
) -> dict[tuple[str, str], str]:
    subject = spec.get("subject") or {}
    return {(str(subject.get("mxid")), str(subject.get("originKind"))): f"{namespace}/{name}"}


@kopf.index(GROUP, VERSION, PRINCIPAL_OFFBOARDING.plural)
async def offboarding_principals(spec: kopf.Spec, **_: Any) -> dict[tuple[str, str], bool]:
    principal = spec.get("principal") or {}
    return {(str(principal.get("mxid")), str(principal.get("originKind"))): True}


def subject_scopes(index: Mapping[Any, Iterable[str]] | None, principal: Principal
                   ) -> list[str]:
    """The principal's MemoryScope keys from the main operator's ``scopes_by_subject``, read
    from the erasure lane's thread while Kopf may change it on its own: a read that meets a
    change ("changed size during iteration") is retried, a bounded number of times; then, as
    without an index, the handler fails closed and retries later."""
    key = (principal.mxid, principal.origin_kind.value)
    if index is not None:
        for _ in range(INDEX_READS):
            try:
                return list(index.get(key, ()))
            except RuntimeError:
                continue
    raise kopf.TemporaryError("scope index unreadable", delay=RETRY_DELAY)


@kopf.on.resume(GROUP, VERSION, PRINCIPAL_OFFBOARDING.plural, when=owns_cluster_kinds,
                registry=lanes.ERASURE_REGISTRY)
@kopf.on.create(GROUP, VERSION, PRINCIPAL_OFFBOARDING.plural, when=owns_cluster_kinds,
                registry=lanes.ERASURE_REGISTRY)
@gated
async def reconcile_offboarding(
    *, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, name: str, patch: kopf.Patch,
    memo: kopf.Memo, retry: int = 0, **_: Any,
) -> None:
    generation = int(meta.get("generation", 0))
    previous = status.get("conditions")
    request = parse(OffboardingSpec, spec)
    if request is None:
        _fail(patch, Reason.INVALID_SPEC, memo=memo, status=status, generation=generation)
        return
    principal = request.principal
    from_crs = subject_scopes(of(memo).scopes_by_subject, principal)
    api = of(memo).kube()
    if status.get("phase") == OffboardingPhase.READY.value:
        # Done and verified; a rerun would only mint new receipt ids. A retry is an earlier
        # run whose pokes failed after Ready was written: poke again (a restart leaves them to
        # the scope sweep, which finds the erased scopes' status behind their store rows).
        if retry:
            await poke_scopes(api, from_crs)
        return
    store = of(memo).erasure_store  # The erasure lane: never behind scope reconciles.
    if store is None:
        _fail(patch, Reason.STORE_UNAVAILABLE, memo=memo, status=status, generation=generation)
        raise kopf.TemporaryError(Reason.STORE_UNAVAILABLE.value, delay=RETRY_DELAY)
    try:
        async with scope_lock(f"offboarding:{principal.mxid}"):
            # Already on the erasure loop (the erasure operator's), where the pool belongs:
            # on_erasure_lane awaits the work in place, and hops there from any other loop.
            outcomes, written = await lanes.on_erasure_lane(_erase_then_ready(
                api, store, principal, from_crs, name=name, generation=generation,
                previous=previous))
    except StoreRefusal as refusal:
        _fail(patch, refusal.reason, memo=memo, status=status, generation=generation)
        raise kopf.TemporaryError(refusal.reason.value, delay=RETRY_DELAY) from None
    failed = [o for o in outcomes if not o.verified]
    if failed:
        patch.status.update(_counts(outcomes))
        _fail(patch, failed[0].reason, memo=memo, status=status, generation=generation)
        raise kopf.TemporaryError(failed[0].reason.value, delay=RETRY_DELAY)
    if not written:
        return  # Deleted meanwhile: nothing to announce; its deletion pokes the scopes.
    _announce(memo, status, OffboardingPhase.READY, Reason.OK,
              f"scopes erased {len(outcomes)} reason {Reason.OK.value}")
    await poke_scopes(api, from_crs)  # A failure retries this handler, which pokes again (above).


async def _erase_then_ready(
    api: ApiClient, store: MemoryStore, principal: Principal, from_crs: list[str], *, name: str,
    generation: int, previous: list[dict[str, Any]] | None,
) -> tuple[list[ScopeOutcome], bool]:
    """On the erasure lane's loop: the guarantee (every scope disabled, enumerated, erased and
    verified, one receipt each) and, once it holds, ReadyForDeactivation written at once on
    the lane's own threads, before the handler returns and before the scopes are poked: a
    watcher sees Ready as soon as the guarantee holds. Whether Ready was written (False: the
    guarantee does not hold yet, or the offboarding is gone)."""
    with OFFBOARDING_STAGE.labels(stage="erasure").time():
        outcomes = await erase(store, principal, from_crs)
    if not all(o.verified for o in outcomes):
        return outcomes, False
    with OFFBOARDING_STAGE.labels(stage="ready_write").time():
        written = await _write_ready(api, name, outcomes, generation=generation,
                                     previous=previous)
    return outcomes, written


async def erase(store: MemoryStore, principal: Principal, from_crs: list[str]
                ) -> list[ScopeOutcome]:
    """The flow in the erasure process where ``main`` forked one (``--erasure-process``);
    otherwise here, on the erasure lane's ``store`` (the default)."""
    if erasure_process.started():
        return await erasure_process.run_offboarding(principal, from_crs)
    return await offboard(store, principal, from_crs)


async def _write_ready(api: ApiClient, name: str, outcomes: list[ScopeOutcome], *,
                       generation: int, previous: list[dict[str, Any]] | None) -> bool:
    """ReadyForDeactivation with the counts and receipts, on the lane's own threads."""
    return await kube.patch_cluster_status(
        api, group=GROUP, version=VERSION, plural=PRINCIPAL_OFFBOARDING.plural, name=name,
        erasure=True, status={
            **_counts(outcomes), "phase": OffboardingPhase.READY.value,
            "reasonCode": Reason.OK.value, "observedGeneration": generation,
            "conditions": merge_conditions(
                previous, condition("ReadyForDeactivation", True, Reason.OK, generation,
                                    previous),
                ready(True, Reason.OK, generation, previous))})


def _counts(outcomes: list[ScopeOutcome]) -> dict[str, Any]:
    failed = sum(not o.verified for o in outcomes)
    return {"scopesFound": len(outcomes), "scopesErased": len(outcomes) - failed,
            "scopesFailed": failed, "results": [o.wire() for o in outcomes]}


async def poke_scopes(api: ApiClient, keys: list[str]) -> None:
    """Have each of the principal's MemoryScopes reconciled now, not at its next resync
    (issue 37: `kubectl get mscope` showed Enabled for 30 s after the offboarding): the store
    has just disabled and erased them, and their status (phase, reason, entry count,
    lastErasure with OFFBOARDING_IN_PROGRESS) follows within moments. One annotation write
    per scope per offboarding run; a resync that finds nothing new still writes nothing.
    Sent concurrently on the erasure lane's threads: a few round trips, not one per scope,
    and never queued behind the scope reconciles' API calls. Not to a scope whose reconcile
    waits for its slot: it reads the offboarding index and the store, erased by now, only once
    it holds one (`lanes.waiting_for_slot`)."""
    keys = [key for key in keys if not lanes.waiting_for_slot(key)]
    stamp = revision()

    async def poke(key: str) -> None:
        namespace, name = key.split("/", 1)
        await kube.annotate(api, group=GROUP, version=VERSION, plural=MEMORY_SCOPE.plural,
                            namespace=namespace, name=name, annotations={POKE: stamp},
                            erasure=True)

    for start in range(0, len(keys), lanes.ERASURE_THREADS):
        await asyncio.gather(*(poke(key) for key in keys[start:start + lanes.ERASURE_THREADS]))


def _announce(memo: kopf.Memo, status: kopf.Status, phase: OffboardingPhase, reason: Reason,
              message: str) -> None:
    """One event per change of phase or reason, once the watch shows that status written
    (``common.announce``): Failed goes through Kopf's patch after the handler, Ready was
    written on the erasure lane just before."""
    announce(memo, status, Transition(
        phase.value, message, warning=phase is OffboardingPhase.FAILED,
        fields=(("phase", phase.value), ("reasonCode", reason.value))))


announced(PRINCIPAL_OFFBOARDING.plural, when=owns_cluster_kinds, registry=lanes.ERASURE_REGISTRY)


def _fail(patch: kopf.Patch, reason: Reason, *, memo: kopf.Memo, status: kopf.Status,
          generation: int) -> None:
    """Failed, with one Warning event per change of reason (a retry that fails the same way
    posts nothing new)."""
    _announce(memo, status, OffboardingPhase.FAILED, reason, f"reason {reason.value}")
    previous = status.get("conditions")
    patch.status["phase"] = OffboardingPhase.FAILED.value
    patch.status["reasonCode"] = reason.value
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = merge_conditions(
        previous, condition("ReadyForDeactivation", False, reason, generation, previous),
        ready(False, reason, generation, previous))
