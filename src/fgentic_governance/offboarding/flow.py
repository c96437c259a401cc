"""Offboarding (ADR 0023 §37): disable → enumerate → erase → verify → one result per scope.

Scopes are enumerated from the MemoryScope CRs *and* from the store, so one missing from
either is still found. Every scope is disabled (generation advanced) before any is erased, so
no Agent can write for the principal while the others are being cleared. Idempotent: the
store is the durable truth, and a rerun re-verifies that each scope is empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from fgentic_governance import faults
from fgentic_governance.api.common import Principal
from fgentic_governance.api.memory import ErasureResult
from fgentic_governance.memory import ErasureReceipt, StoreRefusal
from fgentic_governance.reasons import Reason


class OffboardingStore(Protocol):
    async def scopes_for_subject(self, subject_mxid: str, origin_kind: str) -> list[str]: ...
    async def disable_and_advance(self, scope_key: str) -> int: ...
    async def withdraw(self, scope_key: str) -> ErasureReceipt: ...


@dataclass(frozen=True)
class ScopeOutcome:
    scope_key: str
    verified: bool
    reason: Reason
    receipt_id: str = ""

    def wire(self) -> dict[str, str]:
        namespace, name = self.scope_key.split("/", 1)
        return {"namespace": namespace, "scope": name,
                "result": (ErasureResult.VERIFIED if self.verified else ErasureResult.FAILED).value,
                "reasonCode": self.reason.value, "receiptId": self.receipt_id}


async def offboard(
    store: OffboardingStore, principal: Principal, scopes_from_crs: Iterable[str]
) -> list[ScopeOutcome]:
    stored = await store.scopes_for_subject(principal.mxid, principal.origin_kind.value)
    keys = sorted(set(scopes_from_crs) | set(stored))
    missing = {key for key in keys if key not in stored}  # Never reached the store.
    faults.point("offboard.after_enumerate")
    failures: dict[str, Reason] = {}
    for key in keys:  # 1. Disable everything first.
        if key not in missing:
            try:
                await store.disable_and_advance(key)
                faults.point("offboard.after_disable")
            except StoreRefusal as refusal:
                failures[key] = refusal.reason
    faults.point("offboard.after_disable_all")
    outcomes = []
    for key in keys:  # 2. Erase and verify each.
        if key in missing:
            outcomes.append(ScopeOutcome(key, True, Reason.OK))
            continue
        outcomes.append(await _erase(store, key, failures.get(key)))
        faults.point("offboard.after_erase")
    faults.point("offboard.before_record")
    return outcomes


async def _erase(store: OffboardingStore, key: str, earlier: Reason | None) -> ScopeOutcome:
    try:
        receipt = await store.withdraw(key)
    except StoreRefusal as refusal:
        return ScopeOutcome(key, False, earlier or refusal.reason)
    return ScopeOutcome(key, receipt.verified, receipt.reason, receipt.id)
