"""The fenced store as the memory API reaches it: by (subject, Agent) under a live lease.

kagent's runtime names an Agent and a user and nothing else. Each call here enters the one
scope of that pair that has a live delegation lease (``fgentic_memory.enter_delegation``,
sql/0008), which signs the claim every gate checks (sql/0007); without a lease the database
refuses with LEASE_MISSING, with two with SCOPE_AMBIGUOUS. Cost is admitted and committed in
its own transaction before any read or write (ADR 0023 §42: the spend stands even when the
write is then refused). Needs the ``fgentic_memory_delegate`` role (sql/0010): the runtime
role's privileges plus delegation, which a runtime login does not have.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeVar

from fgentic_governance.contract.limits import utf8_bytes
from fgentic_governance.memory import write_policy
from fgentic_governance.memory.bounds import (
    ACQUIRE_SECONDS,
    MAX_ADMIT_UNITS,
    MAX_BATCH,
    MAX_FACT_BYTES_CEILING,
    MAX_SEARCH_LIMIT,
    MAX_TTL_DAYS,
)
from fgentic_governance.memory.errors import StoreRefusal, guarded
from fgentic_governance.memory.metrics import (
    ADMISSIONS,
    ADMITTED_UNITS,
    STORE_OPERATIONS,
    record,
)
from fgentic_governance.memory.model import (
    MAX_NOTED_USERS,
    Embedding,
    Envelope,
    Operation,
    RecentUsers,
    Sighting,
    vector_literal,
)
from fgentic_governance.memory.write_policy import MetadataValue
from fgentic_governance.reasons import Reason

T = TypeVar("T")

# A scalar call (store.py says why): one field of it evaluates it once.
_ENTER: Final = "SELECT (fgentic_memory.enter_delegation($1, $2, $3, $4)).scope_key"
_CHARGE_RECALL: Final = "SELECT fgentic_memory.charge_recall()"
_CHECK_SUMMARY: Final = "SELECT fgentic_memory.check_summary($1)"
_ADMIT: Final = "SELECT fgentic_memory.admit($1, $2, $3)"
# The user is attributed in the same statement (sql/0019), before any charge.
_RECENT_USER: Final = "fgentic_memory.recent_user($1, $2, $3::text[], $4, $5)"
_ADMIT_EMBEDDING: Final = f"SELECT fgentic_memory.admit_agent_embedding($1, $2, {_RECENT_USER})"
_ADMIT_SUMMARY: Final = (
    f"SELECT fgentic_memory.admit_agent_summary($1, $2, $6, {_RECENT_USER})")
_NOTE_ACTIVITY: Final = "SELECT fgentic_memory.note_activity($1, $2, $3::text[])"
_NOTE_CONTEXT: Final = ("SELECT fgentic_memory.note_context($1, $2, $3, $4, $5, $6, $7,"
                        " $8::text[], $9::text[])")
_BIND_CONTEXT: Final = "SELECT fgentic_memory.bind_context($1, $2, $3)"
_END_SAVE_WAIT: Final = "SELECT fgentic_memory.end_save_wait($1, $2, $3)"
# One statement: enter the leased scope, then insert every fact under its claim. The CTE is
# materialised, so the claim exists before the first row reaches the write gate; inside it,
# the call is scalar and OFFSET 0 keeps it to one evaluation.
_SAVE: Final = """
WITH ctx AS MATERIALIZED (
    SELECT (e.c).* FROM (SELECT fgentic_memory.enter_delegation($1, $2, $3, 'capture') AS c
                         OFFSET 0) AS e)
INSERT INTO fgentic_memory.memory
    (agent_name, user_id, content, embedding, metadata, expires_at, scope_key,
     consent_generation, memory_type, source_kind, write_reason, confirmation_status, sensitivity)
SELECT ctx.store_agent_name, $1, f.content, f.vector::vector, '{}'::jsonb,
       CASE WHEN f.ttl_days IS NULL THEN ctx.max_expiry
            ELSE least(ctx.max_expiry, now() + make_interval(days => f.ttl_days)) END,
       ctx.scope_key, ctx.consent_generation, $7, $8, $9, $10, $11
  FROM ctx, unnest($4::text[], $5::text[], $6::int[]) AS f(content, vector, ttl_days)
RETURNING id
"""
# The query vector is cast once (an InitPlan), not per row: asyncpg prepares statements, and
# from the sixth run on a connection PostgreSQL may pick a generic plan that repeated a
# ``$1::text::vector`` cast for every row (5-25x slower; benchmarks/bench_memory_api.py).
# The distance is computed once per row, in a subquery that OFFSET 0 keeps from being merged:
# written out three times (filter, score, order) PostgreSQL evaluated it three times, each
# detoasting the row's 3 KB vector again (docs/performance.md, "How the memory store holds").
_SEARCH: Final = """
WITH q AS MATERIALIZED (SELECT $1::text::vector AS v)
SELECT id, content, created_at, 1 - distance AS score
  FROM (SELECT id, content, created_at, embedding <=> (SELECT v FROM q) AS distance
          FROM fgentic_memory.readable_memory WHERE embedding IS NOT NULL OFFSET 0) AS r
 WHERE 1 - distance >= $3
 ORDER BY distance, id LIMIT $2
"""


@dataclass(frozen=True, slots=True)
class Caller:
    """Whom a runtime call is for: the subject (X-User-Id) via one Agent (its token)."""

    subject: str
    agent_namespace: str
    agent_name: str

    def params(self) -> tuple[str, str, str]:
        return (self.subject, self.agent_namespace, self.agent_name)


@dataclass(frozen=True, slots=True)
class Fact:
    """One item of a save. ``content`` and ``vector`` stay out of ``repr()``."""

    content: str = field(repr=False)
    vector: Embedding = field(repr=False)
    ttl_days: int | None = None
    """kagent's ``ttl_days``: may shorten the scope's retention, never lengthen it."""


@dataclass(frozen=True, slots=True)
class Found:
    id: str
    content: str = field(repr=False)
    score: float
    created_at: datetime


CheckedFact = tuple[str, str, int | None]
"""Insert parameters of one fact: content, pgvector literal, ttl_days."""


def utf8_size(text: str) -> int:
    """UTF-8 bytes of ``text``; a lone surrogate is not storable text (INVALID_SPEC)."""
    size = utf8_bytes(text)
    if size is None:
        raise StoreRefusal(Reason.INVALID_SPEC)
    return size


def check_content(content: str, metadata: Mapping[str, MetadataValue] | None = None) -> None:
    """The one fact check of the data path, before any budget is spent or any embedding is
    made: the write policy, storable UTF-8, non-empty, at most the ADR's ceiling (a smaller
    per-scope cap is the database's)."""
    write_policy.enforce(content, metadata)
    size = utf8_size(content)
    if size == 0:
        raise StoreRefusal(Reason.INVALID_SPEC)
    if size > MAX_FACT_BYTES_CEILING:
        raise StoreRefusal(Reason.FACT_TOO_LARGE)


def check_fact(fact: Fact) -> CheckedFact:
    """The insert parameters of one fact, or a refusal (before any budget is spent)."""
    check_content(fact.content)
    if fact.ttl_days is not None and not 1 <= fact.ttl_days <= MAX_TTL_DAYS:
        raise StoreRefusal(Reason.INVALID_SPEC)
    return fact.content, vector_literal(fact.vector), fact.ttl_days


def check_query(vector: Embedding, limit: int, min_score: float) -> str:
    if not 1 <= limit <= MAX_SEARCH_LIMIT or not -1.0 <= min_score <= 1.0:
        raise StoreRefusal(Reason.INVALID_SPEC)
    return vector_literal(vector)


class DelegatedStore:
    """Admission, save and search for the runtime's calls, each under a live lease."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    async def admit(self, caller: Caller, items: Mapping[Operation, int], *,
                    explicit: bool = False, bound: bool = False) -> bool:
        """Consume ``items`` against the leased scope's ceilings, committed on its own. A load
        (a search: the first turn's prefetch or load_memory) is first charged to a live lease
        of the scope, at most ``MAX_RECALLS_PER_LEASE`` (or the scope's lower bound) per lease
        (RECALL_LIMIT_REACHED); a summary (the automatic save) may carry at most the scope's
        ``max_summary_facts`` saves (SUMMARY_TOO_LARGE) and comes at most once per
        ``min_user_turns`` leases of the scope (SUMMARY_CADENCE_REACHED); its summarisation is
        not charged again when the model route admitted it (:meth:`admit_summary`). All in the
        same transaction as the admission: a refused one charges nothing.

        ``bound`` (every memory API call): first the call is bound to its lease's A2A context
        (sql/0021: CONTEXT_CONFLICT while any other context of the pair is in progress); a
        search of a context with an outstanding ``load_memory`` call is then the tool's and
        takes §42's explicit token like ``explicit``; an automatic save ends its context's
        wait for it, admitted or not. Returns whether a token was taken."""
        if not items or any(not 1 <= units <= MAX_ADMIT_UNITS for units in items.values()):
            raise StoreRefusal(Reason.INVALID_SPEC)
        mode = "capture" if {Operation.SAVE, Operation.SUMMARIZE} & set(items) else "recall"

        async def work() -> tuple[dict[Operation, int], bool]:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn, conn.transaction():
                await conn.fetchrow(_ENTER, *caller.params(), mode)
                tool = bound and bool(await conn.fetchval(_BIND_CONTEXT, *caller.params()))
                if Operation.LOAD in items:
                    await conn.fetchval(_CHARGE_RECALL)
                charged = dict(items)
                # The automatic save: its facts are its saves; its summarisation may have been
                # charged at the model route already.
                if Operation.SUMMARIZE in items and await conn.fetchval(
                        _CHECK_SUMMARY, items.get(Operation.SAVE, 0)):
                    del charged[Operation.SUMMARIZE]
                token = take_token = explicit or (tool and Operation.LOAD in items)
                for operation, units in charged.items():
                    await conn.fetchval(_ADMIT, operation.value, units, take_token)
                    take_token = False  # one explicit request is one token
            return charged, token

        try:
            charged, token = await guarded(work())
        except StoreRefusal as refusal:
            for operation in items:
                record(ADMISSIONS, operation.value, refusal.reason)
            raise
        finally:
            if bound and Operation.SUMMARIZE in items:
                await self._end_save_wait(caller)
        for operation in items:
            record(ADMISSIONS, operation.value, Reason.OK)
        _metered(charged)
        return token

    async def admit_embedding(self, agent_namespace: str, agent_name: str,
                              seen: RecentUsers) -> None:
        """One embedding of this Agent, charged to the one user its Pods served lately
        (``seen`` and every replica's notes, sql/0019: LEASE_MISSING with none,
        SCOPE_AMBIGUOUS with several), in that user's one leased scope of the Agent
        (sql/0016): LEASE_MISSING without one, SCOPE_AMBIGUOUS with two (two rooms leased at
        once) or while another user of the Agent holds a live lease (sql/0018: the request
        may be that user's turn)."""
        await self._admit_for_agent(Operation.EMBEDDING, _ADMIT_EMBEDDING,
                                    agent_namespace, agent_name, *_recent(seen))

    async def admit_summary(self, agent_namespace: str, agent_name: str,
                            input_bytes: int, seen: RecentUsers) -> None:
        """One summarisation of this Agent, before its model is called (sql/0013,
        sql/0016): attributed and charged like an embedding, its input within
        MAX_SUMMARY_INPUT_BYTES, its place in the cadence reserved for the automatic save that
        follows."""
        await self._admit_for_agent(Operation.SUMMARIZE, _ADMIT_SUMMARY,
                                    agent_namespace, agent_name, *_recent(seen), input_bytes)

    async def note_activity(self, agent_namespace: str, agent_name: str,
                            users: Sequence[str]) -> None:
        """Note that this Agent's Pods named ``users`` just now, for every replica's
        attribution (sql/0019)."""
        if not 1 <= len(users) <= MAX_NOTED_USERS:
            raise StoreRefusal(Reason.INVALID_SPEC)

        async def work() -> None:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn:
                await conn.execute(_NOTE_ACTIVITY, agent_namespace, agent_name, list(users))

        await self._counted("note_activity", work)

    async def _end_save_wait(self, caller: Caller) -> None:
        """The automatic save arrived (sql/0021 end_save_wait): its context, if it can only
        be that one, waits for it no more. A failure keeps the wait (more refusals, until its
        bound), so it is not the caller's."""
        async def work() -> None:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn:
                await conn.execute(_END_SAVE_WAIT, *caller.params())

        with contextlib.suppress(StoreRefusal):
            await self._counted("end_save_wait", work)

    async def note_context(self, agent_namespace: str, agent_name: str, user: str,
                           seen: Sighting) -> None:
        """Note, for every replica and before the call is relayed, what one pass-through call
        of this Agent's Pods for ``user`` said about an A2A context (sql/0021)."""
        async def work() -> None:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn:
                await conn.execute(_NOTE_CONTEXT, agent_namespace, agent_name, user,
                                   seen.context, seen.created, seen.user_events, seen.final,
                                   list(seen.called), list(seen.answered))

        await self._counted("note_context", work)

    async def _admit_for_agent(self, operation: Operation, statement: str, *args: Any) -> None:
        """A request that names no user, charged to the leased scope of the user the memory
        API attributed it to."""
        async def work() -> None:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn, conn.transaction():
                await conn.execute(statement, *args)

        try:
            await guarded(work())
        except StoreRefusal as refusal:
            record(ADMISSIONS, operation.value, refusal.reason)
            raise
        record(ADMISSIONS, operation.value, Reason.OK)
        _metered({operation: 1})

    async def save(self, caller: Caller, facts: Sequence[Fact], envelope: Envelope) -> list[str]:
        """Insert every fact or none; returns their ids."""
        if not 1 <= len(facts) <= MAX_BATCH:
            raise StoreRefusal(Reason.INVALID_SPEC)
        return await self.save_checked(caller, [check_fact(fact) for fact in facts], envelope)

    async def save_checked(self, caller: Caller, rows: Sequence[CheckedFact],
                           envelope: Envelope) -> list[str]:
        """``save`` for rows ``check_fact`` already produced (the memory API checks before it
        admits cost; checking twice cost ~0.5 ms per fact). The database's gates still run."""
        if not 1 <= len(rows) <= MAX_BATCH:
            raise StoreRefusal(Reason.INVALID_SPEC)
        contents, vectors, ttls = (list(column) for column in zip(*rows, strict=True))

        async def work() -> list[str]:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn:
                found = await conn.fetch(
                    _SAVE, *caller.params(), contents, vectors, ttls,
                    envelope.memory_type.value, envelope.source_kind.value,
                    envelope.write_reason.value, envelope.confirmation_status.value,
                    envelope.sensitivity.value)
            return [str(row["id"]) for row in found]

        return await self._counted("delegated_save", work)

    async def search(self, caller: Caller, vector: Embedding, *, limit: int,
                     min_score: float) -> list[Found]:
        """Nearest readable facts of the leased scope with at least ``min_score``."""
        literal = check_query(vector, limit, min_score)

        async def work() -> list[Found]:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn, \
                    conn.transaction(readonly=True):
                await conn.fetchrow(_ENTER, *caller.params(), "recall")
                rows = await conn.fetch(_SEARCH, literal, limit, min_score)
            return [Found(str(r["id"]), str(r["content"]), float(r["score"]), r["created_at"])
                    for r in rows]

        return await self._counted("delegated_search", work)

    @staticmethod
    async def _counted(operation: str, work: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await guarded(work())
        except StoreRefusal as refusal:
            record(STORE_OPERATIONS, operation, refusal.reason)
            raise
        record(STORE_OPERATIONS, operation, Reason.OK)
        return result


def _metered(charged: Mapping[Operation, int]) -> None:
    """The units committed, per operation (``fgentic_memory_admitted_units``): what the ledger
    was charged, so a summarisation the model route already charged is not counted twice."""
    for operation, units in charged.items():
        ADMITTED_UNITS.labels(operation=operation.value).inc(units)


def _recent(seen: RecentUsers) -> tuple[list[str], float, float]:
    """``seen`` as recent_user()'s parameters (more than MAX_NOTED_USERS are ambiguous
    anyway; a replica keeps no more)."""
    return list(seen.users[:MAX_NOTED_USERS]), seen.window, seen.slack
