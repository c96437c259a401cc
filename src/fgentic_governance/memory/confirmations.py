"""Pending confirmations of ``!memory forget all`` and ``!memory off``, kept in the store.

The control API's two-step confirmations (``controlapi.confirm``) live here, in
``fgentic_memory.confirmation`` (sql/0012), so that the call that issues a token and the call
that redeems it may reach different replicas. A row holds the SHA-256 of a token (never the
token), everything the token is bound to, and its expiry in epoch seconds of the issuing
replica's clock. Taking a row deletes it: a token is spent by its first presentation, on any
replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from fgentic_governance.memory.bounds import ACQUIRE_SECONDS
from fgentic_governance.memory.errors import guarded


class Action(StrEnum):
    FORGET_ALL = "forget_all"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class Binding:
    """What a token authorizes; equality of every field is required to redeem it."""

    scope_key: str
    action: Action
    subject: str
    agent: str
    room: str
    generation: int


# b"FGCONFIR" as a positive signed 64-bit integer: issues are serialised, so the pending
# count holds across replicas.
_LOCK: Final = int.from_bytes(b"FGCONFIR", "big")
# Every value is a bound parameter.
_PRUNE: Final = (
    "DELETE FROM fgentic_memory.confirmation WHERE expires_at <= $1 OR (scope_key, action,"
    " subject, agent, room, consent_generation) = ($2, $3, $4, $5, $6, $7)")
_PENDING: Final = "SELECT count(*) FROM fgentic_memory.confirmation"
_PUT: Final = (
    "INSERT INTO fgentic_memory.confirmation (digest, scope_key, action, subject, agent, room,"
    " consent_generation, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
_TAKE: Final = (
    "DELETE FROM fgentic_memory.confirmation WHERE digest = $1 RETURNING scope_key, action,"
    " subject, agent, room, consent_generation, expires_at")


def _fields(binding: Binding) -> tuple[Any, ...]:
    return (binding.scope_key, binding.action.value, binding.subject, binding.agent,
            binding.room, binding.generation)


class StoreLedger:
    """The confirmation table on the operator's pool (the control API's)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    async def put(self, digest: bytes, binding: Binding, expires: float, *, now: float,
                  most: int) -> bool:
        """Keep ``digest`` for ``binding`` until ``expires``. Expired rows and an earlier
        token of the same binding go first; nothing is kept (False) while ``most`` are
        pending."""
        async def work() -> bool:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
                await conn.execute(_PRUNE, now, *_fields(binding))
                if await conn.fetchval(_PENDING) >= most:
                    return False
                await conn.execute(_PUT, digest, *_fields(binding), expires)
                return True

        return await guarded(work())

    async def take(self, digest: bytes) -> tuple[Binding, float] | None:
        """Remove and return the row of ``digest`` (its binding and expiry), if any."""
        async def work() -> tuple[Binding, float] | None:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn:
                row = await conn.fetchrow(_TAKE, digest)
            if row is None:
                return None
            binding = Binding(row["scope_key"], Action(row["action"]), row["subject"],
                              row["agent"], row["room"], int(row["consent_generation"]))
            return binding, float(row["expires_at"])

        return await guarded(work())
