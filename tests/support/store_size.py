"""A memory store at size (benchmarks/bench_memory_size.py, tests/integration/
test_memory_at_size.py): other people's data loaded fast, and the plans of the statements a
store call really runs.

As the store's owner, server-side ``generate_series`` straight into the tables: scopes
``others/s-<i>`` (one subject each, the defaults' bounds: entry cap 100, 7 days, 60 units an
hour), granted as ``MemoryStore.grant`` does (enabled, generation 0 -> 1), their rows
interleaved (row g belongs to scope g mod scopes, as if everybody wrote over time) with the
columns ``save_fact`` writes (the scope's store Agent name and subject, its generation, an
expiry within its retention), each with a 768-dimensional random embedding drawn from a pool
of up to 4,096 random vectors (768 randoms for each of a million rows would take longer than a whole
benchmark run; a scope's search does the same work whatever the values), and
``LEDGER_PER_SCOPE`` hourly-ledger entries per scope in the last hour.

The rows pass the write trigger's one exemption (the owner with the transaction-local setting
``fgentic_memory.gate`` on, sql/0020), not the gate: this is a restore, not a save. The
connection must be the role that ran the migrations.

:class:`Recorder` is a pool whose connections record every statement (and its arguments)
before running it; :func:`explain` runs the recorded statements again, each under EXPLAIN, in
one transaction that is rolled back (ANALYZE executes them, so a claim one statement signs is
the next one's), with the plan PostgreSQL would pick for those values or, ``generic``, the one
it caches for a statement prepared five times (asyncpg prepares every statement).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

from fgentic_governance.memory import ScopeRecord
from fgentic_governance.memory.model import EMBEDDING_DIMENSIONS

HOMESERVER: Final = "fgentic.local"
NAMESPACE: Final = "others"
AGENT: Final = "helper"
STORE_AGENT: Final = f"{NAMESPACE}/{AGENT}"
POOL_VECTORS: Final = 4096
LEDGER_PER_SCOPE: Final = 5
CHUNK: Final = 50_000
"""Rows per loading statement (one transaction each)."""

_CREATE_POOL: Final = f"""
CREATE TABLE IF NOT EXISTS public.bulk_vector (i integer PRIMARY KEY,
                                               v vector({EMBEDDING_DIMENSIONS}))
"""
_POOL: Final = f"""
INSERT INTO public.bulk_vector
SELECT i, (SELECT array_agg(random() * 2 - 1)
             FROM generate_series(1, {EMBEDDING_DIMENSIONS} + 0 * i))::vector
  FROM generate_series(0, $1 - 1) AS i
    ON CONFLICT DO NOTHING
"""
_POOL_SIZE: Final = "SELECT count(*) FROM public.bulk_vector"
_SCOPES: Final = """
INSERT INTO fgentic_memory.scope
    (scope_key, subject_mxid, origin_kind, agent_namespace, agent_name, store_agent_name,
     control_room)
SELECT $2 || '/s-' || g, '@u-' || g || ':' || $3, 'native-local', $2, $4, $5,
       '!r-' || g || ':' || $3
  FROM generate_series(0, $1 - 1) AS g
"""
_GRANT: Final = """
UPDATE fgentic_memory.scope SET enabled = true, posture = 'enabled',
       consent_generation = consent_generation + 1, updated_at = now()
 WHERE agent_namespace = $1 RETURNING consent_generation
"""
_ROWS: Final = """
INSERT INTO fgentic_memory.memory
    (agent_name, user_id, content, embedding, created_at, expires_at, scope_key,
     consent_generation)
SELECT $4, '@u-' || (g % $3) || ':' || $5, 'Someone else''s fact number ' || g || '.',
       v.v, now() - make_interval(secs => g % 3600), now() + interval '6 days',
       $7 || '/s-' || (g % $3), $6
  FROM generate_series($1::bigint, $2::bigint - 1) AS g
  JOIN public.bulk_vector v ON v.i = g % $8
"""
_LEDGER: Final = f"""
INSERT INTO fgentic_memory.op_ledger (scope_key, operation, units, at)
SELECT $2 || '/s-' || g, 'embedding', 1, now() - make_interval(mins => k * 10)
  FROM generate_series(0, $1 - 1) AS g, generate_series(1, {LEDGER_PER_SCOPE}) AS k
"""
_REFILL: Final = """
INSERT INTO fgentic_memory.memory
    (agent_name, user_id, content, embedding, created_at, expires_at, scope_key,
     consent_generation)
SELECT s.store_agent_name, s.subject_mxid, 'Someone else''s fact again ' || g || '.',
       v.v, now(), now() + interval '6 days', s.scope_key, s.consent_generation - $3
  FROM fgentic_memory.scope s, generate_series(0, $2 - 1) AS g
  JOIN public.bulk_vector v ON v.i = g % $4
 WHERE s.scope_key = $1
"""


def other_scope(i: int) -> ScopeRecord:
    """The record of the ``i``-th scope :func:`load_others` made."""
    return ScopeRecord(scope_key=f"{NAMESPACE}/s-{i}", subject_mxid=f"@u-{i}:{HOMESERVER}",
                       origin_kind="native-local", agent_namespace=NAMESPACE, agent_name=AGENT,
                       store_agent_name=STORE_AGENT, control_room=f"!r-{i}:{HOMESERVER}")


async def restore(conn: Any, statement: str, *args: object) -> None:
    """One bulk insert past the write trigger, in its own transaction."""
    async with conn.transaction():
        await conn.execute("SELECT set_config('fgentic_memory.gate', 'on', true)")
        await conn.execute(statement, *args)


async def load_others(conn: Any, scopes: int, per_scope: int, *, progress: str = "") -> None:
    """``scopes`` scopes of ``per_scope`` rows each (as the owner), then VACUUM ANALYZE. With
    ``progress``, a line per loaded chunk, labelled with it."""
    rows = scopes * per_scope
    await conn.execute(_CREATE_POOL)
    await conn.execute(_POOL, min(POOL_VECTORS, rows))
    vectors = await conn.fetchval(_POOL_SIZE)
    await conn.execute(_SCOPES, scopes, NAMESPACE, HOMESERVER, AGENT, STORE_AGENT)
    generations = {row[0] for row in await conn.fetch(_GRANT, NAMESPACE)}
    if generations != {1}:
        raise RuntimeError(f"others' scopes are at generations {generations}, not 1")
    await conn.execute(_LEDGER, scopes, NAMESPACE)
    for lo in range(0, rows, CHUNK):
        await restore(conn, _ROWS, lo, min(rows, lo + CHUNK), scopes, STORE_AGENT, HOMESERVER,
                      1, NAMESPACE, vectors)
        if progress:
            print(f"  {progress}: {min(rows, lo + CHUNK):,} of {rows:,} rows", flush=True)
    for table in ("memory", "scope", "op_ledger"):
        await conn.execute(f"VACUUM (ANALYZE) fgentic_memory.{table}")


async def refill(conn: Any, scope_key: str, rows: int, *, generations_back: int = 0) -> None:
    """``rows`` more rows of one of :func:`load_others`'s scopes, at its generation less
    ``generations_back`` (0: readable; 1: as before its last erasure, unreadable), at the
    table's end."""
    await restore(conn, _REFILL, scope_key, rows, generations_back,
                  await conn.fetchval(_POOL_SIZE))


# -- the statements a store call runs, and their plans ------------------------------------------

Recorded = tuple[str, tuple[object, ...]]


class _Recording:
    """A connection that records every statement run through it, then runs it."""

    def __init__(self, conn: Any, log: list[Recorded]) -> None:
        self._conn, self._log = conn, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def execute(self, query: str, *args: object, **kwargs: Any) -> Any:
        self._log.append((query, args))
        return await self._conn.execute(query, *args, **kwargs)

    async def fetch(self, query: str, *args: object, **kwargs: Any) -> Any:
        self._log.append((query, args))
        return await self._conn.fetch(query, *args, **kwargs)

    async def fetchrow(self, query: str, *args: object, **kwargs: Any) -> Any:
        self._log.append((query, args))
        return await self._conn.fetchrow(query, *args, **kwargs)

    async def fetchval(self, query: str, *args: object, **kwargs: Any) -> Any:
        self._log.append((query, args))
        return await self._conn.fetchval(query, *args, **kwargs)


class Recorder:
    """A pool (``MemoryStore``'s or ``DelegatedStore``'s) whose connections record into
    ``log`` what the store's calls run."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.log: list[Recorded] = []

    @contextlib.asynccontextmanager
    async def acquire(self, **kwargs: Any) -> AsyncIterator[_Recording]:
        async with self._pool.acquire(**kwargs) as conn:
            yield _Recording(conn, self.log)


def _literal(value: object) -> str:
    """A recorded argument as an SQL literal, for EXECUTE (whose arguments cannot be bound)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, list | tuple):
        return "ARRAY[" + ",".join(_literal(v) for v in value) + "]"
    raise TypeError(f"no literal for a {type(value).__name__}")


async def explain(pool: Any, log: Sequence[Recorded], *, generic: bool = False,
                  options: str = "ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF"
                  ) -> list[list[str]]:
    """Each statement of ``log`` again under EXPLAIN (``options``), on ``pool`` (the role that
    ran it), in one transaction that is rolled back; each one's plan lines."""
    plans, prepared = [], []
    async with pool.acquire(timeout=60) as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            if generic:
                await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            for n, (statement, args) in enumerate(log):
                if generic:
                    await conn.execute(f"PREPARE fg_replay_{n} AS {statement}")
                    prepared.append(f"fg_replay_{n}")
                    call = ", ".join(_literal(a) for a in args)
                    rows = await conn.fetch(
                        f"EXPLAIN ({options}) EXECUTE fg_replay_{n}"
                        + (f"({call})" if args else ""))
                else:
                    rows = await conn.fetch(f"EXPLAIN ({options}) {statement}", *args)
                plans.append([str(row[0]) for row in rows])
        finally:
            await tx.rollback()
            for name in prepared:  # session-level; never DEALLOCATE ALL (asyncpg's are there)
                await conn.execute(f"DEALLOCATE {name}")
    return plans
