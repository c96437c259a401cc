"""Fenced operations on the governed content store (asyncpg).

The database enforces the fence (sql/0002, sql/0003): this module only sequences it. Scope
operations (ensure, grant, posture, fence, withdraw, erase, leases, counts, cleanup) run as the
schema owner - the operator and the control API. Entry operations carry an :class:`Access` -
scope, principal, Agent, room and consent generation - and work under the restricted
``fgentic_memory_runtime`` role too: list, count and forget serve ``!memory inspect`` and
``!memory forget <id>`` (the control API). Every failure surfaces as :class:`StoreRefusal`
with a bare reason code.

kagent's runtime does not come here: the memory API saves and searches through
``memory.delegated`` (``enter_delegation``, under a live lease), the one data path of the
product. :meth:`MemoryStore.save` and :meth:`MemoryStore.search` are the plain ``enter_scope``
path of an adapted runtime that carries the whole claim itself; nothing in the product calls
them, and the tests use them to drive the SQL fence directly (they add no size check of their
own, so the database's are the ones exercised). Every limit is ``memory.bounds``'s.

A runtime writing with its own SQL first enters the scope in the same transaction
(``SELECT * FROM fgentic_memory.enter_scope(..., 'capture')``: the only way to obtain the
signed claim the gates check, sql/0007), then inserts with two more columns::

    INSERT INTO fgentic_memory.memory
        (agent_name, user_id, content, embedding, metadata, created_at, expires_at,
         access_count, scope_key, consent_generation)
    VALUES ($1, $2, $3, $4, $5, NOW(), $6, $7, $8, $9) RETURNING id

and reads through ``fgentic_memory.readable_memory`` after ``enter_scope(...)`` in the same
transaction. That transaction must be READ COMMITTED (sql/0010: ISOLATION_REFUSED otherwise),
and an erasure reports Verified only after it has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

from fgentic_governance import faults
from fgentic_governance.api.memory import ErasureResult, Posture
from fgentic_governance.memory import write_policy
from fgentic_governance.memory.bounds import ACQUIRE_SECONDS, MAX_LIST_LIMIT, MAX_SEARCH_LIMIT
from fgentic_governance.memory.errors import StoreRefusal, guarded
from fgentic_governance.memory.floors import STORE_LEVEL, Floor
from fgentic_governance.memory.metrics import STORE_OPERATIONS, record
from fgentic_governance.memory.model import (
    DEFAULT_ENVELOPE,
    Access,
    ConfirmationStatus,
    Entry,
    Envelope,
    ErasureKind,
    ErasureReceipt,
    Lease,
    MemoryType,
    ScopeRecord,
    ScopeState,
    Sensitivity,
    SourceKind,
    WriteReason,
    recall_columns,
    vector_literal,
)
from fgentic_governance.memory.write_policy import MetadataValue
from fgentic_governance.reasons import Reason

T = TypeVar("T")

# Scalar calls: a function in FROM fills a tuplestore (and a materialised CTE another) for its
# one row, ~25-50 us per statement. One field of a scalar call evaluates it once.
_ENTER: Final = "SELECT (fgentic_memory.enter_scope($1, $2, $3, $4, $5, $6, $7)).store_agent_name"
# The query vector is cast once and each row's distance computed once (delegated.py says why).
_SEARCH: Final = """
WITH q AS MATERIALIZED (SELECT $1::text::vector AS v)
SELECT id, content, memory_type, source_kind, write_reason, confirmation_status, sensitivity,
       created_at, expires_at, consent_generation, 1 - distance AS score
  FROM (SELECT id, content, memory_type, source_kind, write_reason, confirmation_status,
               sensitivity, created_at, expires_at, consent_generation,
               embedding <=> (SELECT v FROM q) AS distance
          FROM fgentic_memory.readable_memory WHERE embedding IS NOT NULL OFFSET 0) AS r
 ORDER BY distance, id LIMIT $2
"""
_LIST: Final = (
    "SELECT id, content, memory_type, source_kind, write_reason, confirmation_status,"
    " sensitivity, created_at, expires_at, consent_generation"
    " FROM fgentic_memory.readable_memory ORDER BY created_at DESC, id LIMIT $1 OFFSET $2"
)
# One statement, one round trip, its own transaction, and the whole write gate once (sql/0020):
# enter_scope's checks read with the scope-row lock, then the payload, the retention and the
# cap under it, then the insert, which the trigger exempts (it would repeat those checks).
_SAVE: Final = """
SELECT fgentic_memory.save_fact($1, $2, $3, $4, $5, $6, $7, $8::text::vector, $9::jsonb, $10,
                                $11, $12, $13, $14, $15)
"""
# The five recall_* columns a scope (sql/0022) and a posture floor (sql/0023) share, in the
# order of model.recall_columns().
_RECALL_COLUMNS: Final = ("recall_memory_types", "recall_source_kinds",
                          "recall_confirmation_statuses", "recall_sensitivities",
                          "recall_max_age_seconds")
_RECALL_NAMES: Final = ", ".join(_RECALL_COLUMNS)
_RECALL_SET: Final = ", ".join(f"{c} = excluded.{c}" for c in _RECALL_COLUMNS)
# What the operator writes of a scope, from its MemoryScope (the key apart).
_SCOPE_SPEC: Final = ("subject_mxid", "origin_kind", "agent_namespace", "agent_name",
                      "store_agent_name", "control_room", "entry_cap", "max_fact_bytes",
                      "max_retention_days", "hourly_operation_ceiling", "explicit_per_minute",
                      "explicit_burst", "max_recalls", "max_summary_facts", "min_user_turns",
                      *_RECALL_COLUMNS)
# A reconcile that finds the row as the spec says writes nothing (no new row version, no
# trigger): at 10,000 scopes the re-reconciles after convergence rewrote ~2,000 rows unchanged.
_SCOPE_UPSERT: Final = f"""
INSERT INTO fgentic_memory.scope AS s (scope_key, {", ".join(_SCOPE_SPEC)})
VALUES ({", ".join(f"${i}" for i in range(1, len(_SCOPE_SPEC) + 2))})
ON CONFLICT (scope_key) DO UPDATE SET
    {", ".join(f"{c} = excluded.{c}" for c in _SCOPE_SPEC)}, updated_at = now()
WHERE ({", ".join(f"s.{c}" for c in _SCOPE_SPEC)})
      IS DISTINCT FROM ({", ".join(f"excluded.{c}" for c in _SCOPE_SPEC)})
"""  # noqa: S608 (constant text, no value in it)
_SCOPE_COLUMNS: Final = """
SELECT s.scope_key, s.enabled, s.posture, s.consent_generation, s.entry_cap, s.max_fact_bytes,
       s.max_retention_days, s.hourly_operation_ceiling,
       (SELECT count(*) FROM fgentic_memory.memory m WHERE m.scope_key = s.scope_key) AS n,
       EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h WHERE h.scope_key = s.scope_key)
           AS held,
       ARRAY(SELECT ROW(w.reason, w.n) FROM fgentic_memory.recall_withheld(s.scope_key) w)
           AS withheld"""
_SCOPE_STATE: Final = _SCOPE_COLUMNS + """
  FROM fgentic_memory.scope s WHERE s.scope_key = $1
"""
# The operator's sweep (controller/handlers/sweep.py): one page of every scope's facts, read
# only (the per-scope resync it replaces rewrote each scope row through _SCOPE_UPSERT).
_SCOPE_OVERVIEW: Final = _SCOPE_COLUMNS + """,
       (SELECT max(m.expires_at) FROM fgentic_memory.memory m
         WHERE m.scope_key = s.scope_key AND m.expires_at > statement_timestamp()) AS latest
  FROM fgentic_memory.scope s WHERE s.scope_key > $1 ORDER BY s.scope_key LIMIT $2
"""  # noqa: S608 (constant text, no value in it)
_FLOOR_UPSERT: Final = f"""
INSERT INTO fgentic_memory.posture_floor AS f
    (floor_key, level, agent_namespace, agent_name, posture, {_RECALL_NAMES})
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (floor_key) DO UPDATE SET
    level = excluded.level, agent_namespace = excluded.agent_namespace,
    agent_name = excluded.agent_name, posture = excluded.posture,
    {_RECALL_SET},
    updated_at = now()
"""  # noqa: S608 (constant text, no value in it)
# A hold disables the scope in every gate (sql/0006) and needs no lock that a runtime
# transaction can hold, so it takes effect at once even while the fence still waits.
_HOLD: Final = (
    "INSERT INTO fgentic_memory.scope_hold (scope_key) VALUES ($1) ON CONFLICT DO NOTHING")
_RELEASE: Final = "DELETE FROM fgentic_memory.scope_hold WHERE scope_key = $1"
# Wait for every transaction that entered the scope (they hold the entry lock shared) to end;
# held until this transaction ends (sql/0010).
_AWAIT_ENTRANTS: Final = "SELECT fgentic_memory.entry_lock($1, true)"


def _now() -> datetime:
    return datetime.now(UTC)


def _rowcount(status: str) -> int:
    # asyncpg returns the command tag, e.g. "DELETE 3".
    return int(status.rsplit(" ", 1)[-1])


def _entry(row: Any, score: float | None = None) -> Entry:
    envelope = Envelope(
        MemoryType(row["memory_type"]), SourceKind(row["source_kind"]),
        WriteReason(row["write_reason"]), ConfirmationStatus(row["confirmation_status"]),
        Sensitivity(row["sensitivity"]))
    return Entry(str(row["id"]), str(row["content"]), envelope, row["created_at"],
                 row["expires_at"], int(row["consent_generation"]), score)


def _entry_id(entry_id: str) -> str:
    # Ids are database-chosen UUIDs; anything else is refused without being echoed.
    try:
        return str(uuid.UUID(entry_id))
    except (ValueError, TypeError, AttributeError):
        raise StoreRefusal(Reason.INVALID_SPEC) from None


def _metadata_json(metadata: Mapping[str, MetadataValue] | None) -> str:
    try:
        return json.dumps(dict(metadata or {}), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        raise StoreRefusal(Reason.INVALID_SPEC) from None


class MemoryStore:
    """The content store boundary over an asyncpg pool.

    ``erasure_slots`` bounds how many erasures may wait on their fence at once, so that a
    pool shared with reads (the control API's) always keeps connections for them.
    """

    def __init__(self, pool: Any, *, erasure_slots: int | None = None) -> None:
        self._pool = pool
        self._erasures = asyncio.Semaphore(erasure_slots) if erasure_slots else None

    # -- plumbing ------------------------------------------------------------------------------

    async def _with_conn(self, work: Callable[[Any], Awaitable[T]]) -> T:
        async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn:
            return await work(conn)

    async def _run(self, operation: str, work: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection; count the outcome by operation and code only."""
        try:
            result = await guarded(self._with_conn(work))
        except StoreRefusal as refusal:
            record(STORE_OPERATIONS, operation, refusal.reason)
            raise
        record(STORE_OPERATIONS, operation, Reason.OK)
        return result

    @staticmethod
    async def _enter(conn: Any, access: Access, mode: str) -> Any:
        return await conn.fetchrow(_ENTER, *access.params(), mode)

    # -- scope records (operator) --------------------------------------------------------------

    async def ensure_scope(self, record_: ScopeRecord) -> ScopeState:
        """Create the scope record (disabled, generation 0) or update its mutable bounds.

        A changed subject, origin, Agent or room is BINDING_CONFLICT; a changed maximum
        retention is INVALID_SPEC (immutable once set).
        """
        r = record_

        async def work(conn: Any) -> ScopeState:
            await conn.execute(
                _SCOPE_UPSERT, r.scope_key, r.subject_mxid, r.origin_kind, r.agent_namespace,
                r.agent_name, r.effective_store_agent_name, r.control_room, r.entry_cap,
                r.max_fact_bytes, r.max_retention_days, r.hourly_operation_ceiling,
                r.explicit_per_minute, r.explicit_burst, r.max_recalls, r.max_summary_facts,
                r.min_user_turns, *r.recall_params())
            return await self._state(conn, r.scope_key)

        return await self._run("ensure_scope", work)

    async def scope_state(self, scope_key: str) -> ScopeState:
        return await self._run("scope_state", lambda conn: self._state(conn, scope_key))

    async def scope_overview(self, after: str, limit: int
                             ) -> list[tuple[ScopeState, datetime | None]]:
        """Up to ``limit`` scopes whose keys sort after ``after``, in key order: each one's
        state and when its last readable-by-time row expires. Read-only (the sweep's page)."""
        async def work(conn: Any) -> list[tuple[ScopeState, datetime | None]]:
            rows = await conn.fetch(_SCOPE_OVERVIEW, after, limit)
            return [(self._state_of(row),
                     row["latest"] if isinstance(row["latest"], datetime) else None)
                    for row in rows]

        return await self._run("scope_overview", work)

    @classmethod
    async def _state(cls, conn: Any, scope_key: str) -> ScopeState:
        row = await conn.fetchrow(_SCOPE_STATE, scope_key)
        if row is None:
            raise StoreRefusal(Reason.SCOPE_MISSING)
        return cls._state_of(row)

    @staticmethod
    def _state_of(row: Any) -> ScopeState:
        return ScopeState(
            scope_key=row["scope_key"], enabled=bool(row["enabled"]),
            posture=Posture(row["posture"]), consent_generation=int(row["consent_generation"]),
            entry_cap=int(row["entry_cap"]), max_fact_bytes=int(row["max_fact_bytes"]),
            max_retention_days=int(row["max_retention_days"]),
            hourly_operation_ceiling=int(row["hourly_operation_ceiling"]),
            entry_count=int(row["n"]), held=bool(row["held"]),
            recall_withheld=tuple((Reason(reason), int(n)) for reason, n in row["withheld"]))

    async def grant(self, scope_key: str, posture: Posture = Posture.ENABLED) -> int:
        """Advance the generation and enable, in one transaction; returns the new generation.

        Rows left from earlier consent periods can never be read again (their generation is
        stale forever), so they are deleted in the same transaction.
        """
        if posture is Posture.FULLY_DISABLED:
            raise StoreRefusal(Reason.INVALID_SPEC)

        async def work(conn: Any) -> int:
            async with conn.transaction():
                generation = await conn.fetchval(
                    "UPDATE fgentic_memory.scope SET enabled = true, posture = $2,"
                    " consent_generation = consent_generation + 1, updated_at = now()"
                    " WHERE scope_key = $1 RETURNING consent_generation",
                    scope_key, posture.value)
                if generation is None:
                    raise StoreRefusal(Reason.SCOPE_MISSING)
                await conn.execute(
                    "DELETE FROM fgentic_memory.memory"
                    " WHERE scope_key = $1 AND consent_generation < $2", scope_key, generation)
                return int(generation)

        return await self._run("grant", work)

    async def set_posture(self, scope_key: str, posture: Posture) -> int:
        """Change posture (capture_disabled keeps recall); returns the unchanged generation."""
        async def work(conn: Any) -> int:
            generation = await conn.fetchval(
                "UPDATE fgentic_memory.scope SET posture = $2, updated_at = now()"
                " WHERE scope_key = $1 RETURNING consent_generation", scope_key, posture.value)
            if generation is None:
                raise StoreRefusal(Reason.SCOPE_MISSING)
            return int(generation)

        return await self._run("set_posture", work)

    async def disable_and_advance(self, scope_key: str) -> int:
        """Disable and advance the generation atomically; returns the new generation.

        The write gate locks the scope row, so an in-flight write either committed before this
        (and is deleted by the erasure that follows) or is rejected after it.
        """
        return await self._run("disable", lambda conn: self._fence(conn, scope_key, True))

    @staticmethod
    async def _fence(conn: Any, scope_key: str, disable: bool) -> int:
        generation = await conn.fetchval(
            "UPDATE fgentic_memory.scope SET consent_generation = consent_generation + 1,"
            " enabled = CASE WHEN $2 THEN false ELSE enabled END, updated_at = now()"
            " WHERE scope_key = $1 RETURNING consent_generation", scope_key, disable)
        if generation is None:
            raise StoreRefusal(Reason.SCOPE_MISSING)
        return int(generation)

    async def withdraw(self, scope_key: str) -> ErasureReceipt:
        """``!memory off``: disable+advance, delete, verify; the scope stays disabled."""
        return await self._erase(scope_key, ErasureKind.WITHDRAWAL)

    async def erase_scope(self, scope_key: str) -> ErasureReceipt:
        """``!memory forget all``: advance (fence), delete, verify; consent is unchanged.

        Raises StoreRefusal only if the fence itself fails (nothing changed). Any later failure
        returns a FAILED receipt and leaves the scope disabled (ADR 0023 §12).
        """
        return await self._erase(scope_key, ErasureKind.SCOPE)

    async def _erase(self, scope_key: str, kind: ErasureKind) -> ErasureReceipt:
        if self._erasures is None:
            return await self._erase_held(scope_key, kind)
        try:
            async with asyncio.timeout(ACQUIRE_SECONDS):
                await self._erasures.acquire()
        except TimeoutError:
            record(STORE_OPERATIONS, f"erase_{kind.value}", Reason.STORE_UNAVAILABLE)
            raise StoreRefusal(Reason.STORE_UNAVAILABLE) from None
        try:
            return await self._erase_held(scope_key, kind)
        finally:
            self._erasures.release()

    async def _erase_held(self, scope_key: str, kind: ErasureKind) -> ErasureReceipt:
        operation = f"erase_{kind.value}"
        # 0. Hold, committed on its own: from here no read, write or cost admission of the
        #    scope passes, whatever locks a runtime transaction still holds. The hold stays
        #    until the erasure is verified (a refused fence leaves the scope held: closed).
        await self._run(f"{operation}_hold",
                        lambda conn: conn.execute(_HOLD, scope_key))
        # 1. Fence, committed on its own: from here every write or read at an older generation
        #    is refused by the database. Its lock wait is bounded (bounds.POOL): a runtime
        #    transaction that keeps the runtime bounds releases the scope row first.
        fence = await self._run(
            f"{operation}_fence",
            lambda conn: self._fence(conn, scope_key, kind is ErasureKind.WITHDRAWAL))
        deleted = 0
        withdrawal = kind is ErasureKind.WITHDRAWAL
        if withdrawal:
            faults.point("withdraw.after_fence")
        try:
            # 2. Delete everything stamped before the fence.
            deleted = await guarded(self._with_conn(
                lambda conn: self._delete_scope_rows(conn, scope_key, fence)))
            if withdrawal:
                faults.point("withdraw.after_delete")
            # 3. Read back through the table and the runtime's view.
            left = await guarded(self._with_conn(
                lambda conn: self._remaining(conn, scope_key, fence)))
            reason = Reason.OK if left == 0 else Reason.ERASURE_VERIFY_FAILED
        except StoreRefusal as refusal:
            reason = refusal.reason
        if reason is Reason.OK:
            await self._release(scope_key)
        else:
            await self._fail_closed(scope_key)
        record(STORE_OPERATIONS, operation, reason)
        return ErasureReceipt(
            id=uuid.uuid4().hex, kind=kind, generation=fence,
            result=ErasureResult.VERIFIED if reason is Reason.OK else ErasureResult.FAILED,
            reason=reason, time=_now(), deleted=deleted)

    async def _delete_scope_rows(self, conn: Any, scope_key: str, fence: int) -> int:
        status = await conn.execute(
            "DELETE FROM fgentic_memory.memory WHERE scope_key = $1 AND consent_generation < $2",
            scope_key, fence)
        return _rowcount(status)

    @staticmethod
    async def _remaining(conn: Any, scope_key: str, fence: int) -> int:
        # First every transaction that entered the scope before the fence must have ended
        # (sql/0010): one at READ COMMITTED may still run a statement or hold a cursor whose
        # snapshot predates the fence. Bounded by the connection's lock_timeout (bounds.POOL):
        # a runtime that stays in makes this STORE_LOCK_TIMEOUT, a FAILED receipt.
        # Then the rows of the table itself, after the delete committed. Nothing pre-fence can
        # be read through the view by a later statement: it admits only a claim signed for the
        # scope's current generation at READ COMMITTED (sql/0007, sql/0010).
        async with conn.transaction():
            await conn.execute(_AWAIT_ENTRANTS, scope_key)
            in_table = await conn.fetchval(
                "SELECT count(*) FROM fgentic_memory.memory"
                " WHERE scope_key = $1 AND consent_generation < $2", scope_key, fence)
        return int(in_table)

    async def _release(self, scope_key: str) -> None:
        """Lift the hold of a verified erasure (a scope whose consent stands is readable again).

        If this fails, the erasure is still verified and the scope stays held (closed); the
        operator's next reconcile finds the hold and lifts it by erasing again.
        """
        with contextlib.suppress(StoreRefusal):
            await guarded(self._with_conn(lambda conn: conn.execute(_RELEASE, scope_key)))

    async def _fail_closed(self, scope_key: str) -> None:
        async def work(conn: Any) -> None:
            await conn.execute(
                "UPDATE fgentic_memory.scope SET enabled = false,"
                " consent_generation = consent_generation + 1, updated_at = now()"
                " WHERE scope_key = $1 AND enabled", scope_key)

        try:
            await guarded(self._with_conn(work))
        except StoreRefusal:
            # Best effort: the receipt already says FAILED, and the operator keeps retrying.
            return

    async def entry_count(self, scope_key: str) -> int:
        """Physical rows of the scope, any generation or expiry (content-free status)."""
        async def work(conn: Any) -> int:
            value = await conn.fetchval(
                "SELECT count(*) FROM fgentic_memory.memory WHERE scope_key = $1", scope_key)
            return int(value)

        return await self._run("entry_count", work)

    async def latest_expiry(self, scope_key: str) -> datetime | None:
        """When the last currently readable-by-time row of the scope expires (status), or None.

        Content-free: a timestamp bounded by the scope's immutable maximum retention.
        """
        async def work(conn: Any) -> datetime | None:
            value = await conn.fetchval(
                "SELECT max(expires_at) FROM fgentic_memory.memory"
                " WHERE scope_key = $1 AND expires_at > statement_timestamp()", scope_key)
            return value if isinstance(value, datetime) else None

        return await self._run("latest_expiry", work)

    async def cleanup_expired(self) -> int:
        """Delete expired rows (never extends an expiry), ended leases and stale activity
        notes (sql/0019, sql/0021); returns how many rows of memory were deleted."""
        async def work(conn: Any) -> int:
            expired = int(await conn.fetchval("SELECT fgentic_memory.cleanup_expired()"))
            await conn.fetchval("SELECT fgentic_memory.prune_leases()")
            await conn.fetchval("SELECT fgentic_memory.prune_activity()")
            await conn.fetchval("SELECT fgentic_memory.prune_contexts()")
            return expired

        return await self._run("cleanup", work)

    # -- entries on enter_scope (every call carries the consent generation) --------------------
    # save and search: an adapted runtime's path, used by the tests of the SQL fence (the
    # product's runtime path is memory.delegated); list, count and forget: the control API.

    async def save(
        self,
        access: Access,
        content: str,
        *,
        embedding: Sequence[float] | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
        envelope: Envelope = DEFAULT_ENVELOPE,
        ttl: timedelta | None = None,
    ) -> str:
        """Store one fact; returns its opaque id. The write policy runs before the insert."""
        try:
            write_policy.enforce(content, metadata)
            vector = None if embedding is None else vector_literal(embedding)
            meta = _metadata_json(metadata)
            if ttl is not None and ttl <= timedelta(0):
                raise StoreRefusal(Reason.INVALID_SPEC)
        except StoreRefusal as refusal:
            record(STORE_OPERATIONS, "save", refusal.reason)
            raise

        async def work(conn: Any) -> str:
            entry_id = await conn.fetchval(
                _SAVE, *access.params(), content, vector, meta, ttl,
                envelope.memory_type.value, envelope.source_kind.value,
                envelope.write_reason.value, envelope.confirmation_status.value,
                envelope.sensitivity.value)
            return str(entry_id)

        return await self._run("save", work)

    async def search(
        self, access: Access, embedding: Sequence[float], *, limit: int = 8
    ) -> list[Entry]:
        """Nearest readable entries by cosine distance, through the fenced view."""
        if not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise StoreRefusal(Reason.INVALID_SPEC)
        vector = vector_literal(embedding)

        async def work(conn: Any) -> list[Entry]:
            async with conn.transaction(readonly=True):
                await self._enter(conn, access, "recall")
                rows = await conn.fetch(_SEARCH, vector, limit)
            return [_entry(row, float(row["score"])) for row in rows]

        return await self._run("search", work)

    async def list_entries(
        self, access: Access, *, limit: int = 20, offset: int = 0
    ) -> list[Entry]:
        """A bounded page of readable entries, newest first (``!memory inspect``)."""
        if not 1 <= limit <= MAX_LIST_LIMIT or offset < 0:
            raise StoreRefusal(Reason.INVALID_SPEC)

        async def work(conn: Any) -> list[Entry]:
            async with conn.transaction(readonly=True):
                await self._enter(conn, access, "recall")
                rows = await conn.fetch(_LIST, limit, offset)
            return [_entry(row) for row in rows]

        return await self._run("list", work)

    async def readable_count(self, access: Access) -> int:
        async def work(conn: Any) -> int:
            async with conn.transaction(readonly=True):
                await self._enter(conn, access, "recall")
                return int(await conn.fetchval(
                    "SELECT count(*) FROM fgentic_memory.readable_memory"))

        return await self._run("readable_count", work)

    async def forget_entry(self, access: Access, entry_id: str) -> ErasureReceipt:
        """``!memory forget <id>``: delete exactly that entry of this scope, then verify.

        Needs the current generation but not consent: erasure is never blocked by posture.
        An id that is already gone verifies as absent (``deleted == 0``).
        """
        wanted = _entry_id(entry_id)

        async def work(conn: Any) -> tuple[int, int]:
            async with conn.transaction():
                await self._enter(conn, access, "erase")
                status = await conn.execute(
                    "DELETE FROM fgentic_memory.memory WHERE id = $1 AND scope_key = $2",
                    wanted, access.scope_key)
            async with conn.transaction(readonly=True):
                # Not verified while a transaction that entered before the delete may still
                # read the entry (sql/0010); bounded by the connection's lock_timeout.
                await conn.execute(_AWAIT_ENTRANTS, access.scope_key)
                await self._enter(conn, access, "erase")
                in_table = await conn.fetchval(
                    "SELECT count(*) FROM fgentic_memory.memory WHERE id = $1 AND scope_key = $2",
                    wanted, access.scope_key)
                in_view = await conn.fetchval(
                    "SELECT count(*) FROM fgentic_memory.readable_memory WHERE id = $1", wanted)
            return _rowcount(status), int(in_table) + int(in_view)

        deleted, left = await self._run("forget", work)
        reason = Reason.OK if left == 0 else Reason.ERASURE_VERIFY_FAILED
        if left:
            record(STORE_OPERATIONS, "forget_verify", reason)
        return ErasureReceipt(
            id=uuid.uuid4().hex, kind=ErasureKind.ENTRY, generation=access.generation,
            result=ErasureResult.VERIFIED if left == 0 else ErasureResult.FAILED,
            reason=reason, time=_now(), deleted=deleted)

    # -- delegation leases (control API; owner role) ----------------------------------------

    async def open_lease(self, access: Access, seconds: int,
                         delegation_id: str | None = None, *,
                         context_id: str) -> Lease:
        """Open a lease on the scope at ``access.generation`` (sql/0008 checks the triple).

        With ``delegation_id`` (a UUID) a replay returns the live lease of that delegation
        unchanged, and an ended one is not reopened (LEASE_MISSING). At most MAX_LIVE_LEASES of
        one (subject, Agent) live at once (LEASE_LIMIT_REACHED; sql/0010).

        ``context_id``: the A2A context of the room the turn runs in (sql/0021); the memory
        API then admits the pair's memory calls only while that context alone is in progress
        (CONTEXT_CONFLICT). A replay must name the same one. It is required: a lease without
        one could bind no memory call, so the store refuses it (INVALID_SPEC), as it does a
        malformed one.
        """
        delegation = None if delegation_id is None else _entry_id(delegation_id)

        async def work(conn: Any) -> Lease:
            row = await conn.fetchrow(
                "SELECT lease_id, expires_at FROM fgentic_memory.open_lease"
                "($1, $2, $3, $4, $5, $6, $7, $8::uuid, $9)", *access.params(), seconds,
                delegation, context_id)
            return Lease(str(row["lease_id"]), row["expires_at"], access.generation)

        return await self._run("open_lease", work)

    async def close_lease(self, scope_key: str, lease_id: str) -> bool:
        """Close one lease of the scope; False when it was unknown or already closed."""
        wanted = _entry_id(lease_id)

        async def work(conn: Any) -> bool:
            return bool(await conn.fetchval(
                "SELECT fgentic_memory.close_lease($1::uuid, $2)", wanted, scope_key))

        return await self._run("close_lease", work)

    # -- offboarding (operator) ----------------------------------------------------------------

    async def scopes_for_subject(self, subject_mxid: str, origin_kind: str) -> list[str]:
        """Every scope key of one exact principal, as the store knows them.

        Offboarding enumerates the CRs *and* the store, so a scope whose CR is gone (or was
        never created by this operator) is still found and erased.
        """
        async def work(conn: Any) -> list[str]:
            rows = await conn.fetch(
                "SELECT scope_key FROM fgentic_memory.scope"
                " WHERE subject_mxid = $1 AND origin_kind = $2 ORDER BY scope_key",
                subject_mxid, origin_kind)
            return [str(row["scope_key"]) for row in rows]

        return await self._run("scopes_for_subject", work)

    # -- platform CLI (operator; content-free) -------------------------------------------------

    async def scope_states(self, subject_mxid: str | None = None) -> list[ScopeState]:
        """Content-free state of every scope (or of one exact subject's), by scope key."""
        async def work(conn: Any) -> list[ScopeState]:
            rows = await conn.fetch(
                "SELECT scope_key FROM fgentic_memory.scope"
                " WHERE $1::text IS NULL OR subject_mxid = $1 ORDER BY scope_key", subject_mxid)
            return [await self._state(conn, str(row["scope_key"])) for row in rows]

        return await self._run("scope_states", work)

    # -- posture floors (operator; sql/0023) ---------------------------------------------------

    async def set_floor(self, floor: Floor) -> None:
        """Put a floor in the fence, or change its posture: committed, it binds the next
        statement of every capture and recall of the Agents it covers."""
        async def work(conn: Any) -> None:
            await conn.execute(
                _FLOOR_UPSERT, floor.key, STORE_LEVEL[floor.level], floor.agent_namespace,
                floor.agent_name, floor.posture.value, *recall_columns(floor.recall))

        await self._run("set_floor", work)

    async def clear_floor(self, floor_key: str) -> bool:
        """Remove a floor (its MemoryPostureFloor was deleted); False when it was not there."""
        async def work(conn: Any) -> bool:
            status = await conn.execute(
                "DELETE FROM fgentic_memory.posture_floor WHERE floor_key = $1", floor_key)
            return _rowcount(status) > 0

        return await self._run("clear_floor", work)

    async def floor_posture(self, agent_namespace: str, agent_name: str) -> Posture:
        """The most restrictive floor over one Agent, as the fence reads it."""
        async def work(conn: Any) -> Posture:
            return Posture(await conn.fetchval(
                "SELECT fgentic_memory.floor_posture($1, $2)", agent_namespace, agent_name))

        return await self._run("floor_posture", work)

    async def scopes_under(self, floor: Floor) -> list[str]:
        """Every scope key of the Agents a floor covers, as the store knows them."""
        async def work(conn: Any) -> list[str]:
            rows = await conn.fetch(
                "SELECT scope_key FROM fgentic_memory.scope"
                " WHERE $1 = 'cluster' OR (agent_namespace = $2"
                " AND ($1 = 'namespace' OR agent_name = $3)) ORDER BY scope_key",
                STORE_LEVEL[floor.level], floor.agent_namespace, floor.agent_name)
            return [str(row["scope_key"]) for row in rows]

        return await self._run("scopes_under", work)
