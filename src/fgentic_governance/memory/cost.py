"""Cost admission: durable, atomic, and before any model or embedding work (ADR 0023 §42).

The counters live in the database (sql/0004): a sliding one-hour ledger per scope and a
token bucket per sender and Agent for explicit load/save. :meth:`CostGate.admit` checks and
consumes every item of one request in a single transaction - all admitted or none - and only
then may the caller summarize, embed or search. Erasure is never admitted or refused here.

Prometheus counters record admissions by operation type and reason code only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fgentic_governance.memory.errors import StoreRefusal, guarded
from fgentic_governance.memory.metrics import ADMISSIONS, ADMITTED_UNITS, record
from fgentic_governance.memory.model import Access, Operation
from fgentic_governance.reasons import Reason

_CAPTURE = frozenset({Operation.SAVE, Operation.SUMMARIZE})


class CostGate:
    """Admission against the scope's hourly ceiling and the explicit-operation bucket."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    async def admit(
        self, access: Access, items: Mapping[Operation, int], *, explicit: bool = False
    ) -> int:
        """Consume ``items`` (operation -> units) atomically; returns hourly units left.

        ``explicit`` marks a user-initiated load/save: it also takes one token from the
        six-per-minute, burst-three bucket. Refusals: RATE_LIMITED, COST_CEILING_REACHED, or
        the scope fence's codes (SCOPE_DISABLED, STALE_GENERATION, ...).
        """
        if not items or any(not 1 <= units <= 60 for units in items.values()):
            raise StoreRefusal(Reason.INVALID_SPEC)
        mode = "capture" if _CAPTURE.intersection(items) else "recall"

        async def work() -> int:
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "SELECT fgentic_memory.enter_scope($1, $2, $3, $4, $5, $6, $7)",
                    *access.params(), mode)
                remaining = 0
                take_token = explicit
                for operation, units in items.items():
                    remaining = await conn.fetchval(
                        "SELECT fgentic_memory.admit($1, $2, $3)",
                        operation.value, units, take_token)
                    take_token = False  # one explicit operation is one token
                return int(remaining)

        try:
            remaining = await guarded(work())
        except StoreRefusal as refusal:
            for operation in items:
                record(ADMISSIONS, operation.value, refusal.reason)
            raise
        for operation, units in items.items():
            record(ADMISSIONS, operation.value, Reason.OK)
            ADMITTED_UNITS.labels(operation=operation.value).inc(units)
        return remaining
