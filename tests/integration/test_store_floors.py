"""Posture floors in the store's fence (issue 38 §7, sql/0023) against a real PostgreSQL.

A floor covers every Agent, one namespace's or one Agent's; the strictest floor over a scope's
Agent wins, and nothing below it (a lower floor, the scope's own posture) loosens it. The
fence itself refuses: the plain enter_scope path, a runtime's own INSERT, the governed save,
the delegated path of the memory API, and a read inside a transaction that entered before the
floor was committed. A purge under a floor erases and verifies every scope it covers.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from fgentic_governance.api.floors import FloorLevel
from fgentic_governance.api.memory import Posture, RecallPolicy
from fgentic_governance.memory import Access, MemoryStore, StoreRefusal
from fgentic_governance.memory.delegated import Caller, DelegatedStore, Fact
from fgentic_governance.memory.floors import Floor
from fgentic_governance.memory.model import DEFAULT_ENVELOPE, Envelope, MemoryType, Operation
from fgentic_governance.offboarding.purge import digest, purge
from fgentic_governance.reasons import Reason
from tests.support.store import (
    ALICE,
    CONTEXT,
    GATED_INSERT,
    enabled,
    enter,
    refused,
    scope_record,
    store_agent,
)

pytestmark = pytest.mark.integration

UNIT = [1.0] + [0.0] * 767
BOB = "@bob:example.org"
DISABLED = Reason.POSTURE_FLOOR_DISABLED
NO_CAPTURE = Reason.POSTURE_FLOOR_CAPTURE_DISABLED


def cluster(posture: Posture, key: str = "incident") -> Floor:
    return Floor(key, FloorLevel.CLUSTER, posture)


def namespace(ns: str, posture: Posture, key: str = "") -> Floor:
    return Floor(key or f"ns-{ns}", FloorLevel.NAMESPACE, posture, ns)


def agent(ns: str, name: str, posture: Posture, key: str = "") -> Floor:
    return Floor(key or f"agent-{ns}-{name}", FloorLevel.AGENT, posture, ns, name)


async def outcome(store: MemoryStore, access: Access) -> tuple[Reason, Reason]:
    """(capture, recall) of ``access``'s scope through the plain fenced path: OK or the
    refusal's code. A saved fact is left behind; the tests count nothing of it."""
    async def code(work: Awaitable[Any]) -> Reason:
        try:
            await work
        except StoreRefusal as refusal:
            return refusal.reason
        return Reason.OK

    return (await code(store.save(access, "A fact.", embedding=UNIT)),
            await code(store.search(access, UNIT)))


async def three_scopes(store: MemoryStore) -> tuple[Access, Access, Access]:
    """Alice with team-a/helper, Alice with team-a/writer, Bob with team-b/helper."""
    helper = await enabled(store)
    writer = await enabled(store, scope_record("team-a/alice-writer", agent_name="writer",
                                               control_room="!w:example.org"))
    other = await enabled(store, scope_record("team-b/bob-helper", subject_mxid=BOB,
                                              agent_namespace="team-b",
                                              control_room="!b:example.org"))
    return helper, writer, other


async def test_the_strictest_floor_wins_and_no_lower_level_loosens_it(
        store: MemoryStore) -> None:
    helper, writer, other = await three_scopes(store)
    ok = (Reason.OK, Reason.OK)
    assert [await outcome(store, a) for a in (helper, writer, other)] == [ok, ok, ok]

    # Cluster-wide: no Agent captures; recall stays.
    await store.set_floor(cluster(Posture.CAPTURE_DISABLED))
    # An Agent floor and the scope's own posture say "enabled": neither loosens it.
    await store.set_floor(agent("team-a", "helper", Posture.ENABLED))
    await store.set_posture(helper.scope_key, Posture.ENABLED)
    capture_only = (NO_CAPTURE, Reason.OK)
    assert [await outcome(store, a) for a in (helper, writer, other)] == [capture_only] * 3

    # A namespace floor tightens team-a to nothing; team-b keeps the cluster's floor.
    await store.set_floor(namespace("team-a", Posture.FULLY_DISABLED))
    # A looser Agent floor below it changes nothing.
    await store.set_floor(agent("team-a", "helper", Posture.CAPTURE_DISABLED))
    off = (DISABLED, DISABLED)
    assert [await outcome(store, a) for a in (helper, writer, other)] == \
        [off, off, capture_only]
    assert await store.floor_posture("team-a", "helper") is Posture.FULLY_DISABLED
    assert await store.floor_posture("team-b", "helper") is Posture.CAPTURE_DISABLED

    # Lifting the namespace floor: the next strictest rules again, at once.
    assert await store.clear_floor("ns-team-a") is True
    assert await store.clear_floor("ns-team-a") is False
    assert [await outcome(store, a) for a in (helper, writer, other)] == [capture_only] * 3
    # Lifting the cluster floor: only the helper's own Agent floor is left.
    await store.clear_floor("incident")
    assert [await outcome(store, a) for a in (helper, writer, other)] == \
        [capture_only, ok, ok]
    assert await store.floor_posture("team-b", "other") is Posture.ENABLED
    # A scope's own stricter posture still counts under a looser floor (its own code).
    await store.set_posture(writer.scope_key, Posture.CAPTURE_DISABLED)
    assert await outcome(store, writer) == (Reason.CAPTURE_DISABLED, Reason.OK)


async def test_a_floor_binds_every_path_inside_the_fence_even_mid_transaction(
        store: MemoryStore, pool: asyncpg.Pool, runtime_pool: asyncpg.Pool,
        delegate_pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    runtime = MemoryStore(runtime_pool)
    api = DelegatedStore(delegate_pool)
    caller = Caller(ALICE, "team-a", "helper")
    await runtime.save(access, "Alice prefers tea.", embedding=UNIT)
    await store.open_lease(access, 120, context_id=CONTEXT)
    assert len(await api.search(caller, UNIT, limit=4, min_score=0.0)) == 1

    async with runtime_pool.acquire() as reader, runtime_pool.acquire() as writer:
        # Two runtime transactions that entered the scope before the floor existed.
        read_tx, write_tx = reader.transaction(), writer.transaction()
        await read_tx.start()
        await write_tx.start()
        await enter(reader, access, "recall")
        await enter(writer, access, "capture")
        visible = "SELECT count(*) FROM readable_memory"
        assert await reader.fetchval(visible) == 1

        await store.set_floor(agent("team-a", "helper", Posture.FULLY_DISABLED))

        # The next statement of each sees the floor: no row, no insert.
        assert await reader.fetchval(visible) == 0
        with pytest.raises(asyncpg.PostgresError) as info:
            await writer.fetchval(GATED_INSERT, store_agent(access), ALICE, "a fact",
                                  access.scope_key, access.generation)
        assert (info.value.sqlstate, str(info.value)) == ("FG040", DISABLED.value)
        await read_tx.rollback()
        await write_tx.rollback()

    # Every entry: the runtime's claim, the governed save, the memory API's delegation.
    async with runtime_pool.acquire() as conn, conn.transaction():
        with pytest.raises(asyncpg.PostgresError) as info:
            await enter(conn, access, "recall")
        assert info.value.sqlstate == "FG040"
    assert await refused(runtime.save(access, "Another fact.")) is DISABLED
    assert await refused(runtime.search(access, UNIT)) is DISABLED
    assert await refused(runtime.list_entries(access)) is DISABLED
    assert await refused(api.search(caller, UNIT, limit=4, min_score=0.0)) is DISABLED
    assert await refused(api.save(caller, [Fact("Another fact.", UNIT)], DEFAULT_ENVELOPE)) \
        is DISABLED
    assert await refused(api.admit(caller, {Operation.SAVE: 1, Operation.EMBEDDING: 1},
                                   explicit=True)) is DISABLED

    # Erasure is never blocked by a floor.
    entry = await pool.fetchval("SELECT id FROM fgentic_memory.memory WHERE scope_key = $1",
                                access.scope_key)
    assert (await runtime.forget_entry(access, entry)).verified

    # A capture_disabled floor: reads resume, writes stay refused, in every path.
    await store.set_floor(agent("team-a", "helper", Posture.CAPTURE_DISABLED))
    assert await runtime.search(access, UNIT) == []
    assert await api.search(caller, UNIT, limit=4, min_score=0.0) == []
    assert await refused(runtime.save(access, "Another fact.")) is NO_CAPTURE
    assert await refused(api.save(caller, [Fact("Another fact.", UNIT)], DEFAULT_ENVELOPE)) \
        is NO_CAPTURE
    async with runtime_pool.acquire() as conn, conn.transaction():
        await enter(conn, access, "recall")  # a recall claim is fine ...
        with pytest.raises(asyncpg.PostgresError) as info:  # ... but it writes nothing.
            await conn.fetchval(GATED_INSERT, store_agent(access), ALICE, "a fact",
                                access.scope_key, access.generation)
        assert str(info.value) == NO_CAPTURE.value


async def test_the_runtime_roles_cannot_read_or_write_floors(
        store: MemoryStore, runtime_pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    await store.set_floor(cluster(Posture.FULLY_DISABLED))
    for role_pool in (runtime_pool, delegate_pool):
        async with role_pool.acquire() as conn:
            for statement in ("SELECT count(*) FROM fgentic_memory.posture_floor",
                              "DELETE FROM fgentic_memory.posture_floor",
                              "SELECT fgentic_memory.floor_posture('team-a', 'helper')"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(statement)


async def test_a_purge_erases_and_verifies_each_scope_under_its_floor_only(
        store: MemoryStore, pool: asyncpg.Pool) -> None:
    helper, writer, other = await three_scopes(store)
    sentinel = f"sentinel{uuid.uuid4().hex}"
    for access, n in ((helper, 3), (writer, 2), (other, 4)):
        for i in range(n):
            await store.save(access, f"{sentinel} fact {i}.", embedding=UNIT)
    floor = namespace("team-a", Posture.FULLY_DISABLED)
    await store.set_floor(floor)
    # A MemoryScope object under the floor that never reached the store: nothing to erase.
    receipts = await purge(store, floor, ["team-a/never-stored", helper.scope_key])

    assert [(r.scope_key, r.verified, r.reason, r.deleted) for r in receipts] == [
        ("team-a/alice-helper", True, Reason.OK, 3),
        ("team-a/alice-writer", True, Reason.OK, 2),
        ("team-a/never-stored", True, Reason.OK, 0),
    ]
    rows = "SELECT count(*) FROM fgentic_memory.memory WHERE scope_key = $1"
    assert [await pool.fetchval(rows, a.scope_key) for a in (helper, writer, other)] == [0, 0, 4]
    # Each erasure fenced its scope: a new generation, consent kept (the floor holds it shut).
    assert receipts[0].generation == helper.generation + 1
    state = await store.scope_state(helper.scope_key)
    assert (state.enabled, state.held, state.entry_count) == (True, False, 0)
    # Content-free: ids, counts, codes and a digest; never a fact.
    wire = repr([r.wire() for r in receipts]) + digest(receipts)
    assert sentinel not in wire and "fact" not in wire
    assert len({r.receipt_id for r in receipts[:2]}) == 2

    # Idempotent: a rerun verifies the same scopes empty again.
    again = await purge(store, floor, [])
    assert [(r.scope_key, r.verified, r.deleted) for r in again] == [
        ("team-a/alice-helper", True, 0), ("team-a/alice-writer", True, 0)]
    # Lifting the floor, the scopes are usable (and empty) at their new generation.
    await store.clear_floor(floor.key)
    state = await store.scope_state(helper.scope_key)
    assert await outcome(store, helper.at(state.consent_generation)) == (Reason.OK, Reason.OK)


async def test_floor_rows_refuse_a_malformed_target(pool: asyncpg.Pool) -> None:
    insert = ("INSERT INTO fgentic_memory.posture_floor (floor_key, level, agent_namespace,"
              " agent_name, posture) VALUES ($1, $2, $3, $4, $5)")
    bad: list[tuple[Any, ...]] = [
        ("a", "cluster", "team-a", "", "fully_disabled"),
        ("b", "namespace", "", "", "fully_disabled"),
        ("c", "namespace", "team-a", "helper", "fully_disabled"),
        ("d", "agent", "team-a", "", "fully_disabled"),
        ("e", "agent", "team-a", "helper", "off"),
        ("f", "galaxy", "", "", "fully_disabled"),
    ]
    for row in bad:
        with pytest.raises(asyncpg.CheckViolationError):
            await pool.execute(insert, *row)


async def test_a_floors_recall_policy_narrows_every_scope_under_it_and_never_widens(
        store: MemoryStore, pool: asyncpg.Pool) -> None:
    helper, writer, other = await three_scopes(store)
    for access in (helper, writer, other):
        for memory_type in (MemoryType.PREFERENCE, MemoryType.FACT):
            await store.save(access, f"A {memory_type.value}.", embedding=UNIT,
                             envelope=Envelope(memory_type=memory_type))

    async def recalled(access: Access) -> list[str]:
        return sorted(e.envelope.memory_type.value for e in await store.search(access, UNIT))

    def admitting(floor: Floor, *types: MemoryType) -> Floor:
        return replace(floor, recall=RecallPolicy(memory_types=list(types)))

    # A cluster floor (posture enabled: recall policy only) admits preferences alone.
    await store.set_floor(admitting(cluster(Posture.ENABLED), MemoryType.PREFERENCE))
    # The helper scope's own policy names both types: it cannot widen the floor's.
    await pool.execute("UPDATE fgentic_memory.scope SET recall_memory_types = $2"
                       " WHERE scope_key = $1", helper.scope_key, ["preference", "fact"])
    assert [await recalled(a) for a in (helper, writer, other)] == [["preference"]] * 3
    assert [tuple(r) for r in await pool.fetch(
        "SELECT * FROM fgentic_memory.recall_withheld($1)", helper.scope_key)] == [
        ("RECALL_TYPE_WITHHELD", 1)]
    # A namespace floor admitting facts alone: team-a's meet is empty, team-b keeps its one.
    await store.set_floor(admitting(namespace("team-a", Posture.ENABLED), MemoryType.FACT))
    assert [await recalled(a) for a in (helper, writer, other)] == [[], [], ["preference"]]
    # Lifted, each scope's own policy (none but the helper's) applies again.
    await store.clear_floor("ns-team-a")
    await store.clear_floor("incident")
    assert [await recalled(a) for a in (helper, writer, other)] == [["fact", "preference"]] * 3
    # A floor's sets are validated in the store as a scope's are.
    await store.set_floor(cluster(Posture.ENABLED))
    with pytest.raises(asyncpg.PostgresError) as info:
        await pool.execute("UPDATE fgentic_memory.posture_floor SET recall_memory_types = $1",
                           ["gossip"])
    assert str(info.value) == Reason.INVALID_SPEC.value
