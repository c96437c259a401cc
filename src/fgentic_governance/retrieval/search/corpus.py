"""The knowledge corpus table of ADR 0017 and the derived ACL columns the prefilter reads.

A chunk is ``chunks(id, content, embedding vector(768), metadata jsonb)``; ``metadata`` holds
the ingestion-owned ACL (#331): ``classification`` (a string), ``allowed_principals`` (typed
principal objects, the same shape as an audience entry) and ``allowed_groups`` (strings).

The prefilter (``prefilter.py``) does not compare raw ``metadata`` JSON, because jsonb's own
operators are not exact for this purpose:

* ``@>`` on objects is a subset test: a row entry ``{kind, principal, network}`` contains an
  audience entry ``{kind, principal}``, so a superset object would admit a caller it does not
  name;
* ``?|`` also matches object keys and scalar strings: ``{"partner/x/y": 1}`` and the bare string
  ``"partner/x/y"`` both answer ``?| '{partner/x/y}'`` with true;
* ``->>`` turns numbers, booleans and arrays into text.

So three ``GENERATED ALWAYS ... STORED`` columns normalise ``metadata`` once, at write time, into
plain values whose equality *is* the ADR's rule, and which GIN can index:

* ``acl_classification text``: ``metadata.classification`` if it is a JSON string, else NULL;
* ``acl_principals text[]``: one key per allowed_principals element that is *exactly* a
  well-formed typed principal (``{kind: matrix, principal}`` or ``{kind: bridged_matrix,
  network, principal}``, string values, no other member); any other element yields no key;
* ``acl_groups text[]``: the JSON-string elements of ``metadata.allowed_groups``.

A non-array, a non-object, NULL metadata or a wrong JSON type therefore yields no key, which can
only deny. The columns cannot drift from ``metadata``: PostgreSQL recomputes them on every
INSERT/UPDATE and refuses any direct write. The key functions use SQL-standard bodies (bound at
creation time), so a caller's ``search_path`` cannot substitute an operator or function.

Key format: ``kind || ' ' || network-or-empty || ' ' || principal``. Audience values never
contain a space (validated MXID and DNS-label grammars), so a key built from an audience entry
has exactly two spaces and equals a row key only when all three parts are equal; a row string
with spaces can never match one.

The two ACL clauses (:func:`clause`) and the ranked statement (:func:`search_sql`) are defined
here too, next to the columns they read, and installed as one SQL function per rule (see
:func:`search_function`) whose SET clauses carry pgvector's iterative-scan settings.
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Sequence
from enum import StrEnum
from functools import cache
from typing import Final

import asyncpg

EMBEDDING_DIMENSIONS: Final = 768
"""The default dimension of a corpus (a 768-dimension model)."""
DIMENSIONS: Final = (768, 1024)
"""The dimensions a corpus may have (ADR 0024's BGE-M3 is 1,024): a deployment setting, fixed
when the table is created, read back from it (:func:`table_dimensions`)."""
TABLE: Final = "chunks"
FUNCTION_SCHEMA: Final = "fgentic_retrieval"
KEY_SEPARATOR: Final = " "


class Rule(StrEnum):
    """The ACL column a projection kind is authorized through."""

    PRINCIPALS = "principals"  # Matrix rule 5: every audience entry, exactly
    GROUPS = "groups"  # OAuth rule 4: one exact partner group


_FUNCTIONS: Final = """
CREATE SCHEMA IF NOT EXISTS fgentic_retrieval;

-- Exact typed principals only: `e = jsonb_build_object(...)` is jsonb equality, so the element
-- must have exactly these members; the jsonb_typeof checks reject null/number principals.
-- `->` on a non-object returns NULL rather than raising, and jsonb_array_elements is fed '[]'
-- for anything but an array, so no row value can make the query (or the INSERT) fail.
CREATE OR REPLACE FUNCTION fgentic_retrieval.principal_keys(acl jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ARRAY(
    SELECT DISTINCT k.key FROM (
        SELECT CASE
            WHEN e = jsonb_build_object('kind', 'matrix', 'principal', e -> 'principal')
                 AND jsonb_typeof(e -> 'principal') = 'string'
            THEN 'matrix' || ' ' || ' ' || (e ->> 'principal')
            WHEN e = jsonb_build_object('kind', 'bridged_matrix', 'network', e -> 'network',
                                        'principal', e -> 'principal')
                 AND jsonb_typeof(e -> 'network') = 'string'
                 AND jsonb_typeof(e -> 'principal') = 'string'
            THEN 'bridged_matrix' || ' ' || (e ->> 'network') || ' ' || (e ->> 'principal')
        END AS key
        FROM jsonb_array_elements(
            CASE WHEN jsonb_typeof(acl) = 'array' THEN acl ELSE '[]'::jsonb END) AS e
    ) AS k
    WHERE k.key IS NOT NULL
    ORDER BY k.key);

-- String elements only: a number, object, array or null element names no group.
CREATE OR REPLACE FUNCTION fgentic_retrieval.group_names(acl jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ARRAY(
    SELECT DISTINCT g #>> '{}'
    FROM jsonb_array_elements(
        CASE WHEN jsonb_typeof(acl) = 'array' THEN acl ELSE '[]'::jsonb END) AS g
    WHERE jsonb_typeof(g) = 'string'
    ORDER BY 1);

CREATE OR REPLACE FUNCTION fgentic_retrieval.classification(metadata jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN jsonb_typeof(metadata -> 'classification') = 'string'
            THEN metadata ->> 'classification' END;
"""

# STORED, not PG 18's default VIRTUAL: virtual generated columns cannot be indexed.
# embedding is STORAGE PLAIN: a 768-dim vector is 3,080 bytes, over the 2 kB TOAST threshold,
# so by default every vector lives out of line and a filtered query that ranks the rows of a
# bitmap scan pays a TOAST index lookup and two chunk reads per row. Inline, the 1 % search
# drops from ~2.1x to ~0.9x of the unfiltered query (100k rows, see docs/prefilter.md). It
# always fits: content and metadata stay EXTENDED and are moved out of line first.
_TABLE: Final = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    content text NOT NULL,
    source text NOT NULL DEFAULT '',
    embedding vector(%(dimensions)d) STORAGE PLAIN NOT NULL,
    metadata jsonb,
    acl_classification text
        GENERATED ALWAYS AS (fgentic_retrieval.classification(metadata)) STORED,
    acl_principals text[] GENERATED ALWAYS AS
        (fgentic_retrieval.principal_keys(metadata -> 'allowed_principals')) STORED,
    acl_groups text[] GENERATED ALWAYS AS
        (fgentic_retrieval.group_names(metadata -> 'allowed_groups')) STORED
);
ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS source text NOT NULL DEFAULT '';
"""

# HNSW (cosine, pgvector defaults) ranks; the GIN indexes let the planner serve a selective
# ACL predicate as a bitmap scan plus an exact sort instead of walking the graph for it.
INDEXES: Final = (f"{TABLE}_embedding_hnsw", f"{TABLE}_acl_principals_gin",
                  f"{TABLE}_acl_groups_gin")
_INDEXES: Final = f"""
CREATE INDEX IF NOT EXISTS {INDEXES[0]} ON {TABLE}
    USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS {INDEXES[1]} ON {TABLE} USING gin (acl_principals);
CREATE INDEX IF NOT EXISTS {INDEXES[2]} ON {TABLE} USING gin (acl_groups);
"""


# -- the clauses and the ranked statement ---------------------------------------------------------

_CLAUSES: Final = {
    # text[] containment: every key in the bound array is an element of the row's keys.
    Rule.PRINCIPALS: "({t}.acl_classification = ANY({c}::text[])"
                     " AND {t}.acl_principals @> {a}::text[])",
    # text[] overlap: some bound group equals some row group, as whole strings.
    Rule.GROUPS: "({t}.acl_classification = ANY({c}::text[]) AND {t}.acl_groups && {a}::text[])",
}


def clause(rule: Rule, *, first: int = 1) -> str:
    """The WHERE clause of ``rule``: ``$first`` = allowed classifications, ``$first+1`` = keys
    (PRINCIPALS) or groups (GROUPS), both ``text[]``. Only placeholders vary; values are bound."""
    return _CLAUSES[rule].format(t=TABLE, c=f"${first}", a=f"${first + 1}")


def search_sql(where: str) -> str:
    """The ranked statement: ``$1`` query ``real[]``, ``$2`` k, then ``where``'s parameters.

    MATERIALIZED keeps the LIMIT inside, next to the index scan; the outer ORDER BY then fixes
    relaxed_order's slightly out-of-order output. It sorts by ``distance + 0``, an expression,
    because PostgreSQL 17+ knows the CTE's rows come "ordered by distance" and would drop a
    sort on the column itself (pgvector documents this; the plan then ends in the HNSW scan's
    relaxed order). Columns are qualified because the search
    function's OUT parameters are named like them. ``where`` must come from :func:`clause`
    (constants only; every value is bound), hence the S608 waiver.
    """
    return (
        f"WITH ranked AS MATERIALIZED (SELECT {TABLE}.id, {TABLE}.content,"  # noqa: S608
        f" {TABLE}.source,"
        f" {TABLE}.embedding <=> $1::real[]::vector AS distance FROM {TABLE}"
        f" WHERE {where} ORDER BY distance LIMIT $2)"
        " SELECT ranked.id, ranked.content, ranked.source, ranked.distance FROM ranked"
        " ORDER BY ranked.distance + 0"
    )


# Applied by the search functions' SET clauses: they hold for the call only (also inside a
# caller's transaction) and cost no extra round trip.
# * relaxed_order iterative scans keep walking the HNSW graph until LIMIT rows pass the
#   predicate (pgvector 0.8); search_sql's outer ORDER BY restores exact distance order.
#   Measured on 100k rows at 10 % selectivity: strict_order ~440 ms (it discards candidates
#   that arrive late but closer), relaxed_order ~19 ms; with iterative scans off, 1 row of 10.
# * max_scan_tuples / scan_mem_multiplier bound that walk. pgvector's defaults (20,000 tuples,
#   1 x work_mem, about 20k tuples at 4 MB) would leave a predicate matching < 0.05 % of 100k
#   rows short of k whenever the planner picks the graph. About 200 bytes per visited tuple:
#   10 x work_mem lets one walk visit a 200k-row corpus completely (a full walk of 100k rows
#   took 0.7-1.6 s here), so "k rows whenever k are visible" holds on that path up to 200k
#   rows. Selective predicates normally never get there: the GIN indexes give the planner a
#   bitmap scan plus an exact sort, which is complete by construction.
# * force_custom_plan: the function's statement is cached per session, and a generic plan
#   (after five calls) would cost every projection with one default selectivity, so a 1 %
#   group and a 50 % group would share a plan. A custom plan sees this call's keys and the
#   column statistics.
SEARCH_SETTINGS: Final = (
    ("hnsw.iterative_scan", "relaxed_order"),
    ("hnsw.max_scan_tuples", "200000"),
    ("hnsw.scan_mem_multiplier", "10"),
    ("plan_cache_mode", "force_custom_plan"),
)


def set_local_search_settings() -> str:
    """The same settings as SET LOCAL statements (EXPLAIN and diagnostics in a transaction)."""
    return "; ".join(f"SET LOCAL {name} = '{value}'" for name, value in SEARCH_SETTINGS)


def count_sql(where: str) -> str:
    return f"SELECT count(*) FROM {TABLE} WHERE {where}"  # noqa: S608 (constants only)


_SIGNATURES: Final = {
    "search": ("(query real[], k integer, classifications text[], acl text[])",
               "TABLE (id bigint, content text, source text, distance double precision)"),
    "count": ("(classifications text[], acl text[])", "bigint"),
}


@cache
def _function_source(purpose: str, rule: Rule) -> str:
    arguments, returns = _SIGNATURES[purpose]
    if purpose == "search":
        body = search_sql(clause(rule, first=3))
        settings = " ".join(f"SET {name} = '{value}'" for name, value in SEARCH_SETTINGS)
    else:  # no ranking, but the same reason to plan each call for its own selectivity
        body = count_sql(clause(rule, first=1))
        settings = "SET plan_cache_mode = 'force_custom_plan'"
    # BEGIN ATOMIC: the body is parsed and bound at creation, so no caller search_path can
    # redirect `chunks` or an operator. SECURITY INVOKER (the default): the caller's own
    # privileges (and any row-level security) still apply.
    return (f"{arguments} RETURNS {returns} LANGUAGE sql STABLE {settings}"
            f" BEGIN ATOMIC {body}; END")


@cache
def _function_name(purpose: str, rule: Rule) -> str:
    # Named after a digest of its source: a database whose function predates the current
    # clause or settings has no function of this name, so the call fails (UndefinedFunction)
    # instead of running stale SQL. create_chunks_table installs the current ones.
    digest = hashlib.sha256(_function_source(purpose, rule).encode()).hexdigest()[:12]
    return f"{FUNCTION_SCHEMA}.{purpose}_{rule.value}_{digest}"


def search_function(rule: Rule) -> str:
    """``(query real[], k, classifications text[], acl text[])`` -> (id, content, source,
    distance)."""
    return _function_name("search", rule)


def count_function(rule: Rule) -> str:
    """``(classifications text[], acl text[])`` -> bigint."""
    return _function_name("count", rule)


def _functions_ddl() -> str:
    return "".join(
        f"CREATE OR REPLACE FUNCTION {_function_name(purpose, rule)}"
        f" {_function_source(purpose, rule)};\n"
        for purpose in _SIGNATURES for rule in Rule)


# -- installation ----------------------------------------------------------------------------------


def check_dimensions(dimensions: int) -> int:
    if isinstance(dimensions, bool) or dimensions not in DIMENSIONS:
        raise ValueError(f"a corpus has {' or '.join(map(str, DIMENSIONS))} dimensions")
    return dimensions


def ddl(*, indexes: bool = True, dimensions: int = EMBEDDING_DIMENSIONS) -> str:
    """The complete DDL (idempotent); ``indexes=False`` for a bulk load before indexing."""
    table = _TABLE % {"dimensions": check_dimensions(dimensions)}
    return _FUNCTIONS + table + _functions_ddl() + (_INDEXES if indexes else "")


def index_ddl() -> str:
    return _INDEXES


async def create_chunks_table(conn: asyncpg.Connection, *, indexes: bool = True,
                              dimensions: int = EMBEDDING_DIMENSIONS) -> None:
    """Create the key functions, the chunks table, the search/count functions and (unless
    ``indexes=False``) the indexes. Idempotent; re-run it after an upgrade. A table that
    exists keeps its dimension; asking for another is a ValueError (nothing changes).

    Needs the ``vector`` extension. Build indexes after a bulk load with
    :func:`create_chunk_indexes`; ANALYZE afterwards so the planner knows the ACL selectivity.
    """
    async with conn.transaction():
        existing = await table_dimensions(conn)
        if existing is not None and existing != dimensions:
            raise ValueError(f"the corpus has {existing} dimensions, not {dimensions}")
        await conn.execute(ddl(indexes=indexes, dimensions=dimensions))


async def table_dimensions(conn: asyncpg.Connection) -> int | None:
    """The corpus's dimension (pgvector keeps it as the column's type modifier), or None when
    there is no corpus table."""
    value = await conn.fetchval(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass($1)"
        " AND attname = 'embedding' AND NOT attisdropped", TABLE)
    return None if value is None else int(value)


async def create_chunk_indexes(conn: asyncpg.Connection) -> None:
    await conn.execute(_INDEXES)


async def drop_chunk_indexes(conn: asyncpg.Connection) -> None:
    """Before a bulk load into an empty corpus: building the indexes after is faster."""
    await conn.execute("DROP INDEX IF EXISTS " + ", ".join(INDEXES))


_NUMBER_TYPES: Final = frozenset({int, float})  # exact types: neither bool nor a subclass
FLOAT4_MIN: Final = 1.1754943508222875e-38
"""The smallest normal ``real`` (float4): pgvector's component type."""
FLOAT4_MAX: Final = 3.4028234663852886e38
"""The largest finite ``real``."""


def is_vector(value: object, dimensions: int) -> bool:
    """Whether ``value`` (decoded JSON) is a list of exactly ``dimensions`` numbers (no
    booleans) that pgvector stores and cosine distance ranks: what an embedding must be before
    it is used or stored.

    pgvector keeps each component as a float4 and sums the squares in float4. A component
    beyond float4 (``1e39``) fails the statement; a squared length of zero (an all-zero
    vector, or components so small that float4 flushes their squares) or past float4 makes
    every cosine distance NaN. So the squared length of the float4 components must lie in
    float4's normal range, with room for float4's rounding as it adds. Every unit or ordinary
    embedding is far inside it.
    """
    # set/array/hypot loop in C (~35 us for 768): a Python-level check per component cost
    # ~0.3 ms per query.
    if not (isinstance(value, list) and len(value) == dimensions
            and set(map(type, value)) <= _NUMBER_TYPES):
        return False
    try:
        stored = array("f", value)  # the C cast to float: what float4 keeps (inf past it)
    except OverflowError:  # an integer beyond any double
        return False
    squared = math.hypot(*stored) ** 2  # NaN and inf fail both comparisons
    return FLOAT4_MIN <= squared <= FLOAT4_MAX / 2


def vector_text(embedding: Sequence[float], dimensions: int = EMBEDDING_DIMENSIONS) -> str:
    """pgvector's text form of an embedding (for writes); refuses a wrong dimension or NaN."""
    if len(embedding) != dimensions:
        raise ValueError(f"embedding must have {dimensions} dimensions")
    parts = []
    for value in embedding:
        number = float(value)
        if not math.isfinite(number):
            raise ValueError("embedding components must be finite")
        parts.append(repr(number))
    return "[" + ",".join(parts) + "]"


__all__ = [
    "DIMENSIONS",
    "EMBEDDING_DIMENSIONS",
    "FUNCTION_SCHEMA",
    "INDEXES",
    "SEARCH_SETTINGS",
    "TABLE",
    "Rule",
    "check_dimensions",
    "clause",
    "count_function",
    "count_sql",
    "create_chunk_indexes",
    "create_chunks_table",
    "ddl",
    "drop_chunk_indexes",
    "index_ddl",
    "is_vector",
    "search_function",
    "search_sql",
    "set_local_search_settings",
    "table_dimensions",
    "vector_text",
]
