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
here too, next to the columns they read, and installed as one search function per rule (see
:func:`search_function`) whose SET clauses carry pgvector's iterative-scan settings. It plans
each call from a census of the ACL keys (:func:`refresh_buckets`): exact ranking of the
GIN-found rows below a threshold, a partial HNSW index per large key above it.
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


def search_sql(where: str, *, path: str = "") -> str:
    """The ranked statement: ``$1`` query ``real[]``, ``$2`` k, then ``where``'s parameters.

    MATERIALIZED keeps the LIMIT inside, next to the index scan; the outer ORDER BY then fixes
    relaxed_order's slightly out-of-order output. It sorts by ``distance + 0``, an expression,
    because PostgreSQL 17+ knows the CTE's rows come "ordered by distance" and would drop a
    sort on the column itself (pgvector documents this; the plan then ends in the HNSW scan's
    relaxed order). Columns are qualified because the search
    function's OUT parameters are named like them. ``where`` must come from :func:`clause`
    (constants only; every value is bound), hence the S608 waiver. ``path``, when given, is
    one more output column (SQL text: the search function's ``format`` placeholder).
    """
    extra = f", {path}" if path else ""
    return (
        f"WITH ranked AS MATERIALIZED (SELECT {TABLE}.id, {TABLE}.content,"  # noqa: S608
        f" {TABLE}.source,"
        f" {TABLE}.embedding <=> $1::real[]::vector AS distance FROM {TABLE}"
        f" WHERE {where} ORDER BY distance LIMIT $2)"
        f" SELECT ranked.id, ranked.content, ranked.source, ranked.distance{extra} FROM ranked"
        " ORDER BY ranked.distance + 0"
    )


EF_SEARCH_DEFAULT: Final = 40
"""pgvector's ``hnsw.ef_search``: the least a walk keeps (and the value of every path but
the bucket's)."""
EF_SEARCH_MAX: Final = 1000
"""pgvector's upper bound for ``hnsw.ef_search``."""
BUCKET_ROWS_PER_EF: Final = 500
"""A bucket's graph walks one more candidate per this many rows (:func:`bucket_ef_search`)."""


def bucket_ef_search(rows: int) -> int:
    """The ``hnsw.ef_search`` of a walk over a bucket's graph of ``rows`` rows.

    Recall at a fixed ``ef_search`` falls as the graph grows (at pgvector's 40 on the
    clustered benchmark: ~1.0 at 10k rows, 0.84 at 100k, 0.67 at 500k; docs/prefilter.md),
    so the candidates kept grow with the rows, between pgvector's default and its bound.
    Monotone, so a larger bucket never walks with fewer.
    """
    return max(EF_SEARCH_DEFAULT, min(EF_SEARCH_MAX, math.ceil(rows / BUCKET_ROWS_PER_EF)))


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
# * ef_search: pgvector's default on the exact, graph and planner paths. In the SET clause so
#   that the bucket path's own value (its bucket's, from the census: bucket_ef_search) ends
#   with the call instead of lasting to the end of the caller's transaction.
SEARCH_SETTINGS: Final = (
    ("hnsw.iterative_scan", "relaxed_order"),
    ("hnsw.max_scan_tuples", "200000"),
    ("hnsw.scan_mem_multiplier", "10"),
    ("plan_cache_mode", "force_custom_plan"),
    ("hnsw.ef_search", str(EF_SEARCH_DEFAULT)),
)


def set_local_search_settings() -> str:
    """The same settings as SET LOCAL statements (EXPLAIN and diagnostics in a transaction)."""
    return "; ".join(f"SET LOCAL {name} = '{value}'" for name, value in SEARCH_SETTINGS)


def count_sql(where: str) -> str:
    return f"SELECT count(*) FROM {TABLE} WHERE {where}"  # noqa: S608 (constants only)


# -- the per-query plan: which access path a call takes ------------------------------------------
#
# The planner's choice between the GIN bitmap + exact sort and the HNSW walk rests on its
# selectivity estimate, and the walk itself is the slow path at 1-10 %: it visits ~10x the
# candidates of an unfiltered query to pass k. So the search function plans each call itself,
# from a census of the ACL keys (``refresh_buckets``, after every load, like ANALYZE):
#
# * EXACT: the visible count is bounded by EXACT_MAX_ROWS (a Matrix audience key, or every
#   OAuth group, holds at most that many rows): the GIN bitmap enumerates the candidates and
#   every one is ranked exactly; no graph walk, recall 1.0, complete by construction.
# * BUCKET: a key that every visible row carries (any Matrix audience key; the one OAuth group)
#   has its own partial HNSW index: the walk runs over that bucket's graph, where nearly every
#   candidate passes, instead of the whole corpus's, keeping more candidates the larger the
#   bucket (its ``hnsw.ef_search``, from the census: ``bucket_ef_search``).
# * GRAPH: otherwise the whole HNSW graph with the filter and iterative scans (as before).
# * PLANNER: no census yet (a corpus from before it, or one never refreshed): the planner's
#   choice, as before.
# The census only decides speed: every path applies the same clause inside the same statement
# and fills k; a stale census can make a call slower, never wrong.


class Path(StrEnum):
    """The access path a search call took (the search function's ``path`` column)."""

    EXACT = "exact"
    BUCKET = "bucket"
    GRAPH = "graph"
    PLANNER = "planner"


EXACT_MAX_ROWS: Final = 500
"""A key holding at most this many rows is ranked exactly (enumerated through GIN)."""
BUCKET_MAX_SHARE: Final = 0.6
"""A key on more than this share of the rows gets no partial index: its graph would be
nearly the whole corpus's, which the GRAPH path already walks."""
BUCKET_MAX_INDEXES: Final = 32
"""At most this many partial HNSW indexes (the smallest buckets above EXACT_MAX_ROWS first:
the walk over the whole graph costs them the most)."""
BUCKET_INDEX_PREFIX: Final = f"{TABLE}_bucket_"
# One single-key clause per rule, used both as the partial index's predicate and, in the same
# text, as the extra conjunct that lets the planner prove the call may use that index. It is
# implied by the rule's clause for every key the call binds (Matrix: each audience key must be
# on the row; OAuth: only when the call binds exactly that one group), so adding it changes
# no result.
_BUCKET_CLAUSES: Final = {
    Rule.PRINCIPALS: "{t}acl_principals @> ARRAY[%L]::text[]",
    Rule.GROUPS: "{t}acl_groups && ARRAY[%L]::text[]",
}

_PLAN: Final = """
CREATE TABLE IF NOT EXISTS fgentic_retrieval.acl_buckets (
    rule text NOT NULL,
    key text NOT NULL,
    rows bigint NOT NULL,
    index_name text,
    PRIMARY KEY (rule, key)
);
-- The walk's hnsw.ef_search over the key's partial index (NULL: no index, or a census from
-- before the column: pgvector's default).
ALTER TABLE fgentic_retrieval.acl_buckets ADD COLUMN IF NOT EXISTS ef_search integer
    CHECK (ef_search BETWEEN 1 AND 1000);
CREATE TABLE IF NOT EXISTS fgentic_retrieval.acl_census (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    exact_max_rows bigint NOT NULL,
    total_rows bigint NOT NULL
);

-- Every key with more than exact_max_rows rows is in acl_buckets (index_name NULL when it has
-- no partial index); a key that is not holds at most that many. SECURITY DEFINER so the
-- retrieval server still needs only SELECT on chunks and EXECUTE here. A plan from before
-- ef_search has other OUT parameters, which CREATE OR REPLACE cannot change: dropped first.
DO $drop$ BEGIN
    IF EXISTS (SELECT FROM pg_proc
               WHERE oid = to_regprocedure('fgentic_retrieval.search_plan(text, text[])')
                 AND NOT 'ef_search' = ANY(proargnames)) THEN
        DROP FUNCTION fgentic_retrieval.search_plan(text, text[]);
    END IF;
END $drop$;
CREATE OR REPLACE FUNCTION fgentic_retrieval.search_plan(rule text, acl text[],
                                                         OUT path text, OUT bucket text,
                                                         OUT ef_search integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    SELECT CASE
               WHEN NOT EXISTS (SELECT FROM fgentic_retrieval.acl_census) THEN 'planner'
               WHEN s.keys = 0 THEN 'planner'
               -- the visible rows carry every audience key: one small key bounds them
               WHEN search_plan.rule = 'principals' AND s.small > 0 THEN 'exact'
               -- the visible rows carry one of the groups: all of them must be small
               WHEN search_plan.rule = 'groups' AND s.small = s.keys THEN 'exact'
               WHEN s.indexed IS NOT NULL
                    AND (search_plan.rule = 'principals' OR s.keys = 1) THEN 'bucket'
               ELSE 'graph'
           END,
           CASE WHEN search_plan.rule = 'principals' OR s.keys = 1 THEN s.indexed END,
           CASE WHEN search_plan.rule = 'principals' OR s.keys = 1 THEN s.indexed_ef END
    FROM (SELECT count(*) AS keys, count(*) FILTER (WHERE b.rows IS NULL) AS small,
                 (array_agg(k.key ORDER BY b.rows, k.key)
                     FILTER (WHERE b.index_name IS NOT NULL))[1] AS indexed,
                 (array_agg(b.ef_search ORDER BY b.rows, k.key)
                     FILTER (WHERE b.index_name IS NOT NULL))[1] AS indexed_ef
          FROM (SELECT DISTINCT u.key FROM unnest(search_plan.acl) AS u(key)) AS k
          LEFT JOIN fgentic_retrieval.acl_buckets AS b
              ON b.rule = search_plan.rule AND b.key = k.key) AS s;
END;
"""

_SIGNATURES: Final = {
    "search": ("(query real[], k integer, classifications text[], acl text[])",
               "TABLE (id bigint, content text, source text, distance double precision,"
               " path text)"),
    "count": ("(classifications text[], acl text[])", "bigint"),
}

# Per path, the planner settings the search function sets for its one statement (restored
# when the call returns: each is also in the function's SET clause).
_PATH_SETTINGS: Final = {
    Path.EXACT: ("enable_indexscan", "enable_seqscan"),
    Path.BUCKET: ("enable_bitmapscan", "enable_seqscan"),
    Path.GRAPH: ("enable_bitmapscan", "enable_seqscan"),
}
_PLANNER_SETTINGS: Final = (("enable_bitmapscan", "on"), ("enable_indexscan", "on"),
                            ("enable_seqscan", "on"))


def _search_body(rule: Rule) -> str:
    """plpgsql: plan the call (``search_plan``), then run the one ranked statement with the
    bucket conjunct, the path's planner settings and, on the bucket path, its bucket's
    ``hnsw.ef_search``. Every value is bound (USING); the only text formatted in is the bucket
    key, as a quoted literal (``%L``), so it can match the partial index's predicate."""
    statement = search_sql(clause(rule, first=3) + "%s", path="%L::text")
    bucket = _BUCKET_CLAUSES[rule].format(t=f"{TABLE}.")
    branches = " ".join(
        f"{'IF' if i == 0 else 'ELSIF'} chosen = '{path.value}' THEN PERFORM "
        + ", ".join(f"set_config('{name}', 'off', true)" for name in names) + ";"
        for i, (path, names) in enumerate(_PATH_SETTINGS.items()))
    return (  # constants only (noqa: S608 below)
        " DECLARE chosen text; bucket text; ef integer;"  # noqa: S608
        " BEGIN"
        f" SELECT p.path, p.bucket, p.ef_search INTO chosen, bucket, ef"
        f" FROM {FUNCTION_SCHEMA}.search_plan('{rule.value}', acl) AS p;"
        f" {branches} END IF;"
        " IF chosen = 'bucket' AND ef IS NOT NULL THEN"
        " PERFORM set_config('hnsw.ef_search', ef::text, true); END IF;"
        f" RETURN QUERY EXECUTE format($q${statement}$q$,"
        f" CASE WHEN chosen = 'bucket' THEN format($q$ AND {bucket}$q$, bucket) ELSE '' END,"
        " chosen) USING query, k, classifications, acl;"
        " END"
    )


@cache
def _function_source(purpose: str, rule: Rule) -> str:
    arguments, returns = _SIGNATURES[purpose]
    if purpose == "search":
        # plpgsql, because the call chooses its statement. Its names resolve at run time, so
        # the search_path is the one create_chunks_table pins while installing (FROM CURRENT:
        # the schemas that held chunks and vector then), never the caller's.
        settings = " ".join(f"SET {name} = '{value}'"
                            for name, value in (*SEARCH_SETTINGS, *_PLANNER_SETTINGS))
        return (f"{arguments} RETURNS {returns} LANGUAGE plpgsql STABLE"
                f" SET search_path FROM CURRENT {settings}"
                f" AS $fn${_search_body(rule)}$fn$")
    # no ranking, but the same reason to plan each call for its own selectivity
    body = count_sql(clause(rule, first=1))
    # BEGIN ATOMIC: the body is parsed and bound at creation, so no caller search_path can
    # redirect `chunks` or an operator. SECURITY INVOKER (the default): the caller's own
    # privileges (and any row-level security) still apply.
    return (f"{arguments} RETURNS {returns} LANGUAGE sql STABLE"
            f" SET plan_cache_mode = 'force_custom_plan' BEGIN ATOMIC {body}; END")


@cache
def _function_name(purpose: str, rule: Rule) -> str:
    # Named after a digest of its source: a database whose function predates the current
    # clause or settings has no function of this name, so the call fails (UndefinedFunction)
    # instead of running stale SQL. create_chunks_table installs the current ones.
    digest = hashlib.sha256(_function_source(purpose, rule).encode()).hexdigest()[:12]
    return f"{FUNCTION_SCHEMA}.{purpose}_{rule.value}_{digest}"


def search_function(rule: Rule) -> str:
    """``(query real[], k, classifications text[], acl text[])`` -> (id, content, source,
    distance, path)."""
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
    return _FUNCTIONS + table + _PLAN + _functions_ddl() + (_INDEXES if indexes else "")


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
        # The plpgsql search functions keep this search_path (SET ... FROM CURRENT): the
        # schemas that exist on it now, "$user" resolved, for this transaction only.
        await conn.execute("SELECT set_config('search_path', string_agg(quote_ident(s), ', '),"
                           " true) FROM unnest(current_schemas(false)) AS s")
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


# -- the ACL key census (the search function's plan) ------------------------------------------

_CENSUS: Final = f"""
SELECT 'groups' AS rule, g AS key, count(*) AS rows
FROM {TABLE}, unnest(acl_groups) AS g GROUP BY g HAVING count(*) > $1
UNION ALL
SELECT 'principals', p, count(*)
FROM {TABLE}, unnest(acl_principals) AS p GROUP BY p HAVING count(*) > $1
"""  # noqa: S608 (constants only)


def bucket_index_name(rule: Rule, key: str) -> str:
    """The partial HNSW index of one key: named after a digest of (rule, key), so the name
    always stands for the same predicate."""
    digest = hashlib.sha256(f"{rule.value}\0{key}".encode()).hexdigest()[:12]
    return f"{BUCKET_INDEX_PREFIX}{rule.value}_{digest}"


def bucket_clause(rule: Rule) -> str:
    """The predicate of ``rule``'s partial indexes as a ``format()`` template (``%L``: the
    key), unqualified: the text each is built with, so a query repeating it may use it."""
    return _BUCKET_CLAUSES[rule].format(t="")


async def refresh_buckets(conn: asyncpg.Connection, *, exact_max_rows: int = EXACT_MAX_ROWS,
                          max_share: float = BUCKET_MAX_SHARE,
                          max_indexes: int = BUCKET_MAX_INDEXES) -> dict[str, int]:
    """Count the rows of every ACL key, give the large ones a partial HNSW index each and
    record the census the search function plans from. Run it after a load (as ANALYZE);
    idempotent, and an index that already exists is kept. Returns content-free counts.

    Until a corpus has a census the search function leaves the choice to the planner.
    Building the partial indexes takes about as long, in all, as HNSW over the rows they
    hold (they are built without the census lock: searches keep running meanwhile).
    """
    total = int(await conn.fetchval(f"SELECT count(*) FROM {TABLE}"))  # noqa: S608
    large = [(Rule(r["rule"]), r["key"], int(r["rows"]))
             for r in await conn.fetch(_CENSUS, exact_max_rows)]
    indexed = sorted((rows, rule, key) for rule, key, rows in large
                     if rows <= max_share * total)[:max_indexes]
    names = {(rule, key): bucket_index_name(rule, key) for _, rule, key in indexed}
    existing = await _bucket_indexes(conn)
    for stale in sorted(existing - set(names.values())):
        await _drop_index(conn, stale)
    for (rule, key), name in names.items():
        if name not in existing:
            await conn.execute(await conn.fetchval(
                f"SELECT format('CREATE INDEX IF NOT EXISTS %I ON {TABLE}"
                f" USING hnsw (embedding vector_cosine_ops) WHERE "
                f"{bucket_clause(rule)}', $1::text, $2::text)", name, key))
    async with conn.transaction():
        await conn.execute("DELETE FROM fgentic_retrieval.acl_buckets")
        await conn.executemany(
            "INSERT INTO fgentic_retrieval.acl_buckets (rule, key, rows, index_name, ef_search)"
            " VALUES ($1, $2, $3, $4, $5)",
            [(rule.value, key, rows, names.get((rule, key)),
              bucket_ef_search(rows) if (rule, key) in names else None)
             for rule, key, rows in large])
        await conn.execute(
            "INSERT INTO fgentic_retrieval.acl_census (exact_max_rows, total_rows)"
            " VALUES ($1, $2) ON CONFLICT (one) DO UPDATE SET exact_max_rows ="
            " excluded.exact_max_rows, total_rows = excluded.total_rows",
            exact_max_rows, total)
    if names:
        await conn.execute(f"ANALYZE {TABLE}")  # the partial indexes' own statistics
    return {"rows": total, "large_keys": len(large), "bucket_indexes": len(names)}


async def drop_chunk_indexes(conn: asyncpg.Connection) -> None:
    """Before a bulk load into an empty corpus: building the indexes after is faster."""
    await conn.execute("DROP INDEX IF EXISTS " + ", ".join(INDEXES))
    for name in sorted(await _bucket_indexes(conn)):
        await _drop_index(conn, name)


async def _bucket_indexes(conn: asyncpg.Connection) -> set[str]:
    return {r["indexname"] for r in await conn.fetch(
        "SELECT indexname FROM pg_indexes WHERE tablename = $1 AND starts_with(indexname, $2)",
        TABLE, BUCKET_INDEX_PREFIX)}


async def _drop_index(conn: asyncpg.Connection, name: str) -> None:
    await conn.execute(await conn.fetchval("SELECT format('DROP INDEX IF EXISTS %I', $1::text)",
                                           name))


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
    "BUCKET_INDEX_PREFIX",
    "BUCKET_MAX_INDEXES",
    "BUCKET_MAX_SHARE",
    "BUCKET_ROWS_PER_EF",
    "DIMENSIONS",
    "EF_SEARCH_DEFAULT",
    "EF_SEARCH_MAX",
    "EMBEDDING_DIMENSIONS",
    "EXACT_MAX_ROWS",
    "FUNCTION_SCHEMA",
    "INDEXES",
    "SEARCH_SETTINGS",
    "TABLE",
    "Path",
    "Rule",
    "bucket_ef_search",
    "bucket_index_name",
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
    "refresh_buckets",
    "search_function",
    "search_sql",
    "set_local_search_settings",
    "table_dimensions",
    "vector_text",
]
