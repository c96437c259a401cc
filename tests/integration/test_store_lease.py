"""Issue 17 §2 on a real PostgreSQL: delegation leases (sql/0008_lease.sql).

The memory API reaches the store only as the restricted delegate role and only through
``enter_delegation``: (subject, Agent) must have exactly one scope with a live lease at its
current generation. No lease, a closed, expired or pre-withdrawal lease, another subject's or
Agent's lease, or two leased rooms: nothing is read, written or admitted.
"""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from fgentic_governance.memory import Access, MemoryStore, Operation
from fgentic_governance.memory.delegated import Caller, DelegatedStore, Fact
from fgentic_governance.memory.model import DEFAULT_ENVELOPE
from fgentic_governance.reasons import Reason
from tests.support.store import ALICE, CONTEXT, enabled, refused, scope_record

pytestmark = pytest.mark.integration

ALICE_HELPER = Caller(ALICE, "team-a", "helper")
ROWS = "SELECT count(*) FROM fgentic_memory.memory WHERE scope_key = $1"
LEDGER = "SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger WHERE scope_key = $1"


def vector(text: str) -> list[float]:
    """A deterministic unit vector per text (the same text always embeds the same)."""
    seed = hashlib.sha256(text.encode()).digest()
    raw = [((seed[i % 32] + i * 37) % 251) / 251.0 - 0.5 for i in range(768)]
    norm = math.sqrt(sum(v * v for v in raw))
    return [v / norm for v in raw]


def fact(text: str, ttl_days: int | None = None) -> Fact:
    return Fact(text, vector(text), ttl_days)



@pytest.fixture
def delegated(delegate_pool: asyncpg.Pool) -> DelegatedStore:
    return DelegatedStore(delegate_pool)


async def leased(store: MemoryStore, seconds: int = 60) -> Access:
    access = await enabled(store)
    await store.open_lease(access, seconds, context_id=CONTEXT)
    return access


async def test_without_a_lease_nothing_is_written_read_or_admitted(
        store: MemoryStore, delegated: DelegatedStore, pool: asyncpg.Pool) -> None:
    access = await enabled(store)  # consent granted, but no delegation is open
    assert await refused(delegated.save(ALICE_HELPER, [fact("Alice likes tea.")],
                                        DEFAULT_ENVELOPE)) is Reason.LEASE_MISSING
    assert await refused(delegated.search(ALICE_HELPER, vector("tea"), limit=5,
                                          min_score=0.0)) is Reason.LEASE_MISSING
    assert await refused(delegated.admit(ALICE_HELPER, {Operation.SAVE: 1})) \
        is Reason.LEASE_MISSING
    assert await pool.fetchval(ROWS, access.scope_key) == 0
    assert await pool.fetchval(LEDGER, access.scope_key) == 0


async def test_inside_a_lease_the_subject_saves_and_finds_only_its_own_facts(
        store: MemoryStore, delegated: DelegatedStore) -> None:
    await leased(store)
    bob = scope_record("team-a/bob-helper", subject_mxid="@bob:example.org",
                       control_room="!bob-control:example.org")
    await store.ensure_scope(bob)
    bob_access = Access.for_scope(bob, await store.grant(bob.scope_key))
    await store.open_lease(bob_access, 60, context_id=CONTEXT)
    bob_caller = Caller("@bob:example.org", "team-a", "helper")
    [alice_id] = await delegated.save(ALICE_HELPER, [fact("Alice likes tea.")], DEFAULT_ENVELOPE)
    await delegated.save(bob_caller, [fact("Bob likes coffee.")], DEFAULT_ENVELOPE)
    found = await delegated.search(ALICE_HELPER, vector("Alice likes tea."), limit=5,
                                   min_score=-1.0)
    assert [(f.id, f.content) for f in found] == [(alice_id, "Alice likes tea.")]
    assert found[0].score == pytest.approx(1.0, abs=1e-5)
    # min_score is honoured: an unrelated vector scores far below 0.99.
    assert await delegated.search(ALICE_HELPER, vector("unrelated"), limit=5,
                                  min_score=0.99) == []
    # Another Agent of the same subject has no lease at all.
    other = Caller(ALICE, "team-a", "other-agent")
    assert await refused(delegated.search(other, vector("x"), limit=5, min_score=0.0)) \
        is Reason.LEASE_MISSING


async def test_withdrawal_ends_every_lease_and_a_new_grant_does_not_revive_it(
        store: MemoryStore, delegated: DelegatedStore, pool: asyncpg.Pool) -> None:
    access = await leased(store)
    await delegated.save(ALICE_HELPER, [fact("Alice likes tea.")], DEFAULT_ENVELOPE)
    receipt = await store.withdraw(access.scope_key)
    assert receipt.verified
    assert await refused(delegated.save(ALICE_HELPER, [fact("again")], DEFAULT_ENVELOPE)) \
        is Reason.LEASE_MISSING
    await store.grant(access.scope_key)  # consent given again: the old lease stays dead
    assert await refused(delegated.save(ALICE_HELPER, [fact("again")], DEFAULT_ENVELOPE)) \
        is Reason.LEASE_MISSING
    assert await pool.fetchval(ROWS, access.scope_key) == 0


async def test_forget_all_ends_the_lease_too(store: MemoryStore,
                                             delegated: DelegatedStore) -> None:
    access = await leased(store)
    assert (await store.erase_scope(access.scope_key)).verified
    assert await refused(delegated.search(ALICE_HELPER, vector("x"), limit=5,
                                          min_score=0.0)) is Reason.LEASE_MISSING


async def test_closed_and_expired_leases_are_dead(
        store: MemoryStore, delegated: DelegatedStore, pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    lease = await store.open_lease(access, 60, context_id=CONTEXT)
    assert await store.close_lease(access.scope_key, lease.id) is True
    assert await store.close_lease(access.scope_key, lease.id) is False  # idempotent
    assert await refused(delegated.admit(ALICE_HELPER, {Operation.LOAD: 1})) \
        is Reason.LEASE_MISSING
    lease = await store.open_lease(access, 60, context_id=CONTEXT)
    await delegated.admit(ALICE_HELPER, {Operation.LOAD: 1})
    await pool.execute(
        "UPDATE fgentic_memory.delegation_lease SET opened_at = now() - interval '5 minutes',"
        " expires_at = now() - interval '1 second' WHERE lease_id = $1::uuid", lease.id)
    assert await refused(delegated.admit(ALICE_HELPER, {Operation.LOAD: 1})) \
        is Reason.LEASE_MISSING
    assert await store.cleanup_expired() == 0
    # The expired lease is pruned; the closed one stays until its own expiry, so that its
    # delegation id is still known to a replayed open (sql/0010).
    assert await pool.fetchval("SELECT count(*) FROM fgentic_memory.delegation_lease") == 1


async def test_a_lease_is_at_most_540_seconds_and_only_for_the_exact_triple(
        store: MemoryStore) -> None:
    access = await enabled(store)
    assert await refused(store.open_lease(access, 541, context_id=CONTEXT)) is Reason.INVALID_SPEC
    assert await refused(store.open_lease(access, 0, context_id=CONTEXT)) is Reason.INVALID_SPEC
    lease = await store.open_lease(access, 540, context_id=CONTEXT)
    assert lease.expires_at <= datetime.now(UTC) + timedelta(seconds=541)
    wrong_room = Access(access.scope_key, access.generation, access.subject_mxid,
                        access.agent_namespace, access.agent_name, "!elsewhere:example.org")
    assert await refused(store.open_lease(wrong_room, 60, context_id=CONTEXT)) \
        is Reason.SCOPE_MISSING
    assert await refused(store.open_lease(access.at(access.generation + 1), 60,
                                          context_id=CONTEXT)) \
        is Reason.STALE_GENERATION
    await store.withdraw(access.scope_key)
    assert await refused(store.open_lease(access.at(access.generation + 1), 60,
                                          context_id=CONTEXT)) \
        is Reason.SCOPE_DISABLED


async def test_two_leased_rooms_for_one_subject_and_agent_are_ambiguous(
        store: MemoryStore, delegated: DelegatedStore) -> None:
    await leased(store)
    second = scope_record("team-a/alice-helper-2", control_room="!alice-two:example.org")
    await store.ensure_scope(second)
    await store.open_lease(Access.for_scope(second, await store.grant(second.scope_key)), 60,
                           context_id=CONTEXT)
    assert await refused(delegated.save(ALICE_HELPER, [fact("which room?")], DEFAULT_ENVELOPE)) \
        is Reason.SCOPE_AMBIGUOUS


async def test_the_runtime_role_cannot_open_or_forge_a_lease(
        store: MemoryStore, runtime_pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    async with runtime_pool.acquire() as conn:
        for sql, args in (
            ("SELECT * FROM fgentic_memory.open_lease($1, $2, $3, $4, $5, $6, 60, NULL, $7)",
             (*access.params(), CONTEXT)),
            ("INSERT INTO fgentic_memory.delegation_lease (scope_key, consent_generation,"
             " expires_at) VALUES ($1, $2, now() + interval '1 minute')",
             (access.scope_key, access.generation)),
            ("UPDATE fgentic_memory.delegation_lease SET closed_at = NULL", ()),
            ("SELECT fgentic_memory.close_lease(gen_random_uuid(), $1)", (access.scope_key,)),
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(sql, *args)


async def test_ttl_days_shortens_retention_and_never_lengthens_it(
        store: MemoryStore, delegated: DelegatedStore, pool: asyncpg.Pool) -> None:
    access = await leased(store)  # max retention 7 days
    await delegated.save(ALICE_HELPER, [fact("short", 1), fact("long", 400), fact("default")],
                         DEFAULT_ENVELOPE)
    rows = await pool.fetch("SELECT content, expires_at - created_at AS kept"
                            " FROM fgentic_memory.memory WHERE scope_key = $1",
                            access.scope_key)
    kept = {r["content"]: r["kept"] for r in rows}
    assert kept["short"] == pytest.approx(timedelta(days=1), abs=timedelta(seconds=5))
    assert kept["long"] == pytest.approx(timedelta(days=7), abs=timedelta(seconds=5))
    assert kept["default"] == pytest.approx(timedelta(days=7), abs=timedelta(seconds=5))


async def test_a_batch_is_stored_whole_or_not_at_all(
        store: MemoryStore, delegated: DelegatedStore, pool: asyncpg.Pool) -> None:
    access = await leased(store)
    batch = [fact("Alice likes tea."), fact("password: hunter2hunter2")]
    assert await refused(delegated.save(ALICE_HELPER, batch, DEFAULT_ENVELOPE)) \
        is Reason.CREDENTIAL_CONTENT
    assert await refused(delegated.save(ALICE_HELPER, [fact("x" * 513)], DEFAULT_ENVELOPE)) \
        is Reason.FACT_TOO_LARGE
    assert await refused(delegated.save(ALICE_HELPER, [fact(str(i)) for i in range(51)],
                                        DEFAULT_ENVELOPE)) is Reason.INVALID_SPEC
    assert await pool.fetchval(ROWS, access.scope_key) == 0


async def test_cap_and_cost_ceiling_hold_for_delegated_calls(
        store: MemoryStore, delegated: DelegatedStore, pool: asyncpg.Pool) -> None:
    record = scope_record(entry_cap=2, hourly_operation_ceiling=5)
    await store.ensure_scope(record)
    access = Access.for_scope(record, await store.grant(record.scope_key))
    await store.open_lease(access, 60, context_id=CONTEXT)
    assert await refused(delegated.save(ALICE_HELPER, [fact("a"), fact("b"), fact("c")],
                                        DEFAULT_ENVELOPE)) is Reason.ENTRY_CAP_REACHED
    await delegated.admit(ALICE_HELPER, {Operation.SAVE: 2, Operation.EMBEDDING: 2})
    assert await pool.fetchval(LEDGER, access.scope_key) == 4
    assert await refused(delegated.admit(ALICE_HELPER, {Operation.LOAD: 1,
                                                        Operation.EMBEDDING: 1})) \
        is Reason.COST_CEILING_REACHED
    assert await pool.fetchval(LEDGER, access.scope_key) == 4  # all or nothing
