"""Prefilter: a filtered top-10 ANN query versus the same query without the ACL predicate.

    .venv/bin/python -m benchmarks.bench_prefilter [--rows 100000] [--queries 30]
        [--corpus clustered|uniform] [--no-recall] [--shared-buffers 2GB]
        [--dsn postgresql://...] [--maintenance-work-mem 1GB] [--keep]

Starts its own PostgreSQL 18 + pgvector with ``shared_buffers`` large enough for the whole
corpus (or uses ``--dsn``; a database that already holds the same ``--rows`` corpus is reused,
which skips the load and the HNSW build). Prints figures; never asserts timings.

Corpus: ``--rows`` chunks in the ``retrieval/search/corpus.py`` table, seeded 768-dimensional
vectors (``--corpus clustered``, the default: a Gaussian mixture of 100 topics, as real
embeddings cluster; ``uniform``: every coordinate uniform in [-1, 1), HNSW's worst case; see
``Space``), loaded with binary COPY, then HNSW (cosine, pgvector defaults)
+ the GIN indexes + VACUUM (ANALYZE) + the ACL key census with its partial HNSW indexes
(``corpus.refresh_buckets``, as ``corpus load`` runs it), then prewarmed (heap, vectors, one
walk of the whole graph and one of each bucket's graph),
so the figures compare work, not this VM's disk. Each row draws u ~ U(0, 1) and is admitted
for tier t (1 %, 10 %, 50 %) when u < t / 0.9, so about t of all rows are visible once the
10 % of rows with an inadmissible classification (restricted, secret, regulated, missing,
null, a number, a list, "Public") are removed. Near misses just above each tier carry hostile
ACL entries: a partial audience, a superset object (an extra member or a network on a native
principal), a wrong kind or network, a prefix/suffixed/upper-case group, another partner's
group, principals without any group (OAuth); 2 % of rows have a wrong JSON type (NULL or
JSON-null metadata, a list, a string, an object keyed by the group, a group string instead of
an array, a list as classification).

Figures, over ``--queries`` query vectors drawn like the corpus (median; the order of the
variants rotates every round, and a first round warms up): the plain unfiltered ``ORDER BY
embedding <=> q LIMIT 10`` (the baseline) and ``prefilter.search`` at each tier for a Matrix
projection (two-entry audience: one bridged, one native reader) and an OAuth projection (one
partner group). Per variant: rows visible (reference oracle), ``count()`` versus the oracle, the
path the search function reports it took (exact, bucket, graph or planner; EXPLAIN of the plain
query's scan node for the baseline), the index scans per call of the real
search path (pg_stat_user_indexes over eight calls), min/max rows returned, rows leaked (every
returned id re-checked with ``acl_reference.admits`` against the generated metadata; must be 0)
and recall@10 against an exact (index-free) run of the same predicate. Then one line of the
ratios to the unfiltered query per tier and one of recall@10 per variant.

``--rows`` sets the size (1,000,000 for issue 40's run by hand: docs/performance.md gives the
command; CI runs it at 3,000 rows, tests/integration/test_benchmarks_run.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

import asyncpg

from benchmarks.common import (
    Mixture,
    Stats,
    Table,
    banner,
    command_line,
    machine,
    scratch_dir,
)
from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance.contract import (
    VerifiedIdentity,
    decode_verified_identity,
    encode_identity,
    load_identity,
)
from fgentic_governance.retrieval.search import corpus, prefilter
from fgentic_governance.retrieval.search.acl_reference import admits

DIM: Final = corpus.EMBEDDING_DIMENSIONS
K: Final = 10
TIERS: Final = (0.01, 0.10, 0.50)
RECALL_TARGET: Final = 0.95
VALID_RATE: Final = 0.9  # share of rows whose classification is admissible
NEAR_BAND: Final = 0.02  # near-miss rows just above each tier threshold
TYPE_HOSTILE_RATE: Final = 0.02
BATCH: Final = 5000
SERVER: Final = "org-a.example"
_MISSING: Final = object()
_BAD_CLASSES: Final = ("restricted", "secret", "regulated", _MISSING, None, 1, ["public"],
                       "Public")


def _pct(tier: float) -> int:
    return round(tier * 100)


def alice(tier: float) -> dict[str, str]:
    return {"kind": "matrix", "principal": f"@alice-{_pct(tier)}:{SERVER}"}


def bob(tier: float) -> dict[str, str]:
    return {"kind": "bridged_matrix", "network": "slack",
            "principal": f"@slack-bob-{_pct(tier)}:{SERVER}"}


def group(tier: float) -> str:
    # docs-1 is a string prefix of docs-10: the tiers themselves are prefix near-misses.
    return f"partner/org-b/docs-{_pct(tier)}"


def _near_miss(rng: random.Random, tier: float, principals: list[Any],
               groups: list[Any]) -> None:
    a, b, g = alice(tier), bob(tier), group(tier)
    principals.extend(rng.choice([
        [a],                                                  # partial audience
        [a, {**b, "extra": "x"}],                             # superset object
        [a, {"kind": "matrix", "principal": b["principal"]}],  # wrong kind
        [{**a, "network": "slack"}, b],                        # native entry with a network
        [a, {"kind": "bridged_matrix", "network": "irc", "principal": b["principal"]}],
    ]))
    groups.append(rng.choice([g + "x", "partner/org-b/docs", g.replace("org-b", "org-c"),
                              g.upper()]))
    # otherwise: principals but no group, which must never admit an OAuth row


def _type_hostile(rng: random.Random, tier: float) -> Any:
    return rng.choice([
        None, "null", [group(tier)], group(tier),
        {"classification": "public", "allowed_groups": {group(tier): True},
         "allowed_principals": {"0": alice(tier), "1": bob(tier)}},
        {"classification": "public", "allowed_groups": group(tier),
         "allowed_principals": [[alice(tier)], [bob(tier)]]},
        {"classification": ["public"], "allowed_groups": [group(tier)],
         "allowed_principals": [alice(tier), bob(tier)]},
    ])


def metadata(rng: random.Random) -> Any:
    """One row's metadata (a JSON value, or None for SQL NULL); see the module docstring."""
    u = rng.random()
    if rng.random() < TYPE_HOSTILE_RATE:
        value = _type_hostile(rng, rng.choice(TIERS))
        return json.loads(value) if value == "null" else value
    principals: list[Any] = [{"kind": "matrix", "principal": f"@carol:{SERVER}"}]
    groups: list[Any] = ["partner/org-c/docs"]
    for tier in TIERS:
        if u < tier / VALID_RATE:
            principals += [alice(tier), bob(tier)]
            groups.append(group(tier))
        elif u < tier / VALID_RATE + NEAR_BAND:
            _near_miss(rng, tier, principals, groups)
    doc: dict[str, Any] = {"allowed_groups": groups, "allowed_principals": principals}
    classification = (rng.choice(["public", "approved_non_public"])
                      if rng.random() < VALID_RATE else rng.choice(_BAD_CLASSES))
    if classification is not _MISSING:
        doc["classification"] = classification
    return doc


def _encode_vector(values: Sequence[float]) -> bytes:
    # pgvector's binary input: int16 dimensions, int16 unused, float4 values, network order.
    return struct.pack(f">HH{len(values)}f", len(values), 0, *values)


def _decode_vector(data: bytes) -> list[float]:
    (dim,) = struct.unpack_from(">H", data)
    return list(struct.unpack_from(f">{dim}f", data, 4))


def _random_vector(rng: random.Random) -> list[float]:
    return [rng.uniform(-1.0, 1.0) for _ in range(DIM)]


@dataclass(frozen=True)
class Space:
    """Where the corpus and the queries are drawn from.

    ``uniform``: every coordinate uniform in [-1, 1), HNSW's worst case (no structure at all).
    ``clustered``: a ``Mixture`` of ``TOPICS`` topics with ``SPREAD``, so two chunks of one
    topic have a cosine similarity of about 0.64 and two of different topics about 0. Queries
    come from the same mixture. ACLs are drawn independently of the
    topic: a group's documents are spread over every topic, the case where a filter cannot
    lean on locality.
    """

    kind: str
    mixture: Mixture | None = None

    TOPICS: ClassVar[int] = 100
    SPREAD: ClassVar[float] = 0.75

    @classmethod
    def of(cls, kind: str, seed: int) -> Space:
        if kind == "uniform":
            return cls(kind)
        return cls(kind, Mixture.draw(random.Random(seed + 3), topics=cls.TOPICS,
                                      spread=cls.SPREAD, dimensions=DIM))

    def vector(self, rng: random.Random) -> list[float]:
        return _random_vector(rng) if self.mixture is None else self.mixture.point(rng)

    def marker(self, seed: int) -> str:
        return f"bench_prefilter seed={seed} corpus={self.kind}"


# -- load ------------------------------------------------------------------------------------------


def generate_metadata(rows: int, seed: int) -> list[Any]:
    rng = random.Random(seed)
    return [metadata(rng) for _ in range(rows)]


async def load(conn: asyncpg.Connection, metas: list[Any], seed: int, space: Space, *,
               work_mem: str = "1GB") -> None:
    rows = len(metas)
    if await conn.fetchval("SELECT to_regclass('chunks') IS NOT NULL"):
        loaded = await conn.fetchval("SELECT count(*) FROM chunks")
        marker = await conn.fetchval("SELECT obj_description('chunks'::regclass)")
        if loaded == rows and marker == space.marker(seed):
            print(f"reusing the loaded corpus of {rows} rows", flush=True)
            await corpus.create_chunks_table(conn, indexes=False)  # current search functions
            await _census(conn, work_mem)  # builds only the bucket indexes that are missing
            return
        await conn.execute("DROP TABLE chunks CASCADE")
    await corpus.create_chunks_table(conn, indexes=False)
    await conn.set_type_codec("vector", schema="public", encoder=_encode_vector,
                              decoder=_decode_vector, format="binary")
    rng = random.Random(seed + 1)
    start = time.perf_counter()
    for offset in range(0, rows, BATCH):
        batch = [(i + 1, f"chunk {i + 1}", space.vector(rng),
                  None if metas[i] is None else json.dumps(metas[i]))
                 for i in range(offset, min(rows, offset + BATCH))]
        await conn.copy_records_to_table(
            "chunks", records=batch, columns=["id", "content", "embedding", "metadata"])
    print(f"loaded {rows} rows in {time.perf_counter() - start:.1f} s", flush=True)
    start = time.perf_counter()
    # Parallel HNSW build: pgvector uses maintenance workers when the graph fits in memory
    # (at 1M x 768 about 4 GB; beyond the budget it goes on building on disk, far slower).
    await conn.execute(f"SET maintenance_work_mem = '{work_mem}'")
    await conn.execute("SET max_parallel_maintenance_workers = 2")
    await corpus.create_chunk_indexes(conn)
    # VACUUM as autovacuum would after a bulk insert: all-visible pages spare the exact path a
    # visibility check per candidate row.
    await conn.execute("VACUUM (ANALYZE) chunks")
    print(f"indexes + VACUUM (ANALYZE) in {time.perf_counter() - start:.1f} s", flush=True)
    await _census(conn, work_mem)
    await conn.execute(f"COMMENT ON TABLE chunks IS '{space.marker(seed)}'")


async def _census(conn: asyncpg.Connection, work_mem: str) -> None:
    """The ACL key census and the partial HNSW index per large key (corpus.refresh_buckets),
    as `corpus load` runs it after every load."""
    start = time.perf_counter()
    await conn.execute(f"SET maintenance_work_mem = '{work_mem}'")
    counts = await corpus.refresh_buckets(conn)
    print(f"census: {counts['large_keys']} keys over {corpus.EXACT_MAX_ROWS} rows,"
          f" {counts['bucket_indexes']} bucket indexes, in {time.perf_counter() - start:.1f} s",
          flush=True)


_WALK_SETTINGS: Final = (
    "SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.max_scan_tuples = 10000000;"
    " SET LOCAL work_mem = '512MB'; SET LOCAL enable_seqscan = off;"
    " SET LOCAL enable_bitmapscan = off")
"""An iterative HNSW scan that may walk a whole graph, and no other way to the rows."""


async def prewarm(conn: asyncpg.Connection) -> None:
    """Load the table, its TOAST (the vectors), the whole HNSW graph and every bucket's graph
    into shared_buffers.

    There is no pg_prewarm in this build. Detoasting every vector reads heap + TOAST; one
    iterative HNSW scan whose filter never passes walks the entire graph.
    """
    start = time.perf_counter()
    await conn.fetchval("SELECT sum(vector_dims(embedding)) FROM chunks")
    async with conn.transaction():
        await conn.execute(_WALK_SETTINGS)
        q = corpus.vector_text(_random_vector(random.Random(0)))
        await conn.fetch("SELECT id FROM chunks WHERE content = '' ORDER BY embedding <=>"
                         " $1::text::vector LIMIT 1", q)
    await conn.fetchval("SELECT count(*) FROM chunks WHERE acl_groups && '{x}'"
                        " OR acl_principals && '{x}'")
    buckets = await _prewarm_buckets(conn)
    print(f"prewarmed in {time.perf_counter() - start:.1f} s (the whole graph; {buckets})",
          flush=True)


async def _prewarm_buckets(conn: asyncpg.Connection) -> str:
    """Walk every bucket's partial graph once, as the whole graph's walk above: a query
    repeating the index's own predicate, whose other filter never passes. Without it a
    filtered query may read bucket pages that no prewarm loaded (the 1M run of 2026-12-07
    prewarmed the whole graph only). Says how many walks went through their own index."""
    buckets = await conn.fetch("SELECT rule, key, index_name FROM fgentic_retrieval.acl_buckets"
                               " WHERE index_name IS NOT NULL ORDER BY rows")
    q = corpus.vector_text(_random_vector(random.Random(0)))
    own = 0
    for bucket in buckets:
        statement = await conn.fetchval(
            "SELECT format($1, $2::text)",
            f"SELECT id FROM {corpus.TABLE} WHERE "
            f"{corpus.bucket_clause(corpus.Rule(bucket['rule']))} AND content = ''"
            " ORDER BY embedding <=> $1::text::vector LIMIT 1", bucket["key"])
        async with conn.transaction():
            await conn.execute(_WALK_SETTINGS)
            plan = [r[0] for r in await conn.fetch(f"EXPLAIN {statement}", q)]
            own += any(f" using {bucket['index_name']} " in line for line in plan)
            await conn.fetch(statement, q)
    return f"{own} of {len(buckets)} bucket graphs through their own index"


# -- projections -------------------------------------------------------------------------------


def _hex(seed: str) -> str:
    return (seed * 64)[:64]


def matrix_projection(tier: float, now: int) -> VerifiedIdentity:
    doc = {
        "agent": {"name": "knowledge-agent", "namespace": "kagent"},
        "allowed_classifications": ["approved_non_public", "public"],
        "audience": [bob(tier), alice(tier)],  # byte-sorted: bridged_matrix < matrix
        "delegation_id": _hex("a"), "exp": now + 600, "groups": [], "iat": now,
        "kind": "matrix", "principal": alice(tier)["principal"],
        "room": {"event_id": "$event", "history_visibility": "joined",
                 "id": f"!room:{SERVER}", "join_rule": "invite", "state_sha256": _hex("b")},
        "v": 1,
    }
    return _verified(doc, now)


def oauth_projection(tier: float, now: int) -> VerifiedIdentity:
    doc = {
        "agent": {"name": "knowledge-agent", "namespace": "kagent"},
        "allowed_classifications": ["approved_non_public", "public"],
        "client": {"audience": "fgentic-a2a", "azp": "org-b-a2a",
                   "issuer": "https://issuer.example", "policy_id": "org-b"},
        "delegation_id": _hex("c"), "exp": now + 600, "groups": [group(tier)], "iat": now,
        "kind": "oidc_client", "v": 1,
    }
    return _verified(doc, now)


def _verified(doc: dict[str, Any], now: int) -> VerifiedIdentity:
    """What the retrieval server holds after decoding the header: the prefilter's input."""
    return decode_verified_identity([encode_identity(load_identity(json.dumps(doc)))], now=now,
                                    agent=None)


# -- measurement ---------------------------------------------------------------------------------

# LIMIT is a literal: with LIMIT $2, asyncpg's cached statement turns generic after five runs
# and a generic plan, not knowing the limit, sorts the whole table instead of using HNSW.
_PLAIN: Final = ("SELECT id, content, embedding <=> $1::real[]::vector AS distance FROM chunks"
                 f" ORDER BY distance LIMIT {K}")


@dataclass
class Variant:
    name: str
    projection: VerifiedIdentity | None
    visible: set[int] = field(default_factory=set)
    samples: list[float] = field(default_factory=list)
    returned: list[int] = field(default_factory=list)
    leaked: int = 0
    recall: list[float] = field(default_factory=list)
    plan: str = "-"
    used: str = "-"
    counted: int = -1
    results: list[list[int]] = field(default_factory=list)


async def _exact_ids(conn: asyncpg.Connection, variant: Variant, q: list[float]) -> list[int]:
    """The true top-K under the same predicate: no index may serve the ordering."""
    # A custom plan under enable_indexscan = off: asyncpg caches statements, and a cached
    # generic plan would keep using HNSW whatever the settings say.
    async with conn.transaction():
        await conn.execute("SET LOCAL enable_indexscan = off;"
                           " SET LOCAL plan_cache_mode = force_custom_plan")
        if variant.projection is None:
            rows = await conn.fetch(_PLAIN, q)
        else:
            where = prefilter.predicate(variant.projection, first=3)
            rows = await conn.fetch(corpus.search_sql(where.sql), q, K, *where.args)
    return [row["id"] for row in rows]


def _scan_node(plan: list[str]) -> str:
    for line in plan:
        text = line.strip().removeprefix("->").strip()
        if "Scan" in text and not text.startswith("CTE Scan"):
            return text.split(" on ")[0].replace(" using chunks_", " ")
    return "?"


async def _plan(conn: asyncpg.Connection, variant: Variant, q: list[float]) -> str:
    """The unfiltered query's scan node (EXPLAIN); for a search, the path the search function
    reports it took (its ``path`` column: it plans each call itself, which EXPLAIN cannot see)."""
    if variant.projection is None:
        rows = await conn.fetch("EXPLAIN (COSTS OFF) " + _PLAIN, q)
        return _scan_node([row[0] for row in rows])
    where = prefilter.predicate(variant.projection)
    function = corpus.search_function(where.rule)
    paths = await conn.fetch(f"SELECT DISTINCT path FROM {function}($1, $2, $3, $4)",
                             q, K, *where.args)
    return ", ".join(sorted(row["path"] for row in paths)) or "-"


_INDEXES: Final = {"chunks_embedding_hnsw": "hnsw", "chunks_acl_groups_gin": "gin(groups)",
                   "chunks_acl_principals_gin": "gin(principals)"}


def _index_label(name: str) -> str:
    return "hnsw(bucket)" if name.startswith(corpus.BUCKET_INDEX_PREFIX) else _INDEXES.get(name,
                                                                                          name)


async def _index_scans(conn: asyncpg.Connection) -> dict[str, int]:
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = await conn.fetch("SELECT indexrelname, idx_scan FROM pg_stat_user_indexes"
                            " WHERE relname = 'chunks'")
    return {row["indexrelname"]: row["idx_scan"] for row in rows}


async def _indexes_used(conn: asyncpg.Connection, variant: Variant,
                        embedding: list[float], calls: int = 8) -> str:
    """Index scans per call of the real search() path, from pg_stat_user_indexes. EXPLAIN
    cannot look inside the search function, and its cached statement could in principle turn
    generic after five calls; this shows what the eighth call still uses."""
    before = await _index_scans(conn)
    for _ in range(calls):
        await _run(conn, variant, embedding)
    after = await _index_scans(conn)
    used = [f"{_index_label(name)} x{(after[name] - before.get(name, 0)) / calls:g}"
            for name in sorted(after) if after[name] != before.get(name, 0)]
    return ", ".join(used) or "none"


async def _run(conn: asyncpg.Connection, variant: Variant, embedding: list[float]) -> list[int]:
    # Both sides start from the caller's float list and pay the same conversion
    # (prefilter.query_vector, which search() calls too).
    if variant.projection is not None:
        return [hit.id for hit in await prefilter.search(conn, variant.projection, embedding, K)]
    return [row["id"] for row in await conn.fetch(_PLAIN, prefilter.query_vector(embedding))]


async def bucket_ef_search(conn: asyncpg.Connection, ef_search: int | None) -> None:
    """Every bucket graph's hnsw.ef_search for the next pass: ``ef_search``, or None for the
    census's own (``corpus.bucket_ef_search`` of its rows). The search function reads it from
    the census on every call; nothing else sets it."""
    if ef_search is not None:
        await conn.execute("UPDATE fgentic_retrieval.acl_buckets SET ef_search = $1"
                           " WHERE index_name IS NOT NULL", ef_search)
        return
    buckets = await conn.fetch("SELECT rule, key, rows FROM fgentic_retrieval.acl_buckets"
                               " WHERE index_name IS NOT NULL")
    await conn.executemany(
        "UPDATE fgentic_retrieval.acl_buckets SET ef_search = $3 WHERE rule = $1 AND key = $2",
        [(b["rule"], b["key"], corpus.bucket_ef_search(b["rows"])) for b in buckets])


async def measure(conn: asyncpg.Connection, metas: list[Any], queries: int, seed: int, *,
                  space: Space, ef_search: int | None = None) -> tuple[Variant, list[Variant]]:
    """One timed pass over every variant (recall: :func:`fill_recall`, after every pass).
    ``ef_search``: the bucket graphs' for this pass (None: the census's own; the unfiltered
    baseline keeps pgvector's default, the target's baseline)."""
    await bucket_ef_search(conn, ef_search)
    now = int(time.time())
    plain = Variant("no predicate (plain fetch): baseline", None)
    variants = [Variant(f"{kind} {_pct(tier)} %", make(tier, now))
                for tier in TIERS
                for kind, make in (("Matrix", matrix_projection), ("OAuth", oauth_projection))]
    for variant in variants:
        assert variant.projection is not None
        projection = variant.projection.identity
        variant.visible = {i + 1 for i, m in enumerate(metas) if admits(projection, m)}
        variant.counted = await prefilter.count(conn, variant.projection)
    floats = query_vectors(queries, seed, space)
    everything = [plain, *variants]
    for variant in everything:
        variant.plan = await _plan(conn, variant, floats[0])
    # shared_buffers (128 MB) holds a fraction of the 391 MB graph, and the variants of one
    # query vector share its first graph pages, so whoever runs first pays the misses. The
    # order therefore rotates every round. Round 0 warms up and is not counted.
    for round_, embedding in enumerate(floats):
        shift = round_ % len(everything)
        for variant in everything[shift:] + everything[:shift]:
            start = time.perf_counter()
            ids = await _run(conn, variant, embedding)
            elapsed = time.perf_counter() - start
            if round_:
                variant.samples.append(elapsed)
                variant.returned.append(len(ids))
                variant.results.append(ids)
                if variant.projection is not None:
                    variant.leaked += sum(i not in variant.visible for i in ids)
    for variant in everything:
        variant.used = await _indexes_used(conn, variant, floats[0])
    await bucket_ef_search(conn, None)
    return plain, variants


async def fill_recall(conn: asyncpg.Connection, passes: list[tuple[Variant, list[Variant]]],
                      floats: list[list[float]]) -> None:
    """Each pass's recall@K against the exact answers, computed once per variant and query
    after every timed pass (the exact scans evict the graph)."""
    exact: dict[tuple[str, int], set[int]] = {}
    for plain, variants in passes:
        for variant in [plain, *variants]:
            for i, (q, ids) in enumerate(zip(floats, variant.results, strict=True)):
                if (variant.name, i) not in exact:
                    exact[variant.name, i] = set(await _exact_ids(conn, variant, q))
                truth = exact[variant.name, i]
                variant.recall.append(len(set(ids) & truth) / max(1, len(truth)))


def query_vectors(queries: int, seed: int, space: Space) -> list[list[float]]:
    """The timed passes' query vectors (the first warms up and is not counted)."""
    rng = random.Random(seed + 2)
    return [space.vector(rng) for _ in range(queries + 1)]


def _recall(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3f}" if values else "-"


def report(rows: int, plain: Variant, variants: list[Variant]) -> None:
    table = Table(f"top-{K} over {rows} chunks, median of {len(plain.samples)} queries")
    base = Stats.of(plain.samples)
    table.add(plain.name, base)
    for variant in variants:
        table.add(f"search(): {variant.name}", variant.samples, baseline=base,
                  target="<= 1.5x")
    table.print()
    print()
    header = ("variant", "visible", "selectivity", "count()", "plan / path", "indexes per call",
              "returned min..max",
              "leaked", "recall@10")
    lines = [(plain.name.split(":")[0], str(rows), "100.0 %", "-", plain.plan, plain.used,
              f"{min(plain.returned)}..{max(plain.returned)}", "-", _recall(plain.recall))]
    for v in variants:
        lines.append((v.name, str(len(v.visible)), f"{100 * len(v.visible) / rows:.1f} %",
                      "ok" if v.counted == len(v.visible) else f"MISMATCH {v.counted}",
                      v.plan, v.used, f"{min(v.returned)}..{max(v.returned)}", str(v.leaked),
                      _recall(v.recall)))
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    ratios = []
    for tier in TIERS:
        tiered = [Stats.of(v.samples).median / base.median for v in variants
                  if v.name.endswith(f" {_pct(tier)} %")]
        ratios.append(f"{_pct(tier)} %: {min(tiered):.2f}-{max(tiered):.2f}x")
    recalls = [f"{v.name} {_recall(v.recall)}" for v in variants]
    print(f"\nratio to the unfiltered query (median): {'; '.join(ratios)}"
          f"\nrecall@{K}: {', '.join(recalls)} (unfiltered: {_recall(plain.recall)})",
          flush=True)
    leaked = sum(v.leaked for v in variants)
    short = [v.name for v in variants if len(v.visible) >= K and min(v.returned) < K]
    print(f"\nrows leaked: {leaked}; variants returning < {K} rows although >= {K} visible: "
          f"{', '.join(short) or 'none'}", flush=True)
    if plain.recall:
        low = [f"{v.name} {_recall(v.recall)}" for v in variants
               if sum(v.recall) / len(v.recall) < RECALL_TARGET]
        print(f"recall@{K} below {RECALL_TARGET} (the unfiltered query's own:"
              f" {_recall(plain.recall)}): {', '.join(low) or 'none'}", flush=True)


class TunedPostgres(LocalPostgres):
    """LocalPostgres with a buffer pool that holds the corpus (heap, TOAST, HNSW: ~1.3 GB).

    With the default 128 MB nearly every graph page is a miss, and on this VM the page cache is
    reclaimed aggressively, so a miss is a real disk read: figures then measure the disk and
    the order queries happen to run in, not the predicate.
    """

    def __init__(self, workdir: Path, shared_buffers: str) -> None:
        super().__init__(workdir)
        self.shared_buffers = shared_buffers

    def _initdb(self) -> None:
        super()._initdb()
        assert self.datadir is not None
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write(f"shared_buffers = '{self.shared_buffers}'\n")


async def run(dsn: str, args: argparse.Namespace) -> None:
    metas = generate_metadata(args.rows, args.seed)
    space = Space.of(args.corpus, args.seed)
    conn = await asyncpg.connect(dsn)
    try:
        print(f"shared_buffers: {await conn.fetchval('SHOW shared_buffers')}; corpus:"
              f" {space.kind}", flush=True)
        await load(conn, metas, args.seed, space, work_mem=args.maintenance_work_mem)
        await prewarm(conn)
        passes = [await measure(conn, metas, args.queries, args.seed, space=space,
                                ef_search=ef)
                  for ef in [None, *args.ef_search]]
        if not args.no_recall:
            await fill_recall(conn, passes, query_vectors(args.queries, args.seed, space)[1:])
    finally:
        await conn.close()
    for ef, (plain, variants) in zip([None, *args.ef_search], passes, strict=True):
        if args.ef_search:
            banner("bucket graphs at hnsw.ef_search = "
                   + (str(ef) if ef else "the census's own (corpus.bucket_ef_search)"))
        report(args.rows, plain, variants)


def _ef_values(text: str) -> list[int | None]:
    """``census`` (None: the census's own again) or an integer, comma-separated."""
    try:
        values = [None if value == "census" else int(value) for value in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("integers such as 100,200,400, or census") from None
    if not all(value is None or 1 <= value <= 1000 for value in values):  # pgvector's range
        raise argparse.ArgumentTypeError("each between 1 and 1000")
    return values


def _memory_setting(text: str) -> str:
    # interpolated into SET: digits and a unit only
    if not re.fullmatch(r"[0-9]+(kB|MB|GB)", text):
        raise argparse.ArgumentTypeError("a size such as 1GB or 512MB")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--corpus", choices=("clustered", "uniform"), default="clustered",
                        help="a Gaussian mixture of topics (as real embeddings) or uniform noise")
    parser.add_argument("--no-recall", action="store_true",
                        help="skip the exact (index-free) reference runs")
    parser.add_argument("--dsn", help="use this database instead of a private server")
    parser.add_argument("--shared-buffers", default="2GB",
                        help="shared_buffers of the private server (ignored with --dsn)")
    parser.add_argument("--maintenance-work-mem", default="1GB", type=_memory_setting,
                        help="for the HNSW builds: the whole graph should fit (4GB at 1M rows)")
    parser.add_argument("--ef-search", type=_ef_values, default=[],
                        help="comma-separated hnsw.ef_search values: one more pass of the "
                             "filtered searches with every bucket graph at each, after the "
                             "pass at the census's own (corpus.bucket_ef_search); 'census' "
                             "repeats that pass (its queries' pages then all read once)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    banner("prefilter")
    print(f"command: {command_line()}\nmachine: {machine()}", flush=True)
    if args.dsn:
        asyncio.run(run(args.dsn, args))
        return 0
    with scratch_dir("prefilter", keep=args.keep) as work, \
            TunedPostgres(Path(work), args.shared_buffers) as pg:
        dsn = asyncio.run(pg.create_database("bench_prefilter", extensions=("vector",)))
        asyncio.run(run(dsn, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
