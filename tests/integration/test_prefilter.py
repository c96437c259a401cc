"""The ADR 0017 prefilter against real PostgreSQL 18 + pgvector 0.8: exact visible sets over a
corpus of hostile rows, the iterative-scan fill guarantee, and a property test against the
plain-Python reference (`acl_reference.admits`).

Every expected set is written out by hand *and* recomputed with the reference, so a wrong
reference cannot silently bless a wrong predicate (nor the other way round).
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import strategies as st

from fgentic_governance.contract import (
    ContractError,
    MatrixPrincipal,
    VerifiedIdentity,
    decode_verified_identity,
    encode_identity,
    load_identity,
)
from fgentic_governance.retrieval.search import corpus, prefilter
from fgentic_governance.retrieval.search.acl_reference import admits

pytestmark = pytest.mark.integration

IAT = 1_784_116_800
NOW = IAT + 1
DIM = corpus.EMBEDDING_DIMENSIONS
BOTH = ["approved_non_public", "public"]
PUBLIC = ["public"]

A = {"kind": "matrix", "principal": "@alice:org-a.example"}
B = {"kind": "bridged_matrix", "network": "slack", "principal": "@slack-bob:org-a.example"}
C = {"kind": "matrix", "principal": "@carol:org-b.example"}
G = "partner/org-b/docs"


def _sort_key(entry: dict[str, str]) -> tuple[bytes, bytes, bytes]:
    return (entry["kind"].encode(), entry.get("network", "").encode(),
            entry["principal"].encode())


def matrix(audience: Sequence[dict[str, str]], classes: list[str] = BOTH,
           caller: dict[str, str] | None = None) -> VerifiedIdentity:
    """A verified Matrix (or bridged, by caller kind) projection for ``audience``."""
    caller = caller or audience[0]
    doc: dict[str, Any] = {
        "agent": {"name": "knowledge-agent", "namespace": "kagent"},
        "allowed_classifications": classes,
        "audience": sorted(audience, key=_sort_key),
        "delegation_id": "a" * 64, "exp": IAT + 600, "groups": [], "iat": IAT,
        "kind": caller["kind"], "principal": caller["principal"],
        "room": {"event_id": "$event", "history_visibility": "joined",
                 "id": "!room:org-a.example", "join_rule": "invite", "state_sha256": "b" * 64},
        "v": 1,
    }
    if "network" in caller:
        doc["network"] = caller["network"]
    return verified(doc)


def oauth(groups: Sequence[str], classes: list[str] = BOTH,
          policy_id: str = "org-b") -> VerifiedIdentity:
    doc = {
        "agent": {"name": "knowledge-agent", "namespace": "kagent"},
        "allowed_classifications": classes,
        "client": {"audience": "fgentic-a2a", "azp": f"{policy_id}-a2a",
                   "issuer": "https://issuer.example", "policy_id": policy_id},
        "delegation_id": "c" * 64, "exp": IAT + 600, "groups": sorted(groups), "iat": IAT,
        "kind": "oidc_client", "v": 1,
    }
    return verified(doc)


def verified(doc: dict[str, Any]) -> VerifiedIdentity:
    """What the retrieval server holds after decoding the header: the prefilter's only input."""
    header = encode_identity(load_identity(json.dumps(doc)))
    return decode_verified_identity([header], now=NOW, agent=None)


_MISSING = object()


def acl(principals: Any = _MISSING, groups: Any = _MISSING,
        classification: Any = "public") -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if classification is not _MISSING:
        doc["classification"] = classification
    if principals is not _MISSING:
        doc["allowed_principals"] = principals
    if groups is not _MISSING:
        doc["allowed_groups"] = groups
    return doc


class SqlNull:
    """Marks a row whose metadata column is SQL NULL (as opposed to JSON null)."""


SQL_NULL = SqlNull()

# name -> metadata. Only the first rows are readable by anyone; the rest are near misses.
CATALOG: dict[str, Any] = {
    "both_public": acl([A, B], [G]),
    "both_approved": acl([B, C, A], [G, "partner/org-c/docs"], "approved_non_public"),
    "duplicates": acl([A, A, B, B], [G, G]),
    "alice_only": acl([A], []),
    "principals_only": acl([A, B, {"kind": "oidc_client", "principal": "org-b-a2a"},
                            {"azp": "org-b-a2a"}, "org-b-a2a"]),
    "groups_only": acl([], [G]),
    "groups_only_restricted": acl(_MISSING, [G], "restricted"),
    # Matrix near misses: partial audience, superset objects, wrong kind/network, lookalikes.
    "bob_only_prefix_group": acl([B], ["partner/org-b/doc"]),
    "superset_bob": acl([A, {**B, "extra": "x"}]),
    "superset_alice_network": acl([{**A, "network": "slack"}, B]),
    "superset_alice_null_network": acl([{**A, "network": None}, B]),
    "bob_as_native": acl([A, {"kind": "matrix", "principal": B["principal"]}]),
    "bob_other_network": acl([A, {**B, "network": "irc"}]),
    "bob_without_network": acl([A, {"kind": "bridged_matrix", "principal": B["principal"]}]),
    "alice_localpart": acl([{"kind": "matrix", "principal": "@alice"}, B]),
    "alice_lookalike": acl([{"kind": "matrix", "principal": "@alice:org-a.exampIe"}, B]),
    "alice_trailing_space": acl([{"kind": "matrix", "principal": A["principal"] + " "}, B]),
    "alice_nonstring": acl([{"kind": "matrix", "principal": [A["principal"]]}, B]),
    "alice_upper_kind": acl([{"kind": "Matrix", "principal": A["principal"]}, B]),
    "audience_nested": acl([[A, B]]),
    "principals_object": acl({"0": A, "1": B}, {G: True}),
    "principals_string": acl(json.dumps([A, B]), G),
    # OAuth near misses: prefix/suffix/case/space, another partner, wrong JSON types.
    "group_prefix": acl(_MISSING, ["partner/org-b/doc", "partner/org-b"]),
    "group_longer": acl(_MISSING, ["partner/org-b/docs/extra", "partner/org-b/docsx"]),
    "group_case_space": acl(_MISSING, ["PARTNER/ORG-B/DOCS", " partner/org-b/docs"]),
    "group_other_partner": acl(_MISSING, ["partner/org-c/docs"]),
    "group_nested": acl(_MISSING, [[G], {"name": G}]),
    "groups_string": acl(_MISSING, G),
    "groups_object_key": acl(_MISSING, {G: 1}),
    "empty_arrays": acl([], []),
    # Classification: missing, outside the v1 set, wrong type or spelling.
    "class_missing": acl([A, B], [G], _MISSING),
    "class_restricted": acl([A, B], [G], "restricted"),
    "class_secret": acl([A, B], [G], "secret"),
    "class_authentication": acl([A, B], [G], "authentication"),
    "class_case": acl([A, B], [G], "Public"),
    "class_space": acl([A, B], [G], "public "),
    "class_null": acl([A, B], [G], None),
    "class_number": acl([A, B], [G], 1),
    "class_bool": acl([A, B], [G], True),
    "class_list": acl([A, B], [G], ["public"]),
    "class_object": acl([A, B], [G], {"public": True}),
    "class_nested": {"meta": {"classification": "public"}, "allowed_principals": [A, B],
                     "allowed_groups": [G]},
    # The whole metadata value is wrong.
    "sql_null": SQL_NULL,
    "json_null": None,
    "metadata_list": [A, B, G],
    "metadata_string": "public",
    "metadata_number": 0,
    "metadata_empty": {},
}

M = matrix([A, B])                      # alice (native) and slack-bob (bridged) both read
M_BRIDGED = matrix([A, B], caller=B)    # the same audience, bridged caller
M_ALICE_PUBLIC = matrix([A], PUBLIC)    # alice alone, public only
OA = oauth([G])
OA_PUBLIC = oauth([G], PUBLIC)
OA_OTHER = oauth(["partner/org-b/wiki"])

EXPECTED = {
    "M": (M, {"both_public", "both_approved", "duplicates", "principals_only"}),
    "M_BRIDGED": (M_BRIDGED, {"both_public", "both_approved", "duplicates", "principals_only"}),
    "M_ALICE_PUBLIC": (M_ALICE_PUBLIC, {
        "both_public", "duplicates", "alice_only", "principals_only", "superset_bob",
        "bob_as_native", "bob_other_network", "bob_without_network"}),
    "OA": (OA, {"both_public", "both_approved", "duplicates", "groups_only"}),
    "OA_PUBLIC": (OA_PUBLIC, {"both_public", "duplicates", "groups_only"}),
    "OA_OTHER": (OA_OTHER, set()),
}


def _vector(rng: random.Random) -> str:
    return corpus.vector_text([rng.uniform(-1.0, 1.0) for _ in range(DIM)])


def _metadata_param(value: Any) -> str | None:
    return None if value is SQL_NULL else json.dumps(value)


async def insert(conn: asyncpg.Connection, rows: Sequence[tuple[int, str, Any]],
                 seed: int = 1) -> None:
    rng = random.Random(seed)
    await conn.executemany(
        "INSERT INTO chunks (id, content, embedding, metadata)"
        " VALUES ($1, $2, $3::text::vector, $4::jsonb)",
        [(i, content, _vector(rng), _metadata_param(meta)) for i, content, meta in rows])


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(pg_dsn)
    try:
        await corpus.create_chunks_table(connection)
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def catalog(conn: asyncpg.Connection) -> dict[int, str]:
    names = list(CATALOG)
    await insert(conn, [(i + 1, name, CATALOG[name]) for i, name in enumerate(names)])
    return {i + 1: name for i, name in enumerate(names)}


def _reference(projection: VerifiedIdentity, rows: dict[int, Any]) -> set[int]:
    return {i for i, meta in rows.items()
            if meta is not SQL_NULL and admits(projection.identity, meta)}


# -- exact visible sets ------------------------------------------------------------------------


@pytest.mark.parametrize("label", list(EXPECTED))
async def test_search_and_count_return_exactly_the_visible_set(
    conn: asyncpg.Connection, catalog: dict[int, str], label: str
) -> None:
    projection, expected_names = EXPECTED[label]
    by_name = {name: i for i, name in catalog.items()}
    expected = {by_name[name] for name in expected_names}
    # The hand-written expectation and the reference agree...
    assert _reference(projection, {i: CATALOG[n] for i, n in catalog.items()}) == expected
    query = [random.Random(9).uniform(-1, 1) for _ in range(DIM)]
    hits = await prefilter.search(conn, projection, query, prefilter.MAX_K, now=NOW)
    # ...and so does the database, for ranking and for counting: nothing more, nothing less.
    assert {hit.id for hit in hits} == expected
    assert len(hits) == len(expected)
    assert await prefilter.count(conn, projection, now=NOW) == len(expected)
    assert [h.distance for h in hits] == sorted(h.distance for h in hits)


async def test_near_misses_are_invisible_and_other_probes_match_the_reference(
    conn: asyncpg.Connection, catalog: dict[int, str]
) -> None:
    rows = {i: CATALOG[name] for i, name in catalog.items()}
    probes = [M, M_BRIDGED, M_ALICE_PUBLIC, OA, OA_PUBLIC, OA_OTHER, matrix([B]), matrix([C]),
              matrix([A, B, C]), matrix([B], PUBLIC), oauth([G, "partner/org-b/wiki"]),
              oauth(["partner/org-c/docs"], policy_id="org-c")]
    for projection in probes:
        predicate = prefilter.predicate(projection, now=NOW)
        got = await conn.fetch(f"SELECT id FROM chunks WHERE {predicate.sql}", *predicate.args)
        assert {row["id"] for row in got} == _reference(projection, rows)
    # The near misses of the room (alice + slack-bob) and of partner group `docs`:
    seen = set()
    for projection in (M, M_BRIDGED, OA, OA_PUBLIC):
        seen |= {catalog[h.id] for h in await prefilter.search(
            conn, projection, [1.0] * DIM, prefilter.MAX_K, now=NOW)}
    near_misses = {name for name in CATALOG if name not in {
        "both_public", "both_approved", "duplicates", "principals_only", "groups_only"}}
    assert not seen & near_misses
    assert {"superset_bob", "superset_alice_network", "bob_as_native", "bob_other_network",
            "bob_without_network", "alice_only", "group_prefix", "group_longer",
            "group_case_space", "class_missing", "class_restricted", "sql_null",
            "groups_object_key", "groups_string"} <= near_misses


async def test_superset_object_does_not_match_where_jsonb_containment_would(
    conn: asyncpg.Connection, catalog: dict[int, str]
) -> None:
    """The reason for the derived key column: raw jsonb `@>` admits a superset object."""
    by_name = {name: i for i, name in catalog.items()}
    row = by_name["superset_alice_network"]
    naive = await conn.fetchval(
        "SELECT metadata -> 'allowed_principals' @> $1::jsonb FROM chunks WHERE id = $2",
        json.dumps([A, B]), row)
    assert naive is True  # what a containment-only predicate would have leaked
    assert row not in {h.id for h in await prefilter.search(
        conn, M, [1.0] * DIM, prefilter.MAX_K, now=NOW)}
    # Likewise jsonb `?|` is true for an object key and for a bare string.
    for name in ("groups_object_key", "groups_string"):
        naive = await conn.fetchval(
            "SELECT metadata -> 'allowed_groups' ?| $1::text[] FROM chunks WHERE id = $2",
            [G], by_name[name])
        assert naive is True, name
    assert await prefilter.count(conn, OA_OTHER, now=NOW) == 0


async def test_derived_columns_follow_metadata_and_refuse_direct_writes(
    conn: asyncpg.Connection, catalog: dict[int, str]
) -> None:
    by_name = {name: i for i, name in catalog.items()}
    row = by_name["both_public"]
    with pytest.raises(asyncpg.exceptions.GeneratedAlwaysError):
        await conn.execute("UPDATE chunks SET acl_groups = $1 WHERE id = $2", [G], row)
    with pytest.raises(asyncpg.exceptions.GeneratedAlwaysError):
        await conn.execute("INSERT INTO chunks (content, embedding, metadata, acl_principals)"
                           " VALUES ('x', $1::text::vector, '{}', $2)",
                           corpus.vector_text([1.0] * DIM), ["matrix  @alice:org-a.example"])
    before = await prefilter.count(conn, M, now=NOW)
    # Revocation is immediate: removing bob from the row's ACL hides it from the room.
    await conn.execute("UPDATE chunks SET metadata = $1::jsonb WHERE id = $2",
                       json.dumps(acl([A], [G])), row)
    assert await prefilter.count(conn, M, now=NOW) == before - 1
    assert await prefilter.count(conn, OA, now=NOW) == len(EXPECTED["OA"][1])


async def test_refused_projection_builds_no_query(conn: asyncpg.Connection,
                                                  catalog: dict[int, str]) -> None:
    expired = IAT + 600
    # Anything but a VerifiedIdentity, a valid but undecoded projection model included.
    for bad in (None, {}, json.dumps(A), M.identity.model_dump(), M.identity,
                encode_identity(M.identity)):
        with pytest.raises(ContractError):
            await prefilter.search(conn, bad, [1.0] * DIM, 10, now=NOW)
        with pytest.raises(ContractError):
            await prefilter.count(conn, bad, now=NOW)
    with pytest.raises(ContractError):
        await prefilter.search(conn, M, [1.0] * DIM, 10, now=expired)
    # Unchecked models: an empty audience would be `@> '{}'`, true for every row.
    hollow = type(M.identity).model_construct(**{**dict(M.identity), "audience": ()})
    with pytest.raises(ContractError):
        await prefilter.count(conn, hollow, now=NOW)
    widened = type(OA.identity).model_construct(
        **{**dict(OA.identity), "allowed_classifications": ("secret",)})
    with pytest.raises(ContractError):
        await prefilter.count(conn, widened, now=NOW)
    assert not conn.is_in_transaction()


async def test_search_settings_hold_for_the_call_only(
    conn: asyncpg.Connection, catalog: dict[int, str]
) -> None:
    expected = {h.id for h in await prefilter.search(conn, OA, [1.0] * DIM, 10, now=NOW)}
    assert not conn.is_in_transaction()
    assert await conn.fetchval("SHOW hnsw.iterative_scan") == "off"
    assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
    # Inside a caller's transaction: same rows, and nothing leaks into that transaction.
    async with conn.transaction():
        inner = {h.id for h in await prefilter.search(conn, OA, [1.0] * DIM, 10, now=NOW)}
        assert await conn.fetchval("SHOW hnsw.iterative_scan") == "off"
    assert inner == expected


async def test_search_function_is_bound_to_the_current_clause(
    conn: asyncpg.Connection, catalog: dict[int, str]
) -> None:
    """A stale or missing search function fails the search; there is no fallback query."""
    name = corpus.search_function(corpus.Rule.GROUPS)
    assert name.startswith("fgentic_retrieval.search_groups_")
    source = await conn.fetchval("SELECT pg_get_functiondef($1::regproc)", name)
    assert corpus.clause(corpus.Rule.GROUPS, first=3) in source  # the ranked statement's
    assert "hnsw.iterative_scan" in source and "relaxed_order" in source
    await conn.execute(f"DROP FUNCTION {name}")
    with pytest.raises(asyncpg.exceptions.UndefinedFunctionError):
        await prefilter.search(conn, OA, [1.0] * DIM, 10, now=NOW)
    await corpus.create_chunks_table(conn)  # idempotent; reinstalls it
    assert len(await prefilter.search(conn, OA, [1.0] * DIM, 10, now=NOW)) == len(
        EXPECTED["OA"][1])


async def test_search_path_cannot_redirect_the_search(
    conn: asyncpg.Connection, catalog: dict[int, str]
) -> None:
    # A decoy `chunks` earlier on the search_path, readable by everyone, is never consulted.
    await conn.execute("CREATE SCHEMA decoy; CREATE TABLE decoy.chunks (LIKE public.chunks);"
                       " SET search_path = decoy, public")
    hits = await prefilter.search(conn, OA, [1.0] * DIM, prefilter.MAX_K, now=NOW)
    assert {catalog[h.id] for h in hits} == EXPECTED["OA"][1]
    assert await prefilter.count(conn, OA, now=NOW) == len(EXPECTED["OA"][1])


async def test_search_without_the_schema_fails_closed(pg_dsn: str) -> None:
    bare = await asyncpg.connect(pg_dsn)  # no chunks table, no functions, no schema
    missing = (asyncpg.exceptions.InvalidSchemaNameError,
               asyncpg.exceptions.UndefinedFunctionError)
    try:
        with pytest.raises(missing):
            await prefilter.search(bare, OA, [1.0] * DIM, 10, now=NOW)
        with pytest.raises(missing):
            await prefilter.count(bare, OA, now=NOW)
        assert not bare.is_in_transaction()
    finally:
        await bare.close()


async def test_predicate_is_served_by_the_gin_indexes(
    conn: asyncpg.Connection, catalog: dict[int, str]
) -> None:
    await conn.execute("ANALYZE chunks")
    await conn.execute("SET enable_seqscan = off")
    for projection, index in ((OA, "chunks_acl_groups_gin"), (M, "chunks_acl_principals_gin")):
        predicate = prefilter.predicate(projection, now=NOW)
        plan = "\n".join(row[0] for row in await conn.fetch(
            f"EXPLAIN SELECT count(*) FROM chunks WHERE {predicate.sql}", *predicate.args))
        assert f"Bitmap Index Scan on {index}" in plan, plan


# -- k rows whenever k rows are visible --------------------------------------------------------


async def _selective_corpus(conn: asyncpg.Connection, rows: int, visible: int) -> set[int]:
    """``rows`` chunks of which ``visible`` (spread out) admit OA; the rest are near misses."""
    rng = random.Random(5)
    step = rows // max(1, visible)
    readable = {1 + i * step for i in range(visible)}
    hostile = [acl([A, B], ["partner/org-b/doc"]), acl(_MISSING, [G], "restricted"),
               acl([A, B], [G + "x"]), acl(_MISSING, {G: 1})]
    await insert(conn, [(i, f"chunk {i}",
                         acl(_MISSING, [G]) if i in readable else rng.choice(hostile))
                        for i in range(1, rows + 1)])
    await corpus.create_chunk_indexes(conn)
    await conn.execute("ANALYZE chunks")
    return readable


async def _graph_path_only(conn: asyncpg.Connection) -> None:
    # Session-level: make the planner rank through HNSW even where a bitmap scan would win,
    # which is the path that can come up short.
    await conn.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")


async def test_ten_rows_at_one_percent_on_the_hnsw_path(
    conn: asyncpg.Connection, pg_dsn: str
) -> None:
    await conn.execute("DROP INDEX chunks_embedding_hnsw")  # rebuilt after the load
    readable = await _selective_corpus(conn, 2000, 20)
    query = [random.Random(3).uniform(-1, 1) for _ in range(DIM)]
    # A fresh session whose first statement is the search: the hnsw.* settings are made
    # before pgvector's library is loaded in it, and must still take effect.
    fresh = await asyncpg.connect(pg_dsn)
    try:
        await _graph_path_only(fresh)
        hits = await prefilter.search(fresh, OA, query, 10, now=NOW)
    finally:
        await fresh.close()
    assert len(hits) == 10
    assert {h.id for h in hits} <= readable
    await _graph_path_only(conn)
    predicate = prefilter.predicate(OA, now=NOW, first=3)
    sql = corpus.search_sql(predicate.sql)
    vector = prefilter.query_vector(query)
    plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {sql}", vector, 10,
                                                    *predicate.args))
    assert "Index Scan using chunks_embedding_hnsw" in plan, plan
    # Control: without iterative scans the first ef_search candidates hold too few rows.
    async with conn.transaction():
        await conn.execute(corpus.set_local_search_settings())
        await conn.execute("SET LOCAL hnsw.iterative_scan = off")
        short = await conn.fetch(sql, vector, 10, *predicate.args)
    assert len(short) < 10
    assert [h.id for h in await prefilter.search(conn, OA, query, 10, now=NOW)] == [
        h.id for h in hits]


async def test_every_visible_row_when_fewer_than_k_on_the_hnsw_path(
    conn: asyncpg.Connection,
) -> None:
    await conn.execute("DROP INDEX chunks_embedding_hnsw")
    readable = await _selective_corpus(conn, 2000, 3)
    await _graph_path_only(conn)
    hits = await prefilter.search(conn, OA, [1.0] * DIM, 10, now=NOW)
    assert {h.id for h in hits} == readable
    assert await prefilter.count(conn, OA, now=NOW) == 3


async def _index_scans(conn: asyncpg.Connection) -> dict[str, int]:
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = await conn.fetch("SELECT indexrelname, idx_scan FROM pg_stat_user_indexes"
                            " WHERE relname = 'chunks'")
    return {row["indexrelname"]: row["idx_scan"] for row in rows}


async def test_every_call_is_planned_for_its_own_selectivity(conn: asyncpg.Connection) -> None:
    """The search function's statement is cached per session; force_custom_plan must keep a
    selective and a broad projection on different plans long after the fifth call."""
    await conn.execute("DROP INDEX chunks_embedding_hnsw")
    rng = random.Random(8)
    await insert(conn, [(i, f"chunk {i}", acl(_MISSING, [G] if i % 100 == 0 else
                                               ["partner/org-b/wiki"]))
                        for i in range(1, 3001)], seed=8)
    await corpus.create_chunk_indexes(conn)
    await conn.execute("ANALYZE chunks")
    rare, broad = OA, OA_OTHER  # 1 % and 99 % of the rows
    query = [rng.uniform(-1, 1) for _ in range(DIM)]
    for _ in range(6):
        for projection in (rare, broad):
            assert len(await prefilter.search(conn, projection, query, 10, now=NOW)) == 10
    for projection, gin_scans in ((rare, 1), (broad, 0)):
        before = await _index_scans(conn)
        await prefilter.search(conn, projection, query, 10, now=NOW)
        after = await _index_scans(conn)
        scans = after["chunks_acl_groups_gin"] - before["chunks_acl_groups_gin"]
        assert scans == gin_scans, (projection.identity.groups, before, after)


WIKI, DOC = "partner/org-b/wiki", "partner/org-b/doc"


async def _planned(conn: asyncpg.Connection, projection: VerifiedIdentity,
                   query: list[float]) -> tuple[list[int], set[str], dict[str, int]]:
    """One search function call: the ids, the paths it reports and the index scans it made."""
    where = prefilter.predicate(projection, now=NOW)
    before = await _index_scans(conn)
    rows = await conn.fetch(
        f"SELECT id, path FROM {corpus.search_function(where.rule)}($1, $2, $3, $4)",
        prefilter.query_vector(query), 10, *where.args)
    after = await _index_scans(conn)
    scans = {name: after[name] - before.get(name, 0) for name in after
             if after[name] != before.get(name, 0)}
    return [row["id"] for row in rows], {row["path"] for row in rows}, scans


async def test_each_call_is_planned_from_the_acl_census(conn: asyncpg.Connection) -> None:
    """Below the census threshold the call ranks the GIN-found candidates exactly (no graph
    walk); a key with a partial HNSW index is walked in its own graph; a key too large for one
    walks the whole graph. Each path returns the visible rows only, k of them, and the exact
    path the exact top k."""
    rng = random.Random(12)
    rows = {i: acl([A, B] if i % 100 == 0 else [A] if i % 2 == 0 else [C],
                   [G, WIKI, DOC] if i % 100 == 0 else [WIKI, DOC] if i % 3 == 0 else [DOC])
            for i in range(1, 3001)}
    await conn.execute("DROP INDEX chunks_embedding_hnsw")  # rebuilt after the load
    await insert(conn, [(i, f"chunk {i}", meta) for i, meta in rows.items()], seed=12)
    await corpus.create_chunk_indexes(conn)
    await conn.execute("ANALYZE chunks")
    query = [rng.uniform(-1, 1) for _ in range(DIM)]
    # No census yet: the planner chooses, as before.
    assert (await _planned(conn, OA, query))[1] == {corpus.Path.PLANNER}
    counts = await corpus.refresh_buckets(conn, exact_max_rows=100)
    # G and B (30 rows each) are small; WIKI (1,020), A and C (1,500 each) get a partial
    # index each; DOC (every row) is over 0.6 of the rows: no index of its own.
    assert counts == {"rows": 3000, "large_keys": 4, "bucket_indexes": 3}
    wiki_index = corpus.bucket_index_name(corpus.Rule.GROUPS, WIKI)
    alice = matrix([A])
    alice_index = corpus.bucket_index_name(
        corpus.Rule.PRINCIPALS, prefilter.principal_key(MatrixPrincipal.model_validate(A)))
    cases = (
        (OA, corpus.Path.EXACT, "chunks_acl_groups_gin"),
        (M, corpus.Path.EXACT, "chunks_acl_principals_gin"),  # B bounds the audience's rows
        (OA_OTHER, corpus.Path.BUCKET, wiki_index),
        (alice, corpus.Path.BUCKET, alice_index),
        (oauth([DOC]), corpus.Path.GRAPH, "chunks_embedding_hnsw"),
        (oauth([G, WIKI]), corpus.Path.GRAPH, "chunks_embedding_hnsw"),  # a union: no bucket
    )
    for projection, path, index in cases:
        visible = _reference(projection, rows)
        ids, paths, scans = await _planned(conn, projection, query)
        assert paths == {path}, (projection.identity, paths)
        assert scans == {index: 1}, (projection.identity, scans)
        assert len(ids) == min(10, len(visible)) and set(ids) <= visible
        if path is corpus.Path.EXACT:
            exact = await conn.fetch(
                "SELECT id FROM chunks WHERE id = ANY($2::bigint[])"
                " ORDER BY embedding <=> $1::real[]::vector LIMIT 10", query, sorted(visible))
            assert ids == [row["id"] for row in exact]


async def test_a_bucket_walk_keeps_its_census_ef_search_for_that_call_only(
    conn: asyncpg.Connection,
) -> None:
    """The census gives each bucket graph the ef_search of its rows; the bucket path walks
    with it (an ef_search as large as the bucket gives the exact answers, the least one does
    not), and the caller's own setting is back when the call returns, in a transaction too."""
    rows = {i: acl(_MISSING, [WIKI] if i % 5 < 2 else [DOC]) for i in range(1, 2001)}
    await conn.execute("DROP INDEX chunks_embedding_hnsw")
    await insert(conn, [(i, f"chunk {i}", meta) for i, meta in rows.items()], seed=21)
    await corpus.create_chunk_indexes(conn)
    await corpus.refresh_buckets(conn, exact_max_rows=100)
    census = {r["key"]: (r["rows"], r["ef_search"]) for r in await conn.fetch(
        "SELECT key, rows, ef_search FROM fgentic_retrieval.acl_buckets")}
    assert census == {WIKI: (800, corpus.bucket_ef_search(800)),
                      DOC: (1200, corpus.bucket_ef_search(1200))}
    plan = await conn.fetchrow(f"SELECT * FROM {corpus.FUNCTION_SCHEMA}.search_plan($1, $2)",
                               "groups", [WIKI])
    assert tuple(plan) == ("bucket", WIKI, corpus.bucket_ef_search(800))
    rng = random.Random(22)
    queries = [[rng.uniform(-1, 1) for _ in range(DIM)] for _ in range(20)]
    visible = sorted(i for i in rows if i % 5 < 2)
    exact = [[r["id"] for r in await conn.fetch(
        "SELECT id FROM chunks WHERE id = ANY($2::bigint[])"
        " ORDER BY embedding <=> $1::real[]::vector LIMIT 10", q, visible)] for q in queries]

    async def answers(ef_search: int) -> list[list[int]]:
        await conn.execute("UPDATE fgentic_retrieval.acl_buckets SET ef_search = $1"
                           " WHERE key = $2", ef_search, WIKI)
        return [[hit.id for hit in await prefilter.search(conn, oauth([WIKI]), q, 10, now=NOW)]
                for q in queries]

    await conn.execute("SET hnsw.ef_search = 7")
    assert await answers(1000) == exact  # 1,000 >= 800 rows: the walk visits every one
    assert await answers(1) != exact
    assert await conn.fetchval("SHOW hnsw.ef_search") == "7"
    async with conn.transaction():
        await prefilter.search(conn, oauth([WIKI]), queries[0], 10, now=NOW)
        assert await conn.fetchval("SHOW hnsw.ef_search") == "7"


async def test_a_census_from_before_ef_search_is_upgraded_in_place(
    conn: asyncpg.Connection,
) -> None:
    """A database installed before the buckets had an ef_search (the plan's OUT parameters
    were path and bucket): re-running the DDL adds the column and replaces the plan."""
    await conn.execute(
        f"DROP FUNCTION {corpus.FUNCTION_SCHEMA}.search_plan(text, text[]);"
        " ALTER TABLE fgentic_retrieval.acl_buckets DROP COLUMN ef_search;"
        f" CREATE FUNCTION {corpus.FUNCTION_SCHEMA}.search_plan(rule text, acl text[],"
        " OUT path text, OUT bucket text) LANGUAGE sql AS $$ SELECT 'planner', NULL $$")
    await corpus.create_chunks_table(conn)
    assert await conn.fetchval(
        "SELECT proargnames FROM pg_proc WHERE oid = to_regprocedure($1)",
        f"{corpus.FUNCTION_SCHEMA}.search_plan(text, text[])") == [
            "rule", "acl", "path", "bucket", "ef_search"]
    assert await conn.fetchval(
        "SELECT count(*) FROM pg_attribute WHERE attrelid ="
        " 'fgentic_retrieval.acl_buckets'::regclass AND attname = 'ef_search'") == 1


def _clustered(rng: random.Random, centres: Sequence[Sequence[float]]) -> list[float]:
    """A point near one of ``centres``: real embeddings cluster by topic, and a clustered
    corpus is where relaxed_order hands back candidates out of distance order."""
    centre = rng.choice(centres)
    return [c + rng.gauss(0.0, 0.15) for c in centre]


async def test_results_come_back_in_distance_order_on_the_hnsw_path(
    conn: asyncpg.Connection,
) -> None:
    """relaxed_order iterative scans return candidates slightly out of order, which the outer
    sort of ``search_sql`` fixes; PostgreSQL 17+ would drop that sort as redundant (the
    MATERIALIZED CTE's output is already "ordered by distance"; pgvector documents ``+ 0``).
    The plan must keep a Sort above the CTE, and every returned list is non-decreasing."""
    await conn.execute("DROP INDEX chunks_embedding_hnsw")
    rng = random.Random(11)
    centres = [[rng.gauss(0.0, 1.0) for _ in range(DIM)] for _ in range(12)]
    await conn.executemany(
        "INSERT INTO chunks (id, content, embedding, metadata)"
        " VALUES ($1, $2, $3::text::vector, $4::jsonb)",
        [(i, f"chunk {i}", corpus.vector_text(_clustered(rng, centres)),
          json.dumps(acl(_MISSING, [G] if i % 10 == 0 else ["partner/org-b/wiki"])))
         for i in range(1, 4001)])
    await corpus.create_chunk_indexes(conn)
    await conn.execute("ANALYZE chunks")
    await _graph_path_only(conn)
    predicate = prefilter.predicate(OA, now=NOW, first=3)
    sql = corpus.search_sql(predicate.sql)
    query = prefilter.query_vector(_clustered(rng, centres))
    async with conn.transaction():
        await conn.execute(corpus.set_local_search_settings())
        plan = [r[0] for r in await conn.fetch(f"EXPLAIN {sql}", query, 10, *predicate.args)]
    text = "\n".join(plan)
    assert "Index Scan using chunks_embedding_hnsw" in text, text
    assert plan[0].lstrip().startswith("Sort"), text  # the outer ORDER BY, kept
    for _ in range(40):
        hits = await prefilter.search(conn, OA, _clustered(rng, centres), 10, now=NOW)
        assert len(hits) == 10
        distances = [h.distance for h in hits]
        assert distances == sorted(distances), distances


async def test_bitmap_path_returns_the_exact_top_k(conn: asyncpg.Connection) -> None:
    await conn.execute("DROP INDEX chunks_embedding_hnsw")
    readable = await _selective_corpus(conn, 2000, 40)
    await conn.execute("SET enable_seqscan = off; SET enable_indexscan = off")
    query = [random.Random(4).uniform(-1, 1) for _ in range(DIM)]
    hits = await prefilter.search(conn, OA, query, 10, now=NOW)
    expected = await conn.fetch(
        "SELECT id FROM chunks WHERE id = ANY($2::bigint[])"
        " ORDER BY embedding <=> $1::text::vector LIMIT 10",
        corpus.vector_text(query), sorted(readable))
    assert [h.id for h in hits] == [row["id"] for row in expected]


# -- property: SQL predicate == reference ------------------------------------------------------

_SAFE_TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                     max_size=6)
_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | _SAFE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_SAFE_TEXT, inner, max_size=3),
    max_leaves=6)
_POOL = [A, B, C, {"kind": "bridged_matrix", "network": "irc", "principal": "@dave:org-a.example"}]
_GROUPS = [G, "partner/org-b/doc", "partner/org-b/docs2", "partner/org-b/wiki"]


@st.composite
def _mutated(draw: st.DrawFn) -> Any:
    entry = dict(draw(st.sampled_from(_POOL)))
    change = draw(st.sampled_from(["extra", "drop", "kind", "network", "principal", "type"]))
    if change == "extra":
        entry[draw(st.sampled_from(["network", "extra", "kind2"]))] = draw(_JUNK)
    elif change == "drop":
        entry.pop(draw(st.sampled_from(sorted(entry))))
    elif change == "kind":
        entry["kind"] = draw(st.sampled_from(["matrix", "bridged_matrix", "Matrix", "oidc"]))
    elif change == "network":
        entry["network"] = draw(st.sampled_from(["slack", "irc", "", "slack "]))
    elif change == "principal":
        entry["principal"] = entry["principal"] + draw(st.sampled_from([" ", "x", ""]))
    else:
        entry["principal"] = draw(_JUNK)
    return entry


_PRINCIPAL = st.sampled_from(_POOL) | _mutated() | _JUNK
_GROUP = st.sampled_from([*_GROUPS, "partner/org-c/docs", G.upper()]) | _JUNK
# Mostly well-formed ACLs drawn from the same pools as the projections (so rows are often
# visible and near misses are one mutation away), plus wholesale junk.
_PLAUSIBLE = st.fixed_dictionaries({
    "classification": st.sampled_from(["public", "approved_non_public", "restricted"]),
    "allowed_principals": st.builds(
        lambda valid, mutated, order: [*valid, *mutated][::order],
        st.lists(st.sampled_from(_POOL), min_size=2, max_size=4), st.lists(_mutated(), max_size=2),
        st.sampled_from([1, -1])),
    "allowed_groups": st.lists(st.sampled_from([*_GROUPS, "partner/org-c/docs"]), max_size=3),
})
_METADATA = st.one_of(
    st.just(SQL_NULL),
    _JUNK,
    _PLAUSIBLE,
    _PLAUSIBLE,
    st.fixed_dictionaries({}, optional={
        "classification": st.sampled_from(["public", "approved_non_public", "restricted",
                                           "Public"]) | _JUNK,
        "allowed_principals": st.lists(_PRINCIPAL, max_size=5) | _JUNK,
        "allowed_groups": st.lists(_GROUP, max_size=4) | _JUNK,
    }),
)
_CLASSES = st.sampled_from([BOTH, PUBLIC])


@st.composite
def _matrix_projection(draw: st.DrawFn) -> VerifiedIdentity:
    audience = draw(st.lists(st.sampled_from(_POOL), min_size=1, max_size=2,
                             unique_by=lambda e: e["principal"]))
    return matrix(audience, draw(_CLASSES), caller=draw(st.sampled_from(audience)))


@st.composite
def _oauth_projection(draw: st.DrawFn) -> VerifiedIdentity:
    groups = draw(st.lists(st.sampled_from(_GROUPS), min_size=1, max_size=3, unique=True))
    return oauth(groups, draw(_CLASSES))


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(_METADATA, min_size=1, max_size=16),
       projections=st.lists(_matrix_projection() | _oauth_projection(), max_size=2).flatmap(
           lambda more: st.tuples(_matrix_projection(), _oauth_projection()).map(
               lambda pair: [*pair, *more])))
async def test_predicate_equals_the_reference(
    conn: asyncpg.Connection, rows: list[Any], projections: list[VerifiedIdentity]
) -> None:
    await conn.execute("TRUNCATE chunks")
    await insert(conn, [(i, f"chunk {i}", meta) for i, meta in enumerate(rows, start=1)])
    # A census with a tiny threshold: keys on more than 3 rows get a partial HNSW index, so
    # the examples take the exact, bucket and graph paths (each one counted below).
    await corpus.refresh_buckets(conn, exact_max_rows=3, max_share=1.0)
    by_id = dict(enumerate(rows, start=1))
    visible = [0, 0]  # OAuth, Matrix: steer generation towards rows that are visible
    for projection in projections:
        expected = _reference(projection, by_id)
        kind = projection.identity.kind
        event(f"{kind}: {'some' if expected else 'no'} rows visible")
        where = prefilter.predicate(projection, now=NOW)
        event(f"{kind}: path " + await conn.fetchval(
            f"SELECT path FROM {corpus.FUNCTION_SCHEMA}.search_plan($1, $2)",
            where.rule.value, where.args[1]))
        visible[kind != "oidc_client"] += len(expected)
        hits = await prefilter.search(conn, projection, [1.0] * DIM, prefilter.MAX_K, now=NOW)
        assert {h.id for h in hits} == expected
        assert await prefilter.count(conn, projection, now=NOW) == len(expected)
    target(float(visible[0]), label="OAuth rows visible")
    target(float(visible[1]), label="Matrix rows visible")
