"""Consent → fence → erase (ADR 0023), as the operator drives it against the content store.

`reconcile` moves the store's durable scope record to the verdict of the gates:
- grant: advance the generation, then enable (one transaction in the store);
- anything short of consent: disable + advance, quiesce (the database now refuses every
  in-flight read or write at an older generation), delete, verify by reading back, receipt.
It is idempotent: the store holds the durable truth, so a rerun after a crash resumes where
the last one stopped (a disabled scope that still has rows is erased again, and a scope still
held by an unverified erasure - a withdrawal or a control-API forget-all whose fence ran out
of time - is erased again before anything else).
A failure leaves the scope disabled; nothing is ever re-enabled on assumption.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from fgentic_governance import faults
from fgentic_governance.api.memory import LastErasure, Posture, ScopePhase
from fgentic_governance.consent.gates import Verdict
from fgentic_governance.memory import ErasureReceipt, ScopeRecord, ScopeState, StoreRefusal
from fgentic_governance.reasons import Reason


class ScopeStore(Protocol):
    """The part of `MemoryStore` the flow needs (a fake in unit tests, PostgreSQL otherwise)."""

    async def ensure_scope(self, record_: ScopeRecord) -> ScopeState: ...
    async def grant(self, scope_key: str, posture: Posture = ...) -> int: ...
    async def set_posture(self, scope_key: str, posture: Posture) -> int: ...
    async def withdraw(self, scope_key: str) -> ErasureReceipt: ...
    async def erase_scope(self, scope_key: str) -> ErasureReceipt: ...
    async def scope_state(self, scope_key: str) -> ScopeState: ...
    async def latest_expiry(self, scope_key: str) -> datetime | None: ...


@dataclass(frozen=True)
class Outcome:
    """What the flow did, in content-free terms, for status and the consent receipt."""

    phase: ScopePhase
    reason: Reason
    generation: int
    entry_count: int
    hard_expiry: datetime | None = None
    erasure: ErasureReceipt | None = None
    granted: bool = False
    recall_withheld: tuple[tuple[Reason, int], ...] = ()
    """What the recall policy withholds of the readable rows, by code (none unless enabled)."""

    @property
    def last_erasure(self) -> LastErasure | None:
        # A verified erasure's outcome carries its cause (the verdict's code, e.g.
        # CONSENT_WITHDRAWN); a failed one's, the failure's code.
        return self.erasure.last_erasure(self.reason) if self.erasure else None


async def reconcile(
    store: ScopeStore, record: ScopeRecord, verdict: Verdict,
    recorded_generation: int | None = None,
) -> Outcome:
    """Bring the store's scope record to ``verdict``; raises StoreRefusal if the store refuses.

    ``recorded_generation`` is the consent generation the scope's status last recorded. A
    store generation past it is a change that was made but never recorded (the operator died
    in between): a withdrawal is then re-run, idempotently, so that its verified receipt is
    minted and recorded after all.
    """
    state = await store.ensure_scope(record)
    if verdict.enabled:
        # An enabled store the status never recorded is a grant whose receipt died with the
        # operator: report it as granted again (the store is not re-granted).
        unrecorded = state.enabled and (recorded_generation is None
                                        or state.consent_generation > recorded_generation)
        return await _enable(store, state, verdict.posture, unrecorded=unrecorded)
    unrecorded = (recorded_generation is not None
                  and state.consent_generation > recorded_generation)
    return await _disable(store, state, verdict.reason, force=unrecorded)


async def erase_for_deletion(store: ScopeStore, record: ScopeRecord) -> Outcome:
    """The finalizer's work: a deleted MemoryScope is withdrawn, erased and verified first."""
    try:
        state = await store.scope_state(record.scope_key)
    except StoreRefusal as refusal:
        if refusal.reason is Reason.SCOPE_MISSING:  # Never reached the store: nothing to erase.
            return Outcome(ScopePhase.DISABLED, Reason.OK, 0, 0)
        raise
    return await _disable(store, state, Reason.CONSENT_WITHDRAWN, force=True)


async def _enable(
    store: ScopeStore, state: ScopeState, posture: Posture, *, unrecorded: bool = False
) -> Outcome:
    if state.held:
        # Finish the erasure that placed the hold (it also lifts the hold once verified).
        receipt = await store.erase_scope(state.scope_key)
        if not receipt.verified:
            return Outcome(ScopePhase.FAILED, receipt.reason, receipt.generation,
                           state.entry_count, erasure=receipt)
        state = await store.scope_state(state.scope_key)
    granted = not state.enabled
    if granted:
        generation = await store.grant(state.scope_key, posture)
        faults.point("grant.after_store")
    elif state.posture is not posture:
        generation = await store.set_posture(state.scope_key, posture)
    else:
        generation = state.consent_generation
    fresh = await store.scope_state(state.scope_key)
    return Outcome(ScopePhase.ENABLED, Reason.OK, generation, fresh.entry_count,
                   hard_expiry=await store.latest_expiry(state.scope_key),
                   granted=granted or unrecorded, recall_withheld=fresh.recall_withheld)


async def _disable(
    store: ScopeStore, state: ScopeState, reason: Reason, *, force: bool = False
) -> Outcome:
    if not (force or state.enabled or state.entry_count or state.held):
        return Outcome(ScopePhase.DISABLED, reason, state.consent_generation, 0)
    faults.point("withdraw.before_fence")
    receipt = await store.withdraw(state.scope_key)
    faults.point("withdraw.after_verify")
    if not receipt.verified:
        return Outcome(ScopePhase.FAILED, receipt.reason, receipt.generation,
                       state.entry_count, erasure=receipt)
    return Outcome(ScopePhase.DISABLED, reason, receipt.generation, 0, erasure=receipt)
