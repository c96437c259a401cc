"""Issue 14, findings 2 and 5, on a real PostgreSQL: bounded waits, the hold, superseded_by.

A runtime transaction that holds a lock (an uncommitted insert holds the scope row; SELECT ...
FOR UPDATE holds memory rows) used to block the erasure fence forever. Now the runtime's own
bounds release the lock first and the fence wins; a runtime that loosened its bounds makes the
fence fail with STORE_LOCK_TIMEOUT, and the scope is held (nothing readable or writable) until
a later erasure is verified.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from fgentic_governance.api.memory import Posture
from fgentic_governance.consent import flow
from fgentic_governance.consent.gates import Verdict
from fgentic_governance.memory import (
    Access,
    MemoryStore,
    ScopeRecord,
    StoreRefusal,
    bounds,
)
from fgentic_governance.reasons import Reason
from tests.support.store import (
    GATED_INSERT,
    RUNTIME_SETTINGS,
    defeat_bounds,
    enter,
    migrated_pool,
    open_insert,
    store_agent,
)

pytestmark = pytest.mark.integration
ALICE, BOB = "@alice:fgentic.local", "@bob:fgentic.local"
ROOM = "!alice-control:fgentic.local"
# Longer than any bound below (runtime 5 s, pool lock wait 8 s), so a hang fails the test
# instead of hanging the suite; on the code before the fix these waits never ended.
HANG = 30.0


def record(key: str = "team-a/alice-helper", subject: str = ALICE,
           room: str = ROOM) -> ScopeRecord:
    return ScopeRecord(scope_key=key, subject_mxid=subject, origin_kind="native-local",
                       agent_namespace="team-a", agent_name=key.split("/")[1],
                       control_room=room)


@pytest.fixture
async def bounded_store(pg_dsn: str) -> AsyncIterator[MemoryStore]:
    """The operator's store: its pool has the operator's bounds (bounds.POOL)."""
    pool = await migrated_pool(pg_dsn, **bounds.pool_kwargs(min_size=1, max_size=8))
    yield MemoryStore(pool)
    await pool.close()


@pytest.fixture
async def runtime_conn(pg_dsn: str, bounded_store: MemoryStore) -> AsyncIterator[Any]:
    """A runtime connection opened after the migration, so the database defaults apply."""
    conn = await asyncpg.connect(pg_dsn, server_settings=RUNTIME_SETTINGS)
    yield conn
    if not conn.is_closed():
        await conn.close()


async def granted(store: MemoryStore, rec: ScopeRecord | None = None) -> Access:
    rec = rec or record()
    await store.ensure_scope(rec)
    return Access.for_scope(rec, await store.grant(rec.scope_key))


async def refusal(work: Any) -> Reason:
    with pytest.raises(StoreRefusal) as info:
        await work
    return info.value.reason


async def test_database_defaults_bound_the_runtime(runtime_conn: Any) -> None:
    for name, value in bounds.RUNTIME.items():
        assert await runtime_conn.fetchval(f"SHOW {name}") == value


async def test_gates_bound_a_runtime_that_loosened_its_session(
        bounded_store: MemoryStore, runtime_conn: Any) -> None:
    access = await granted(bounded_store)
    for name in bounds.RUNTIME:
        await runtime_conn.execute(f"SET {name} = 0")
    async with runtime_conn.transaction():
        await enter(runtime_conn, access, "recall")
        for name, value in bounds.RUNTIME.items():
            assert await runtime_conn.fetchval(f"SHOW {name}") == value


@pytest.mark.parametrize("hold", ["uncommitted insert", "select for update"])
async def test_withdrawal_outlasts_a_stuck_runtime_transaction(
        bounded_store: MemoryStore, runtime_conn: Any, hold: str) -> None:
    access = await granted(bounded_store)
    await bounded_store.save(access, "an older fact")
    if hold == "uncommitted insert":
        await open_insert(runtime_conn, access)
    else:
        tx = runtime_conn.transaction()
        await tx.start()
        await runtime_conn.fetch(
            "SELECT id FROM memory WHERE scope_key = $1 FOR UPDATE", access.scope_key)
    started = time.monotonic()
    receipt = await asyncio.wait_for(bounded_store.withdraw(access.scope_key), HANG)
    took = time.monotonic() - started
    assert receipt.verified and receipt.reason is Reason.OK
    assert await bounded_store.entry_count(access.scope_key) == 0
    state = await bounded_store.scope_state(access.scope_key)
    assert not state.enabled and not state.held
    # The runtime's idle-in-transaction bound ended its session (that released the lock).
    assert took >= 1.0, "the fence did not wait for the runtime at all"
    with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
        await runtime_conn.fetchval("SELECT 1")


async def test_fence_that_cannot_get_its_lock_fails_closed_then_completes(
        bounded_store: MemoryStore, runtime_conn: Any, pg_dsn: str) -> None:
    access = await granted(bounded_store)
    await bounded_store.save(access, "an older fact")
    tx = await open_insert(runtime_conn, access)
    # A runtime that defeats its own bounds (inside the transaction, after the gate).
    await defeat_bounds(runtime_conn)

    assert await asyncio.wait_for(refusal(bounded_store.withdraw(access.scope_key)), HANG) is (
        Reason.STORE_LOCK_TIMEOUT)
    # Closed although the fence never ran: held, nothing readable, writable or admissible.
    state = await bounded_store.scope_state(access.scope_key)
    assert state.held and state.enabled  # The scope row itself is still locked.
    other = await asyncpg.connect(pg_dsn, server_settings=RUNTIME_SETTINGS)
    try:
        async with other.transaction():
            with pytest.raises(asyncpg.PostgresError) as info:
                await enter(other, access, "recall")
        assert info.value.sqlstate == "FG002"  # SCOPE_DISABLED
        with pytest.raises(asyncpg.PostgresError) as info:
            await other.fetchval(GATED_INSERT, store_agent(access), access.subject_mxid,
                                 "another fact", access.scope_key, access.generation)
        # Without the claim enter_scope refused above, a write is refused first (sql/0007).
        assert info.value.sqlstate == "FG001"  # SCOPE_MISSING
        async with other.transaction():
            await other.execute(
                "SELECT set_config('fgentic_memory.scope_key', $1, true),"
                " set_config('fgentic_memory.generation', $2, true)",
                access.scope_key, str(access.generation))
            assert await other.fetchval("SELECT count(*) FROM readable_memory") == 0
    finally:
        await other.close()
    assert await refusal(bounded_store.search(access, [0.1] * 768)) is Reason.SCOPE_DISABLED

    # The stuck writer commits after all: the retried erasure removes its row too.
    await tx.commit()
    outcome = await flow.reconcile(bounded_store, record(), Verdict(Posture.FULLY_DISABLED,
                                                                    Reason.CONSENT_WITHDRAWN))
    assert outcome.erasure is not None and outcome.erasure.verified
    assert outcome.erasure.deleted == 2
    state = await bounded_store.scope_state(access.scope_key)
    assert not state.enabled and not state.held and state.entry_count == 0


async def test_held_scope_with_standing_consent_is_erased_then_reopened(
        bounded_store: MemoryStore, runtime_conn: Any) -> None:
    """A control-API forget-all whose fence ran out: the operator finishes it, consent stands."""
    access = await granted(bounded_store)
    await bounded_store.save(access, "an older fact")
    tx = await open_insert(runtime_conn, access)
    await defeat_bounds(runtime_conn)
    assert await asyncio.wait_for(refusal(bounded_store.erase_scope(access.scope_key)), HANG) is (
        Reason.STORE_LOCK_TIMEOUT)
    await tx.rollback()
    outcome = await flow.reconcile(bounded_store, record(),
                                   Verdict(Posture.ENABLED, Reason.OK), access.generation)
    state = await bounded_store.scope_state(access.scope_key)
    assert state.enabled and not state.held and state.entry_count == 0
    assert outcome.generation == state.consent_generation > access.generation
    fresh = Access.for_scope(record(), state.consent_generation)
    await bounded_store.save(fresh, "a new fact")
    assert await bounded_store.readable_count(fresh) == 1


async def test_erasures_leave_connections_for_other_users(
        pg_dsn: str, bounded_store: MemoryStore, runtime_conn: Any) -> None:
    """The control API's store: 4 parked erasures of one scope, another user still served."""
    pool = await asyncpg.create_pool(pg_dsn, **bounds.pool_kwargs(min_size=0, max_size=8))
    api_store = MemoryStore(pool, erasure_slots=4)
    try:
        alice = await granted(bounded_store)
        bob = await granted(bounded_store,
                            record("team-a/bob-helper", BOB, "!bob-control:fgentic.local"))
        await bounded_store.save(bob, "bob's fact")
        tx = await open_insert(runtime_conn, alice)
        await defeat_bounds(runtime_conn)
        erasures = [asyncio.create_task(api_store.erase_scope(alice.scope_key))
                    for _ in range(6)]
        await asyncio.sleep(1.0)
        started = time.monotonic()
        assert await asyncio.wait_for(api_store.readable_count(bob), HANG) == 1
        assert time.monotonic() - started < bounds.ACQUIRE_SECONDS
        outcomes = await asyncio.wait_for(
            asyncio.gather(*erasures, return_exceptions=True), HANG)
        reasons = {o.reason for o in outcomes if isinstance(o, StoreRefusal)}
        assert reasons <= {Reason.STORE_LOCK_TIMEOUT, Reason.STORE_UNAVAILABLE}
        assert all(isinstance(o, StoreRefusal) for o in outcomes)
        await tx.rollback()
    finally:
        await pool.close()


# -- finding 5: superseded_by -------------------------------------------------------------


async def test_superseded_by_is_an_id_of_the_same_scope(
        bounded_store: MemoryStore, runtime_conn: Any) -> None:
    alice = await granted(bounded_store)
    bob = await granted(bounded_store,
                        record("team-a/bob-helper", BOB, "!bob-control:fgentic.local"))
    first = await bounded_store.save(alice, "first fact")
    second = await bounded_store.save(alice, "second fact")
    foreign = await bounded_store.save(bob, "bob's fact")
    update = "UPDATE memory SET superseded_by = $1 WHERE id = $2"

    async def refused(value: str) -> str:
        with pytest.raises(asyncpg.PostgresError) as info:
            await runtime_conn.execute(update, value, first)
        return str(info.value.sqlstate)

    assert await refused("password=" + "x" * 100_000) == "FG012"  # INVALID_SPEC
    assert await refused(foreign) == "FG012"  # another scope's row
    assert await refused(first) == "FG012"  # itself
    assert await refused("00000000-0000-0000-0000-000000000000") == "FG012"  # no such row
    async with runtime_conn.transaction():  # setting it is a write: it needs the claim
        await enter(runtime_conn, alice)
        await runtime_conn.execute(update, second, first)
    assert await runtime_conn.fetchval(
        "SELECT count(*) FROM memory WHERE id = $1", first) == 1
    await runtime_conn.execute(update, None, first)  # Clearing it is always allowed.
    # Setting it is a write: a withdrawn scope refuses it.
    await bounded_store.withdraw(bob.scope_key)
    await bounded_store.withdraw(alice.scope_key)
    assert await bounded_store.entry_count(alice.scope_key) == 0
    rec = record()
    await bounded_store.ensure_scope(rec)
    again = Access.for_scope(rec, await bounded_store.grant(rec.scope_key))
    kept = await bounded_store.save(again, "kept fact")
    newer = await bounded_store.save(again, "newer fact")
    await bounded_store.set_posture(rec.scope_key, Posture.CAPTURE_DISABLED)
    with pytest.raises(asyncpg.PostgresError) as info:
        async with runtime_conn.transaction():
            await enter(runtime_conn, again, "recall")
            await runtime_conn.execute(update, newer, kept)
    assert info.value.sqlstate == "FG003"  # CAPTURE_DISABLED


# -- finding 4: the pinned settings, as the operator's StoreReady check reads them ---------


async def test_pinned_settings_are_verified_on_the_live_server(pg_dsn: str,
                                                               bounded_store: MemoryStore) -> None:
    database = pg_dsn.rsplit("/", 1)[1]
    login = f"rt_{database[-8:]}"
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await bounds.unsafe_settings(conn) == []
        # A fresh session of this database logs FATAL and above only.
        for name, value in bounds.LOGGING.items():
            assert await conn.fetchval(f"SHOW {name}") == value, name
        await conn.execute(f'ALTER DATABASE "{database}" RESET log_statement')
        assert await bounds.unsafe_settings(conn) == ["log_statement"]
        await conn.execute(f"ALTER DATABASE \"{database}\" SET log_statement = 'none'")
        # A runtime login role may not override a pin, whatever the value.
        await conn.execute(f"CREATE ROLE {login} LOGIN IN ROLE fgentic_memory_runtime")
        await conn.execute(f'ALTER ROLE {login} IN DATABASE "{database}"'
                           " SET idle_in_transaction_session_timeout = 0")
        assert await bounds.unsafe_settings(conn) == ["idle_in_transaction_session_timeout"]
    finally:
        await conn.execute(f"DROP ROLE IF EXISTS {login}")
        await conn.close()
