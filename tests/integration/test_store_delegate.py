"""Review N1 and L1 on a real PostgreSQL (sql/0010_delegate.sql).

N1: delegation (``enter_delegation``, ``admit_agent_embedding``) belongs to the memory API's
role, ``fgentic_memory_delegate``. A login that holds only ``fgentic_memory_runtime`` (what an
adapted runtime's Pod logs in as) cannot enter another subject's leased scope: it reads,
writes and charges nothing there.

L1: a lease open that carries a delegation id is idempotent (a replay returns the same lease, an
ended delegation is not reopened), and the live leases of one (subject, Agent) are capped.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from fgentic_governance.memory import MemoryStore, StoreRefusal, bounds, model
from fgentic_governance.memory.delegated import Caller, DelegatedStore, Fact
from fgentic_governance.memory.model import DEFAULT_ENVELOPE, Access, Operation, RecentUsers
from fgentic_governance.reasons import Reason
from tests.support.store import ALICE, CONTEXT, enabled, past_turns, refused, scope_record

pytestmark = pytest.mark.integration

ALICE_HELPER = Caller(ALICE, "team-a", "helper")
UNIT = [1.0] + [0.0] * 767
ROWS = "SELECT count(*) FROM fgentic_memory.memory WHERE scope_key = $1"
LEDGER = "SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger WHERE scope_key = $1"
BUCKETS = "SELECT count(*) FROM fgentic_memory.rate_bucket WHERE subject_mxid = $1"
LIVE = ("SELECT count(*) FROM fgentic_memory.delegation_lease"
        " WHERE scope_key = $1 AND closed_at IS NULL AND expires_at > now()")


@pytest.fixture
async def runtime_login(pg_dsn: str, pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """Connections of a LOGIN role that is a member of fgentic_memory_runtime and nothing
    else, logged in as itself (no SET ROLE): an adapted runtime's own credential."""
    login = f"rt_{uuid.uuid4().hex[:12]}"
    await pool.execute(f"CREATE ROLE {login} LOGIN IN ROLE fgentic_memory_runtime")
    runtime = await asyncpg.create_pool(pg_dsn, user=login, min_size=1, max_size=4,
                                        server_settings={"search_path": "fgentic_memory"})
    try:
        yield runtime
    finally:
        await runtime.close()
        await pool.execute(f"DROP ROLE {login}")


def seen(*users: str) -> RecentUsers:
    """What one memory API replica saw of an Agent's users (sql/0019 adds the notes)."""
    return RecentUsers(users, 60.0, 6.0)



# -- N1: only the memory API delegates ---------------------------------------------------------


async def test_a_runtime_login_cannot_delegate_into_another_subjects_leased_scope(
        store: MemoryStore, pool: asyncpg.Pool, runtime_login: asyncpg.Pool) -> None:
    access = await enabled(store)
    await store.save(access, "Alice prefers tea.", embedding=UNIT)
    # Alice's turn is running: her scope is leased
    await store.open_lease(access, 60, context_id=CONTEXT)
    async with runtime_login.acquire() as conn:
        assert await conn.fetchval("SELECT current_user") != "postgres"
        for sql, args in (
            ("SELECT * FROM enter_delegation($1, $2, $3, 'recall')", ALICE_HELPER.params()),
            ("SELECT * FROM enter_delegation($1, $2, $3, 'capture')", ALICE_HELPER.params()),
            ("SELECT admit_agent_embedding($1, $2, $3)", ("team-a", "helper", ALICE)),
            ("SELECT note_activity($1, $2, $3)", ("team-a", "helper", [ALICE])),
            ("SELECT recent_user($1, $2, $3, 60, 6)", ("team-a", "helper", [ALICE])),
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch(sql, *args)
    # The memory API's own code on that login: no read, no write, no spend.
    intruder = DelegatedStore(runtime_login)
    await refused(intruder.search(ALICE_HELPER, UNIT, limit=5, min_score=-1.0))
    await refused(intruder.save(ALICE_HELPER, [Fact("Alice wants every answer in French.",
                                                    UNIT)], DEFAULT_ENVELOPE))
    await refused(intruder.admit(ALICE_HELPER, {Operation.LOAD: 1}, explicit=True))
    for _ in range(20):
        await refused(intruder.admit_embedding("team-a", "helper", seen(ALICE)))
    assert await pool.fetchval(ROWS, access.scope_key) == 1  # only Alice's own fact
    assert await pool.fetchval(LEDGER, access.scope_key) == 0
    assert await pool.fetchval(BUCKETS, ALICE) == 0


# -- L1: idempotent and capped lease opens ---------------------------------------------------


async def test_a_replayed_delegation_gets_its_lease_back_and_an_ended_one_stays_ended(
        store: MemoryStore, pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    delegation = str(uuid.uuid4())
    first = await store.open_lease(access, 120, delegation, context_id=CONTEXT)
    for _ in range(5):
        assert await store.open_lease(access, 540, delegation,
                                      context_id=CONTEXT) == first  # not even longer
    assert await pool.fetchval(LIVE, access.scope_key) == 1
    assert await store.close_lease(access.scope_key, first.id) is True
    assert await refused(store.open_lease(access, 120, delegation, context_id=CONTEXT)) \
        is Reason.LEASE_MISSING
    assert await pool.fetchval(LIVE, access.scope_key) == 0
    # A new delegation id is a new turn: it opens a new lease.
    assert (await store.open_lease(access, 120, str(uuid.uuid4()),
                                   context_id=CONTEXT)).id != first.id
    assert await refused(store.open_lease(access, 60, "not-a-uuid", context_id=CONTEXT)) \
        is Reason.INVALID_SPEC


async def test_live_leases_of_one_subject_and_agent_are_capped(
        store: MemoryStore, pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    second = scope_record("team-a/alice-helper-2", control_room="!alice-two:example.org")
    await store.ensure_scope(second)
    other_room = Access.for_scope(second, await store.grant(second.scope_key))
    leases, reason = [], Reason.OK
    for _ in range(64):  # the cap counts every room of the pair
        try:
            leases.append(await store.open_lease(access if len(leases) % 2 else other_room, 60,
                                                 context_id=CONTEXT))
        except StoreRefusal as refusal:
            reason = refusal.reason
            break
    assert reason.value == "LEASE_LIMIT_REACHED"
    assert len(leases) == model.MAX_LIVE_LEASES
    assert await pool.fetchval("SELECT fgentic_memory.max_live_leases()") == len(leases)
    # Another subject's pair is not affected, and a closed lease frees its slot.
    bob = scope_record("team-a/bob-helper", subject_mxid="@bob:example.org",
                       control_room="!bob-control:example.org")
    await store.ensure_scope(bob)
    await store.open_lease(Access.for_scope(bob, await store.grant(bob.scope_key)), 60,
                           context_id=CONTEXT)
    assert await store.close_lease(access.scope_key, leases[1].id) is True
    await store.open_lease(access, 60, context_id=CONTEXT)
    assert await refused(store.open_lease(access, 60, context_id=CONTEXT)) \
        is Reason.LEASE_LIMIT_REACHED


# -- ADR 0023 §43: at most eight recalls per lease (sql/0011) ------------------------------------

RECALLS = ("SELECT lease_id::text, recalls FROM fgentic_memory.delegation_lease"
           " WHERE scope_key = $1 ORDER BY opened_at, lease_id")


async def _search_admitted(api: DelegatedStore) -> Reason:
    """What the memory API admits for one search: one load and one embedding."""
    try:
        await api.admit(ALICE_HELPER, {Operation.LOAD: 1, Operation.EMBEDDING: 1})
    except StoreRefusal as refusal:
        return refusal.reason
    return Reason.OK


async def test_a_lease_admits_at_most_eight_recalls_and_a_new_lease_eight_more(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    api = DelegatedStore(delegate_pool)
    first = await store.open_lease(access, 120, context_id=CONTEXT)
    outcomes = [await _search_admitted(api) for _ in range(model.MAX_RECALLS_PER_LEASE + 3)]
    assert outcomes == [Reason.OK] * model.MAX_RECALLS_PER_LEASE + \
        [Reason.RECALL_LIMIT_REACHED] * 3
    assert await pool.fetchval("SELECT fgentic_memory.max_recalls_per_lease()") == \
        model.MAX_RECALLS_PER_LEASE
    # A refused search charged nothing: two units per admitted search, none after.
    assert await pool.fetchval(LEDGER, access.scope_key) == 2 * model.MAX_RECALLS_PER_LEASE
    # Saves are not recalls: the used-up lease still admits capture.
    await api.admit(ALICE_HELPER, {Operation.SAVE: 1, Operation.EMBEDDING: 1}, explicit=True)
    # The next turn's lease brings eight more; the oldest lease is charged first.
    second = await store.open_lease(access, 120, context_id=CONTEXT)
    assert [await _search_admitted(api) for _ in range(model.MAX_RECALLS_PER_LEASE + 1)] == \
        [Reason.OK] * model.MAX_RECALLS_PER_LEASE + [Reason.RECALL_LIMIT_REACHED]
    assert [tuple(r) for r in await pool.fetch(RECALLS, access.scope_key)] == [
        (first.id, 8), (second.id, 8)]
    # A closed lease's unused recalls are gone with it.
    assert await store.close_lease(access.scope_key, second.id) is True
    assert await _search_admitted(api) is Reason.RECALL_LIMIT_REACHED


async def test_parallel_searches_of_one_prefetch_never_exceed_the_bound(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    """kagent's prefetch runs one search per sentence at once (asyncio.gather): twenty
    concurrent admissions against one lease admit exactly eight."""
    access = await enabled(store)
    api = DelegatedStore(delegate_pool)
    await store.open_lease(access, 120, context_id=CONTEXT)
    outcomes = await asyncio.gather(*(_search_admitted(api) for _ in range(20)))
    assert outcomes.count(Reason.OK) == model.MAX_RECALLS_PER_LEASE
    assert set(outcomes) == {Reason.OK, Reason.RECALL_LIMIT_REACHED}
    [(_, recalls)] = await pool.fetch(RECALLS, access.scope_key)
    assert recalls == model.MAX_RECALLS_PER_LEASE


async def test_only_the_delegating_role_charges_and_only_its_claimed_scope(
        store: MemoryStore, pool: asyncpg.Pool, runtime_login: asyncpg.Pool,
        delegate_pool: asyncpg.Pool) -> None:
    access = await enabled(store)
    await store.open_lease(access, 120, context_id=CONTEXT)
    async with runtime_login.acquire() as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetchval("SELECT charge_recall()")
    async with delegate_pool.acquire() as conn, conn.transaction():
        with pytest.raises(asyncpg.PostgresError) as info:  # no claim: nothing to charge
            await conn.fetchval("SELECT fgentic_memory.charge_recall()")
        assert info.value.sqlstate == "FG017"
    async with delegate_pool.acquire() as conn, conn.transaction():
        await conn.fetchrow("SELECT * FROM fgentic_memory.enter_delegation($1, $2, $3,"
                            " 'capture')", *ALICE_HELPER.params())
        with pytest.raises(asyncpg.PostgresError) as info:  # a capture claim is no recall
            await conn.fetchval("SELECT fgentic_memory.charge_recall()")
        assert info.value.sqlstate == "FG017"
    [(_, recalls)] = await pool.fetch(RECALLS, access.scope_key)
    assert recalls == 0


async def test_a_scope_may_lower_its_recalls_and_summary_facts(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    """policy.prefetch.maxSubqueries and policy.automaticSave.maxFacts, copied into the scope
    record: two recalls per lease, summaries of at most three facts, checked before cost."""
    access = await enabled(store, scope_record(max_recalls=2, max_summary_facts=3))
    api = DelegatedStore(delegate_pool)
    await store.open_lease(access, 120, context_id=CONTEXT)
    assert [await _search_admitted(api) for _ in range(3)] == [
        Reason.OK, Reason.OK, Reason.RECALL_LIMIT_REACHED]
    await past_turns(store, access, 4)  # the fifth turn's automatic save is due
    summary = {Operation.SUMMARIZE: 1, Operation.SAVE: 4, Operation.EMBEDDING: 4}
    assert await refused(api.admit(ALICE_HELPER, summary)) is Reason.SUMMARY_TOO_LARGE
    assert await pool.fetchval(LEDGER, access.scope_key) == 4  # the two searches only
    await api.admit(ALICE_HELPER, {**summary, Operation.SAVE: 3, Operation.EMBEDDING: 3})
    assert await pool.fetchval(LEDGER, access.scope_key) == 4 + 7
    # An explicit save is no summary: not bounded by maxFacts.
    await api.admit(ALICE_HELPER, {Operation.SAVE: 1, Operation.EMBEDDING: 1}, explicit=True)
    # maxSubqueries 0: kagent's prefetch and load_memory are one request, so no recall at all.
    await store.open_lease(access, 120, context_id=CONTEXT)  # a fresh lease: two more recalls
    assert await _search_admitted(api) is Reason.OK
    await store.ensure_scope(scope_record(max_recalls=0, max_summary_facts=3))
    await store.open_lease(access, 120, context_id=CONTEXT)
    assert await _search_admitted(api) is Reason.RECALL_LIMIT_REACHED


async def test_one_automatic_save_per_five_turns(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    """ADR 0023 §43: a lease is one user turn, and an automatic save is admitted only while
    the scope's summaries stay within its leases / minUserTurns; a replayed delegation opens
    no lease and so counts no turn; a refused admission takes no turn's save."""
    access = await enabled(store, scope_record(hourly_operation_ceiling=7))
    api = DelegatedStore(delegate_pool)
    summary = {Operation.SUMMARIZE: 1, Operation.SAVE: 1, Operation.EMBEDDING: 1}
    delegation = str(uuid.uuid4())
    await store.open_lease(access, 120, context_id=CONTEXT)  # turn 1
    for _ in range(4):  # turn 2, then three replays of its delegation: no new turn
        await store.open_lease(access, 120, delegation, context_id=CONTEXT)
    assert await refused(api.admit(ALICE_HELPER, summary)) is Reason.SUMMARY_CADENCE_REACHED
    await past_turns(store, access, 3)  # five turns now
    await api.admit(ALICE_HELPER, summary)
    assert await refused(api.admit(ALICE_HELPER, summary)) is Reason.SUMMARY_CADENCE_REACHED
    await past_turns(store, access, 5)  # ten: the second save is due ...
    await api.admit(ALICE_HELPER, {Operation.SAVE: 1, Operation.EMBEDDING: 1}, explicit=True)
    # ... but the hourly ceiling (7) has 3 + 2 units spent: 3 more do not fit, and the
    # refused admission does not use up the turn's save.
    await api.admit(ALICE_HELPER, {Operation.LOAD: 1, Operation.EMBEDDING: 1})
    assert await refused(api.admit(ALICE_HELPER, summary)) is Reason.COST_CEILING_REACHED
    assert await pool.fetchval(
        "SELECT summaries FROM fgentic_memory.summary_cadence WHERE scope_key = $1",
        access.scope_key) == 1
    # A scope may ask for more turns per save (automaticSave.minUserTurns).
    await store.ensure_scope(scope_record(hourly_operation_ceiling=7, min_user_turns=10))
    assert await pool.fetchval(
        "SELECT min_user_turns FROM fgentic_memory.scope WHERE scope_key = $1",
        access.scope_key) == 10


async def test_a_summary_is_admitted_before_the_model_and_charged_once(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    """sql/0013: the model route admits kagent's summarisation before the model is called:
    charged to the attributed user's leased scope, its input at most 16 KiB, its place in the
    cadence reserved; the automatic save that follows takes the reservation and is not charged
    a second summarisation. Without that user's lease nothing is admitted, whoever else is
    leased (sql/0016)."""
    api = DelegatedStore(delegate_pool)
    access = await enabled(store, scope_record(hourly_operation_ceiling=20))
    assert await refused(api.admit_summary("team-a", "helper", 100, seen(ALICE))) is \
        Reason.LEASE_MISSING
    assert await pool.fetchval("SELECT fgentic_memory.max_summary_input_bytes()") == \
        bounds.MAX_SUMMARY_INPUT_BYTES
    await past_turns(store, access, 4)
    await store.open_lease(access, 120, context_id=CONTEXT)  # the fifth turn is running
    assert await refused(api.admit_summary(
        "team-a", "helper", bounds.MAX_SUMMARY_INPUT_BYTES + 1, seen(ALICE))) is \
        Reason.SUMMARY_INPUT_TOO_LARGE
    await api.admit_summary("team-a", "helper", bounds.MAX_SUMMARY_INPUT_BYTES, seen(ALICE))
    # One summary per five turns, the reservation included: a second one is refused before
    # the model works, and so is an automatic save that brings no reservation of its own.
    assert await refused(api.admit_summary("team-a", "helper", 10, seen(ALICE))) is \
        Reason.SUMMARY_CADENCE_REACHED
    assert await pool.fetchval(LEDGER, access.scope_key) == 1
    automatic = {Operation.SUMMARIZE: 1, Operation.SAVE: 2, Operation.EMBEDDING: 2}
    await api.admit(ALICE_HELPER, automatic)  # takes the reservation: 4 units, not 5
    assert await pool.fetchval(LEDGER, access.scope_key) == 5
    assert await refused(api.admit(ALICE_HELPER, automatic)) is Reason.SUMMARY_CADENCE_REACHED
    assert tuple(await pool.fetchrow(
        "SELECT summaries, reserved FROM fgentic_memory.summary_cadence WHERE scope_key = $1",
        access.scope_key)) == (1, 0)
    # Five turns on, a save with no summary at the route (kagent's raw fallback) is charged
    # its summarisation as before.
    await past_turns(store, access, 5)
    await api.admit(ALICE_HELPER, automatic)
    assert await pool.fetchval(LEDGER, access.scope_key) == 10
    # A scope with no automatic save at all refuses the summary before the model works.
    await store.ensure_scope(scope_record(hourly_operation_ceiling=20, max_summary_facts=0))
    await past_turns(store, access, 5)
    assert await refused(api.admit_summary("team-a", "helper", 10, seen(ALICE))) is \
        Reason.SUMMARY_TOO_LARGE
    # sql/0016: a request is charged to the user the memory API attributed it to; another
    # user's attempt charges no leased user. sql/0018: only while that user is the Agent's one
    # leased user: with Alice's turn still leased, Bob's request may be hers.
    await store.ensure_scope(scope_record(hourly_operation_ceiling=20))
    bob = await enabled(store, scope_record("team-a/bob-helper", subject_mxid="@bob:example.org",
                                            control_room="!bob-control:example.org"))
    await store.open_lease(bob, 120, context_id=CONTEXT)
    alice_spent = await pool.fetchval(LEDGER, access.scope_key)
    for subject in ("@bob:example.org", ALICE):
        assert await refused(api.admit_embedding("team-a", "helper", seen(subject))) is \
            Reason.SCOPE_AMBIGUOUS
        assert await refused(api.admit_summary("team-a", "helper", 10, seen(subject))) is \
            Reason.SCOPE_AMBIGUOUS
    for stranger in ("@carol:example.org", ""):
        assert await refused(api.admit_embedding("team-a", "helper", seen(stranger))) is \
            Reason.LEASE_MISSING
        assert await refused(api.admit_summary("team-a", "helper", 10, seen(stranger))) is \
            Reason.LEASE_MISSING
    assert await pool.fetchval(LEDGER, bob.scope_key) == 0
    # Alice's turn ends: Bob is the one leased user, and his request is his.
    for lease_id in await pool.fetch(
            "SELECT lease_id::text FROM fgentic_memory.delegation_lease"
            " WHERE scope_key = $1 AND closed_at IS NULL", access.scope_key):
        assert await store.close_lease(access.scope_key, lease_id[0]) is True
    await api.admit_embedding("team-a", "helper", seen("@bob:example.org"))
    assert await pool.fetchval(LEDGER, bob.scope_key) == 1
    assert await refused(api.admit_embedding("team-a", "helper", seen(ALICE))) is \
        Reason.LEASE_MISSING
    assert await pool.fetchval(LEDGER, access.scope_key) == alice_spent
