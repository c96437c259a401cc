"""A floor's purge (issue 38 §7): erase and verify every scope under a posture floor.

The floor is in the store's fence, fully_disabled, before this runs (the handler sets it
first): from its commit no scope under it captures or recalls, so nothing is written between
one scope's erasure and the next. Each scope is then erased as ``!memory forget all`` erases
it (hold, fence, delete, wait for every earlier entrant, count what is left); consent is kept,
so lifting the floor later finds the scopes empty, not withdrawn. Scopes are enumerated from
the MemoryScope objects *and* from the store, as offboarding does. Idempotent: a rerun erases
already-empty scopes and verifies them again. Every receipt is content-free: ids, counts,
generations and codes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from fgentic_governance.memory import ErasureReceipt, StoreRefusal
from fgentic_governance.memory.floors import Floor
from fgentic_governance.offboarding.flow import ScopeOutcome
from fgentic_governance.reasons import Reason


class PurgeStore(Protocol):
    async def scopes_under(self, floor: Floor) -> list[str]: ...
    async def erase_scope(self, scope_key: str) -> ErasureReceipt: ...


@dataclass(frozen=True)
class ScopeReceipt(ScopeOutcome):
    """An offboarding's outcome for one scope, with the erasure's generation and count."""

    generation: int = 0
    deleted: int = 0

    def wire(self) -> dict[str, Any]:
        return {**super().wire(), "generation": self.generation, "deleted": self.deleted}


async def purge(
    store: PurgeStore, floor: Floor, scopes_from_crs: Iterable[str]
) -> list[ScopeReceipt]:
    stored = await store.scopes_under(floor)
    keys = sorted(set(scopes_from_crs) | set(stored))
    receipts = []
    for key in keys:
        if key not in stored:  # Never reached the store: nothing of it to erase.
            receipts.append(ScopeReceipt(key, True, Reason.OK))
            continue
        receipts.append(await _erase(store, key))
    return receipts


async def _erase(store: PurgeStore, key: str) -> ScopeReceipt:
    try:
        receipt = await store.erase_scope(key)
    except StoreRefusal as refusal:
        return ScopeReceipt(key, False, refusal.reason)
    return ScopeReceipt(key, receipt.verified, receipt.reason, receipt.id, receipt.generation,
                        receipt.deleted)


def digest(receipts: Iterable[ScopeReceipt]) -> str:
    """SHA-256 over the receipts' content-free fields, in scope order."""
    lines = sorted(f"{r.scope_key}|{r.verified}|{r.reason.value}|{r.receipt_id}|"
                   f"{r.generation}|{r.deleted}" for r in receipts)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()
