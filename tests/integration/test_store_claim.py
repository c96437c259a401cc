"""Issue 17 §4 on a real PostgreSQL: the scope claim cannot be forged (sql/0007_claim.sql).

The runtime role sets the old context settings (``fgentic_memory.scope_key`` and
``fgentic_memory.generation``) by hand, with the correct key and generation of another
subject's enabled scope, in a transaction that never entered a scope or that entered its own.
None of it reads, writes or spends in the other scope; the claim ends with its transaction;
the claim's secret is out of the runtime's reach; and the legitimate path still works.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from fgentic_governance.memory import Access, MemoryStore
from tests.support.store import GATED_INSERT, enabled, enter, scope_record, store_agent

pytestmark = pytest.mark.integration

BOB = "@bob:example.org"
BOB_ROOM = "!bob-control:example.org"
FORGE = ("SELECT set_config('fgentic_memory.scope_key', $1, true),"
         " set_config('fgentic_memory.generation', $2, true)")
LEDGER = "SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger WHERE scope_key = $1"
BUCKETS = "SELECT count(*) FROM fgentic_memory.rate_bucket WHERE subject_mxid = $1"


async def scopes(store: MemoryStore) -> tuple[Access, Access]:
    """Alice's and Bob's enabled scopes, each with one stored fact."""
    alice = await enabled(store)
    bob = await enabled(store, scope_record("team-a/bob-helper", subject_mxid=BOB,
                                            control_room=BOB_ROOM))
    await store.save(alice, "Alice prefers tea.")
    await store.save(bob, "Bob prefers coffee.")
    return alice, bob


async def forge(conn: Any, victim: Access, own: Access | None) -> None:
    """In the current transaction: enter ``own`` (if any), then claim ``victim`` by hand."""
    if own is not None:
        await enter(conn, own, "recall")
    await conn.execute(FORGE, victim.scope_key, str(victim.generation))


async def sqlstate(coro: Any) -> str:
    with pytest.raises(asyncpg.PostgresError) as info:
        await coro
    return str(info.value.sqlstate)


OWN = pytest.mark.parametrize("own_claim", [False, True], ids=["no-claim", "own-claim"])


@OWN
async def test_forged_context_reads_nothing_of_another_scope(
        store: MemoryStore, runtime_pool: Any, own_claim: bool) -> None:
    alice, bob = await scopes(store)
    async with runtime_pool.acquire() as conn, conn.transaction():
        await forge(conn, alice, bob if own_claim else None)
        assert await conn.fetchval(
            "SELECT count(*) FROM readable_memory WHERE scope_key = $1", alice.scope_key) == 0
        visible = await conn.fetch("SELECT scope_key, content FROM readable_memory")
    assert [tuple(row) for row in visible] == (
        [(bob.scope_key, "Bob prefers coffee.")] if own_claim else [])


@OWN
async def test_forged_context_writes_nothing_into_another_scope(
        store: MemoryStore, runtime_pool: Any, own_claim: bool) -> None:
    alice, bob = await scopes(store)
    async with runtime_pool.acquire() as conn:
        # Every column the gate checks is right for Alice's scope: only the claim is missing.
        assert await sqlstate(_in_transaction(
            conn, forge(conn, alice, bob if own_claim else None),
            GATED_INSERT, store_agent(alice), alice.subject_mxid, "planted", alice.scope_key,
            alice.generation)) == "FG001"  # SCOPE_MISSING
        entry = await conn.fetchval("SELECT id FROM memory WHERE scope_key = $1",
                                    alice.scope_key)
        # A content update (a write) of Alice's row is refused the same way.
        assert await sqlstate(_in_transaction(
            conn, forge(conn, alice, bob if own_claim else None),
            "UPDATE memory SET content = 'planted' WHERE id = $1 RETURNING id", entry)) == (
            "FG001")
    assert await store.entry_count(alice.scope_key) == 1
    assert [e.content for e in await store.list_entries(alice)] == ["Alice prefers tea."]


async def _in_transaction(conn: Any, prepare: Any, sql: str, *args: Any) -> Any:
    async with conn.transaction():
        await prepare
        return await conn.fetchval(sql, *args)


@OWN
async def test_forged_context_spends_nothing_of_another_budget(
        store: MemoryStore, runtime_pool: Any, pool: Any, own_claim: bool) -> None:
    alice, bob = await scopes(store)
    async with runtime_pool.acquire() as conn:
        if own_claim:
            # admit() charges the verified claim (Bob's own scope), never the forged one.
            async with conn.transaction():
                await forge(conn, alice, bob)
                await conn.fetchval("SELECT admit('load', 5, true)")
        else:
            assert await sqlstate(_in_transaction(
                conn, forge(conn, alice, None), "SELECT admit('load', 5, true)")) == "FG001"
    async with pool.acquire() as owner:
        assert await owner.fetchval(LEDGER, alice.scope_key) == 0
        assert await owner.fetchval(BUCKETS, alice.subject_mxid) == 0
        assert await owner.fetchval(LEDGER, bob.scope_key) == (5 if own_claim else 0)


async def test_claim_does_not_survive_its_transaction(
        store: MemoryStore, runtime_pool: Any, pool: Any) -> None:
    alice, _ = await scopes(store)
    async with runtime_pool.acquire() as conn:
        async with conn.transaction():
            await enter(conn, alice, "capture")
            assert await conn.fetchval("SELECT count(*) FROM readable_memory") == 1
            token = await conn.fetchval(
                "SELECT coalesce(current_setting('fgentic_memory.claim', true), '')")
            backend = await conn.fetchval("SELECT pg_backend_pid()")
        # The next transaction of the same backend, replaying the token and the old settings,
        # with a transaction id of its own: no claim.
        async with conn.transaction():
            assert await conn.fetchval("SELECT pg_backend_pid()") == backend
            await conn.fetchval("SELECT pg_current_xact_id()")
            await conn.execute("SELECT set_config('fgentic_memory.claim', $1, true)", token)
            await conn.execute(FORGE, alice.scope_key, str(alice.generation))
            assert await conn.fetchval("SELECT count(*) FROM readable_memory") == 0
            assert await conn.fetch("SELECT * FROM current_claim()") == []
        assert await sqlstate(_in_transaction(
            conn, conn.execute("SELECT set_config('fgentic_memory.claim', $1, true)", token),
            GATED_INSERT, store_agent(alice), alice.subject_mxid, "replayed", alice.scope_key,
            alice.generation)) == "FG001"
        assert await sqlstate(_in_transaction(
            conn, conn.execute("SELECT set_config('fgentic_memory.claim', $1, true)", token),
            "SELECT admit('load', 1, false)")) == "FG001"
    async with pool.acquire() as owner:
        assert await owner.fetchval(LEDGER, alice.scope_key) == 0
    assert await store.entry_count(alice.scope_key) == 1


async def test_runtime_cannot_reach_the_claim_secret_or_forge_a_token(
        store: MemoryStore, runtime_pool: Any, pool: Any) -> None:
    alice, _ = await scopes(store)
    async with runtime_pool.acquire() as conn:
        for query in ("SELECT * FROM claim_key",
                      "INSERT INTO claim_key (singleton, secret) VALUES (false, '\\x00')",
                      "UPDATE claim_key SET secret = secret",
                      "DELETE FROM claim_key",
                      "SELECT claim_mac(pg_current_xact_id(), 'recall', 1, 'team-a/x')"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(query)
        async with conn.transaction():
            await conn.fetchval("SELECT pg_current_xact_id()")
            await conn.execute(
                "SELECT set_config('fgentic_memory.claim', $1, true)",
                f"recall|{alice.generation}|{alice.scope_key}|{'0' * 64}")
            assert await conn.fetchval("SELECT count(*) FROM readable_memory") == 0
    async with pool.acquire() as owner:
        # The only way in runs as the owner, with a pinned search_path, and not for PUBLIC.
        definer, config, public = await owner.fetchrow(
            "SELECT p.prosecdef, p.proconfig,"
            " has_function_privilege('public', p.oid, 'EXECUTE')"
            " FROM pg_proc p WHERE p.oid = 'fgentic_memory.enter_scope(text, bigint, text,"
            " text, text, text, text)'::regprocedure")
        assert definer and "search_path=pg_catalog, pg_temp" in config and not public


TAMPERINGS = {
    # Each keeps the genuine MAC of the runtime's own claim (Bob's) and changes what it signs,
    # or breaks its shape: the insert gate (sql/0015 verifies it inline) recomputes the MAC
    # from the owner's key for every insert and refuses them all as SCOPE_MISSING.
    "victim's scope": lambda parts, victim: [parts[0], str(victim.generation),
                                              victim.scope_key, parts[3]],
    "other generation": lambda parts, _: [parts[0], str(int(parts[1]) + 1), *parts[2:]],
    "other mode": lambda parts, _: ["recall", *parts[1:]],
    "19-digit generation": lambda parts, _: [parts[0], "1" * 19, *parts[2:]],
    "short mac": lambda parts, _: [*parts[:3], parts[3][:63]],
    "long mac": lambda parts, _: [*parts[:3], parts[3] + "0"],
    "upper-case mac": lambda parts, _: [*parts[:3], parts[3].upper()],
    "zero mac": lambda parts, _: [*parts[:3], "0" * 64],
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
async def test_the_insert_gate_verifies_a_tampered_claim(
        store: MemoryStore, runtime_pool: Any, tampering: str) -> None:
    alice, bob = await scopes(store)
    async with runtime_pool.acquire() as conn:
        for target in (alice, bob):
            tx = conn.transaction()
            await tx.start()
            try:
                await enter(conn, bob, "capture")
                parts = (await conn.fetchval(
                    "SELECT current_setting('fgentic_memory.claim')")).split("|")
                forged = "|".join(TAMPERINGS[tampering](parts, alice))
                await conn.execute("SELECT set_config('fgentic_memory.claim', $1, true)", forged)
                assert await sqlstate(conn.fetchval(
                    GATED_INSERT, store_agent(target), target.subject_mxid, "planted",
                    target.scope_key, int(forged.split("|")[1]) if tampering != (
                        "19-digit generation") else target.generation)) == "FG001"
            finally:
                await tx.rollback()
        # The untampered claim: Bob's own insert passes, an insert into Alice's scope or at
        # another generation does not.
        async with conn.transaction():
            await enter(conn, bob, "capture")
            assert await sqlstate(conn.fetchval(
                GATED_INSERT, store_agent(alice), alice.subject_mxid, "planted",
                alice.scope_key, alice.generation)) == "FG001"
        async with conn.transaction():
            await enter(conn, bob, "capture")
            assert await sqlstate(conn.fetchval(
                GATED_INSERT, store_agent(bob), bob.subject_mxid, "stale", bob.scope_key,
                bob.generation + 1)) == "FG004"
        async with conn.transaction():
            await enter(conn, bob, "capture")
            await conn.fetchval(GATED_INSERT, store_agent(bob), bob.subject_mxid,
                                "Bob is in Porto.", bob.scope_key, bob.generation)
    assert await store.entry_count(alice.scope_key) == 1
    assert await store.entry_count(bob.scope_key) == 2


async def test_the_legitimate_path_still_works(
        store: MemoryStore, runtime_pool: Any, pool: Any) -> None:
    alice, bob = await scopes(store)
    async with runtime_pool.acquire() as conn:
        async with conn.transaction():
            await enter(conn, alice, "capture")
            assert tuple(await conn.fetchrow("SELECT * FROM current_claim()")) == (
                alice.scope_key, alice.generation, "capture")
            await conn.fetchval(GATED_INSERT, store_agent(alice), alice.subject_mxid,
                                "Alice is in Lisbon.", alice.scope_key, alice.generation)
            assert await conn.fetchval("SELECT admit('save', 1, true)") == 59
            assert sorted(await conn.fetch("SELECT content FROM readable_memory")) == sorted(
                [("Alice is in Lisbon.",), ("Alice prefers tea.",)])
        # A second enter in one transaction replaces the claim; reads are read-only work.
        async with conn.transaction(readonly=True):
            await enter(conn, alice, "recall")
            await enter(conn, bob, "recall")
            assert [tuple(r) for r in await conn.fetch(
                "SELECT scope_key FROM readable_memory")] == [(bob.scope_key,)]
    runtime = MemoryStore(runtime_pool)
    assert len(await runtime.list_entries(alice)) == 2
    assert await runtime.readable_count(bob) == 1
    async with pool.acquire() as owner:
        assert await owner.fetchval(LEDGER, alice.scope_key) == 1
