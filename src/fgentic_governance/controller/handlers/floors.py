"""MemoryPostureFloor registrations: put the floor in the store's fence, run a requested purge.

Thin: the fence is sql/0023, the purge `offboarding.purge`. The floor is written to the store
before anything else, so a purge erases scopes that nothing can write to any more.
"""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes.client import ApiClient

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.floors import FloorPhase, MemoryPostureFloorSpec
from fgentic_governance.api.memory import ErasureResult
from fgentic_governance.api.registry import MEMORY_POSTURE_FLOOR, MEMORY_SCOPE
from fgentic_governance.controller.context import of, scope_lock
from fgentic_governance.controller.handlers.common import (
    Transition,
    announce,
    announced,
    backoff,
    condition,
    merge_conditions,
    now,
    parse,
    ready,
)
from fgentic_governance.controller.handlers.offboarding import poke_scopes
from fgentic_governance.controller.leadership import gated
from fgentic_governance.controller.metrics import FLOOR_PURGE_SCOPES, FLOOR_RECONCILES
from fgentic_governance.memory import MemoryStore, StoreRefusal
from fgentic_governance.memory.floors import Floor
from fgentic_governance.offboarding.purge import ScopeReceipt, digest, purge
from fgentic_governance.reasons import Reason


@kopf.index(GROUP, VERSION, MEMORY_SCOPE.plural)
async def scopes_by_agent(
    namespace: str, name: str, spec: kopf.Spec, **_: Any
) -> dict[tuple[str, str], str]:
    agent = spec.get("agent") or {}
    return {(str(agent.get("namespace")), str(agent.get("name"))): f"{namespace}/{name}"}


@kopf.on.resume(GROUP, VERSION, MEMORY_POSTURE_FLOOR.plural)
@kopf.on.create(GROUP, VERSION, MEMORY_POSTURE_FLOOR.plural)
@kopf.on.update(GROUP, VERSION, MEMORY_POSTURE_FLOOR.plural)
@gated
async def reconcile_floor(
    *, body: kopf.Body, name: str, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta,
    patch: kopf.Patch, memo: kopf.Memo, scopes_by_agent: kopf.Index[Any, Any], retry: int = 0,
    **_: Any,
) -> None:
    generation = int(meta.get("generation", 0))
    request = parse(MemoryPostureFloorSpec, spec)
    if request is None:
        _fail(patch, Reason.INVALID_SPEC, memo=memo, status=status, generation=generation)
        return
    store = of(memo).store
    if store is None:
        _fail(patch, Reason.STORE_UNAVAILABLE, memo=memo, status=status, generation=generation)
        raise kopf.TemporaryError(Reason.STORE_UNAVAILABLE.value, delay=backoff(retry))
    floor = Floor.from_spec(name, request)
    wanted = request.purge.request_id if request.purge else None
    try:
        async with scope_lock(f"floor:{name}"):
            await store.set_floor(floor)
            receipts = None
            if wanted is not None and not _purged(status, wanted):
                receipts = await _purge(of(memo).kube(), store, floor, scopes_by_agent)
    except StoreRefusal as refusal:
        _fail(patch, refusal.reason, memo=memo, status=status, generation=generation)
        raise kopf.TemporaryError(refusal.reason.value, delay=backoff(retry)) from None
    previous = status.get("conditions")
    updates = [condition("Enforced", True, Reason.OK, generation, previous)]
    if receipts is not None:
        failed = _record_purge(patch, body, wanted or "", receipts)
        updates.append(condition("Purged", failed is None, failed or Reason.OK, generation,
                                 previous))
        if failed is not None:
            _fail(patch, failed, memo=memo, status=status, generation=generation,
                  extra=updates)
            raise kopf.TemporaryError(failed.value, delay=backoff(retry))
    patch.status["phase"] = FloorPhase.ENFORCED.value
    patch.status["reasonCode"] = Reason.OK.value
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = merge_conditions(
        previous, *updates, ready(True, Reason.OK, generation, previous))
    FLOOR_RECONCILES.labels(phase=FloorPhase.ENFORCED.value, reason=Reason.OK.value).inc()
    # One event per newly enforced generation, once that status is written.
    announce(memo, status, Transition(
        FloorPhase.ENFORCED.value, f"posture {request.posture.value} reason {Reason.OK.value}",
        fields=(("phase", FloorPhase.ENFORCED.value), ("reasonCode", Reason.OK.value),
                ("observedGeneration", generation))))


announced(MEMORY_POSTURE_FLOOR.plural)


@kopf.on.delete(GROUP, VERSION, MEMORY_POSTURE_FLOOR.plural)
@gated
async def clear_floor(*, name: str, memo: kopf.Memo, retry: int = 0, **_: Any) -> None:
    """The finalizer: the object goes away once its floor is out of the store (lifting a
    floor is an administrator's explicit act, never a side effect of a lost object)."""
    store = of(memo).store
    if store is None:
        raise kopf.TemporaryError(Reason.STORE_UNAVAILABLE.value, delay=backoff(retry))
    try:
        async with scope_lock(f"floor:{name}"):
            await store.clear_floor(name)
    except StoreRefusal as refusal:
        raise kopf.TemporaryError(refusal.reason.value, delay=backoff(retry)) from None


def _purged(status: kopf.Status, request_id: str) -> bool:
    """This request was purged and verified already (a rerun would only mint new receipt
    ids; a failed one is retried)."""
    done = status.get("purge") or {}
    return bool(done.get("requestId") == request_id
                and done.get("result") == ErasureResult.VERIFIED.value)


async def _purge(api: ApiClient, store: MemoryStore, floor: Floor,
                 index: kopf.Index[Any, Any]) -> list[ScopeReceipt]:
    from_crs = sorted({key for agent in list(index) if floor.covers(*agent)
                       for key in index.get(agent, [])})
    receipts = await purge(store, floor, from_crs)
    # Each MemoryScope's status (entry count, lastErasure) follows now, not at its resync.
    await poke_scopes(api, [r.scope_key for r in receipts if r.scope_key in from_crs])
    for receipt in receipts:
        FLOOR_PURGE_SCOPES.labels(
            result=(ErasureResult.VERIFIED if receipt.verified else ErasureResult.FAILED).value,
            reason=receipt.reason.value).inc()
    return receipts


def _record_purge(patch: kopf.Patch, body: kopf.Body, request_id: str,
                  receipts: list[ScopeReceipt]) -> Reason | None:
    """Write the purge's receipts; returns the first failure's code, or None if verified."""
    failed = [r for r in receipts if not r.verified]
    result = ErasureResult.FAILED if failed else ErasureResult.VERIFIED
    patch.status["purge"] = {
        "requestId": request_id, "result": result.value,
        "scopesFound": len(receipts), "scopesErased": len(receipts) - len(failed),
        "scopesFailed": len(failed), "rowsDeleted": sum(r.deleted for r in receipts),
        "digest": digest(receipts), "time": now(),
        "receipts": [r.wire() for r in receipts],
    }
    if not failed:
        kopf.event(body, type="Normal", reason="PurgeVerified",
                   message=f"scopes erased {len(receipts)} reason {Reason.OK.value}")
        return None
    return failed[0].reason


def _fail(patch: kopf.Patch, reason: Reason, *, memo: kopf.Memo, status: kopf.Status,
          generation: int, extra: list[dict[str, Any]] | None = None) -> None:
    """Failed, with one Warning event per change of reason, once that status is written."""
    announce(memo, status, Transition(
        FloorPhase.FAILED.value, f"reason {reason.value}", warning=True,
        fields=(("phase", FloorPhase.FAILED.value), ("reasonCode", reason.value))))
    previous = status.get("conditions")
    patch.status["phase"] = FloorPhase.FAILED.value
    patch.status["reasonCode"] = reason.value
    patch.status["observedGeneration"] = generation
    enforced = [] if extra else [condition("Enforced", False, reason, generation, previous)]
    patch.status["conditions"] = merge_conditions(
        previous, *enforced, *(extra or []), ready(False, reason, generation, previous))
    FLOOR_RECONCILES.labels(phase=FloorPhase.FAILED.value, reason=reason.value).inc()
