"""How long anything may wait on the content store, and the settings that keep its log clean.

Three tiers, each outlasting the one below, so that the erasure fence always wins:

- RUNTIME: every runtime transaction (set by the gates in sql/0006 and as this database's
  defaults). A stuck runtime transaction releases its locks within these bounds.
- POOL: the operator's and the control API's connections. Their lock wait is longer than a
  runtime transaction can hold a lock, so a fence that waits on a runtime that keeps the
  bounds gets its lock; one that waits on a runtime that loosened them (or on another
  erasure) fails with STORE_LOCK_TIMEOUT, and the scope stays held (disabled).
- ACQUIRE_SECONDS: how long a call waits for a pooled connection (then STORE_UNAVAILABLE).

PINNED are the database-level settings that sql/0006 sets and that the operator verifies
before it reports StoreReady (:func:`unsafe_settings`).

The data-path limits (how much one call may carry: fact and query bytes, search and list
pages, batch size, ttl, admitted units) live here too, once, for every caller: the memory
API's path (``delegated``), the operator's and the control API's store (``store``) and cost
admission. The database enforces its own copies of the storage bounds (sql/0001, sql/0002).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

RUNTIME: Final = MappingProxyType({
    "lock_timeout": "2s",
    "statement_timeout": "5s",
    "idle_in_transaction_session_timeout": "5s",
})
POOL: Final = MappingProxyType({
    "lock_timeout": "8s",
    "statement_timeout": "30s",
    "idle_in_transaction_session_timeout": "30s",
})
MIGRATION: Final = MappingProxyType({
    # A migration may build an index: long, but still bounded.
    "lock_timeout": "60s",
    "statement_timeout": "15min",
})
ACQUIRE_SECONDS: Final = 5.0

MAX_FACT_BYTES_CEILING: Final = 512
"""ADR 0023 §41: no stored fact is larger (UTF-8 bytes), whatever a scope's own cap (the
database's ``max_fact_bytes`` CHECK is the same ceiling)."""
MAX_QUERY_BYTES: Final = 512
"""UTF-8 bytes of one search or prefetch query text (ADR 0023 §42)."""
MAX_SEARCH_LIMIT: Final = 50
"""Most facts one search returns."""
MAX_LIST_LIMIT: Final = 100
"""Most entries one ``!memory inspect`` page returns."""
MAX_BATCH: Final = 50
"""Most facts one save carries (kagent's controller refuses a larger batch too)."""
MAX_SUMMARY_FACTS: Final = 10
"""ADR 0023 §43: most facts one automatic save (the runtime's summary of a session) may carry;
a larger one is refused whole, before any cost (SUMMARY_TOO_LARGE)."""
MAX_SUMMARY_INPUT_BYTES: Final = 16384
"""ADR 0023 §43: most UTF-8 bytes of conversation one summarisation may be given; a larger
one is refused before the model is called (SUMMARY_INPUT_TOO_LARGE; the database's
``max_summary_input_bytes()`` is the same bound)."""
MAX_TTL_DAYS: Final = 36500
"""Largest ``ttl_days`` a save may name (it can only shorten the scope's retention)."""
MAX_ADMIT_UNITS: Final = 60
"""Most units of one operation one admission may consume (the hourly ceiling's maximum)."""

LOGGING: Final = MappingProxyType({
    # ERROR texts quote a refused literal ("invalid input syntax for type vector: ..."), so
    # this database's sessions log FATAL and PANIC only; the rest keep statements, their
    # parameters and debug trees (which hold constants) out of the server log.
    "log_min_messages": "fatal",
    "log_min_error_statement": "panic",
    "log_statement": "none",
    "log_min_duration_statement": "-1",
    "log_min_duration_sample": "-1",
    "log_transaction_sample_rate": "0",
    "log_parameter_max_length": "0",
    "log_parameter_max_length_on_error": "0",
    "debug_print_parse": "off",
    "debug_print_rewritten": "off",
    "debug_print_plan": "off",
})
AUTO_EXPLAIN: Final = ("auto_explain.log_min_duration", "-1")
"""Pinned too where the module is loaded (it logs plans with their constants)."""
PINNED: Final = MappingProxyType({**RUNTIME, **LOGGING})

_SETTINGS_ROWS: Final = """
SELECT r.setrole = 0 AS database_level, unnest(r.setconfig) AS item
  FROM pg_catalog.pg_db_role_setting r
 WHERE r.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database
                              WHERE datname = current_database()))
   AND (r.setrole = 0
        OR r.setrole IN (SELECT m.member FROM pg_catalog.pg_auth_members m
                          JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
                          WHERE g.rolname IN ('fgentic_memory_runtime',
                                              'fgentic_memory_delegate')))
"""
_AUTO_EXPLAIN_LOADED: Final = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_settings WHERE name = $1)"


def pinned_now(auto_explain_loaded: bool) -> Mapping[str, str]:
    """The settings that must be pinned on this server."""
    if not auto_explain_loaded:
        return PINNED
    return MappingProxyType({**PINNED, AUTO_EXPLAIN[0]: AUTO_EXPLAIN[1]})


def judge(rows: list[tuple[bool, str]], pinned: Mapping[str, str]) -> list[str]:
    """Names of pinned settings that are missing or wrong at database level, or overridden by
    a direct member of the runtime or the delegate role (any value: those roles must keep the
    database's pins; the operator cannot see what a deeper membership grants).

    Pure, for unit tests: ``rows`` are (database-level?, "name=value") from pg_db_role_setting.
    Only names from ``pinned`` are ever returned, never a value read from the server.
    """
    at_database: dict[str, str] = {}
    overridden: set[str] = set()
    for database_level, item in rows:
        name, _, value = item.partition("=")
        if name not in pinned:
            continue
        if database_level:
            at_database[name] = value.strip().lower()
        else:
            overridden.add(name)
    return sorted(name for name, want in pinned.items()
                  if at_database.get(name) != want or name in overridden)


async def unsafe_settings(conn: Any) -> list[str]:
    """:func:`judge` against the live server (any connection; pg_db_role_setting is public)."""
    loaded = bool(await conn.fetchval(_AUTO_EXPLAIN_LOADED, AUTO_EXPLAIN[0]))
    rows = [(bool(r["database_level"]), str(r["item"]))
            for r in await conn.fetch(_SETTINGS_ROWS)]
    return judge(rows, pinned_now(loaded))


def pool_kwargs(*, min_size: int, max_size: int) -> dict[str, Any]:
    """asyncpg.create_pool keyword arguments for an operator or control API pool."""
    return {"min_size": min_size, "max_size": max_size, "server_settings": dict(POOL),
            "timeout": ACQUIRE_SECONDS, "command_timeout": 60.0}
